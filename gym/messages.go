package gym

import "strconv"

// Chat roles used in Message.Role.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat message in the OpenAI chat-completions shape, so a
// transcript can be fed to a trainer or an API without conversion.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ToolCalls is set on assistant messages that call tools.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is set on tool messages: the call this message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on tool messages.
	Name string `json:"name,omitempty"`
}

// ToolCall is one call of a tool, in the OpenAI function-calling shape.
type ToolCall struct {
	// ID identifies the call; the observation's tool message for this call
	// carries the same ID. Environments assign one when it is empty.
	ID string `json:"id"`
	// Type is always "function".
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the tool and carries its arguments as raw JSON text,
// exactly as the model produced it (it may be malformed).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// CallID is the id an environment gives the call at index (0-based) of
// step (1-based) when the call has none: "call_<step>_<index>". Steps are
// numbered once per session (a fork goes on from its snapshot's count), so
// these ids are unique within a session.
func CallID(step, index int) string {
	return "call_" + strconv.Itoa(step) + "_" + strconv.Itoa(index)
}

// NewToolCall returns a function tool call with the given id, name and raw
// JSON arguments.
func NewToolCall(id, name, arguments string) ToolCall {
	return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: arguments}}
}

// Tool is a tool schema in the OpenAI function format.
type Tool struct {
	// Type is always "function".
	Type     string       `json:"type"`
	Function FunctionSpec `json:"function"`
}

// FunctionSpec describes one function tool.
type FunctionSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  Schema `json:"parameters"`
}

// Schema is the flat JSON Schema of a tool's parameters: an object whose
// properties are scalars, arrays of scalars or free-form objects (see
// Property). Required is always present, possibly empty.
type Schema struct {
	Type                 string              `json:"type"`
	Properties           map[string]Property `json:"properties"`
	Required             []string            `json:"required"`
	AdditionalProperties bool                `json:"additionalProperties"`
}

// Property is the schema of one parameter. Type is one of the JSON
// Schema types "string", "number", "integer", "boolean", "array" or
// "object" (any object). Enum, only for strings, lists the allowed values;
// Items, only for arrays, is the schema of every element, itself a scalar.
type Property struct {
	Type        string    `json:"type"`
	Description string    `json:"description"`
	Enum        []string  `json:"enum,omitempty"`
	Items       *Property `json:"items,omitempty"`
}

// Usage counts tokens spent by a policy.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// Calls is the number of API calls the counts cover.
	Calls int `json:"calls"`
	// CachedCalls counts the answers served from a response cache instead
	// of an API call; they spent no tokens.
	CachedCalls int `json:"cached_calls,omitempty"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens += o.TotalTokens
	u.Calls += o.Calls
	u.CachedCalls += o.CachedCalls
}

// Tokens returns the tokens u counts: TotalTokens, or the sum of prompt
// and completion tokens when the endpoint did not report a total.
func (u Usage) Tokens() int {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.PromptTokens + u.CompletionTokens
}
