package policy

import (
	"encoding/json"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
)

// emptyContent stands in for an empty tool result or assistant answer:
// endpoints reject messages without content.
const emptyContent = "(empty)"

// nativeMessages converts a transcript for function calling. Tool results
// are truncated to maxOut bytes.
func nativeMessages(msgs []gym.Message, maxOut int) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(msgs))
	for _, m := range msgs {
		om := openai.ChatCompletionMessage{Role: m.Role, Content: m.Content}
		switch m.Role {
		case gym.RoleAssistant:
			for _, c := range m.ToolCalls {
				om.ToolCalls = append(om.ToolCalls, openai.ToolCall{
					ID:       c.ID,
					Type:     openai.ToolTypeFunction,
					Function: openai.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments},
				})
			}
			if om.Content == "" && len(om.ToolCalls) == 0 {
				om.Content = emptyContent
			}
		case gym.RoleTool:
			// Name is left out: OpenAI rejects it on tool messages.
			om.ToolCallID = m.ToolCallID
			om.Content = TruncateOutput(m.Content, maxOut)
			if om.Content == "" {
				om.Content = emptyContent
			}
		}
		out = append(out, om)
	}
	return out
}

// nativeTools converts tool schemas.
func nativeTools(tools []gym.Tool) []openai.Tool {
	out := make([]openai.Tool, 0, len(tools))
	for _, t := range tools {
		out = append(out, openai.Tool{
			Type: openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{
				Name:        t.Function.Name,
				Description: t.Function.Description,
				Parameters:  t.Function.Parameters,
			},
		})
	}
	return out
}

// reactMessages converts a transcript for a model without function
// calling: the tools are described in the system message, assistant tool
// calls are written as Action lines and tool results become one user
// message of observations per turn.
func reactMessages(msgs []gym.Message, tools []gym.Tool, maxOut int) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(msgs)+1)
	rest := msgs
	if prompt := reactPrompt(tools); prompt != "" {
		sys := prompt
		if len(msgs) > 0 && msgs[0].Role == gym.RoleSystem {
			sys = msgs[0].Content + "\n\n" + prompt
			rest = msgs[1:]
		}
		out = append(out, openai.ChatCompletionMessage{Role: gym.RoleSystem, Content: sys})
	}
	var results []gym.Message
	flush := func() {
		if len(results) > 0 {
			out = append(out, openai.ChatCompletionMessage{Role: gym.RoleUser, Content: observations(results, maxOut)})
			results = nil
		}
	}
	for _, m := range rest {
		switch m.Role {
		case gym.RoleTool:
			results = append(results, m)
		case gym.RoleAssistant:
			flush()
			out = append(out, openai.ChatCompletionMessage{Role: gym.RoleAssistant, Content: actionText(m)})
		default:
			flush()
			out = append(out, openai.ChatCompletionMessage{Role: m.Role, Content: m.Content})
		}
	}
	flush()
	return out
}

// actionText is an assistant message as text: its content, followed by its
// tool calls as Action lines unless the content already holds them.
func actionText(m gym.Message) string {
	text := m.Content
	if len(m.ToolCalls) > 0 {
		if calls, err := toolparse.Parse(toolparse.Detect(text), text); err != nil || len(calls) == 0 {
			var b strings.Builder
			b.WriteString(text)
			for _, c := range m.ToolCalls {
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				fmt.Fprintf(&b, "Action: %s\nAction Input: %s", c.Function.Name, c.Function.Arguments)
			}
			text = b.String()
		}
	}
	if text == "" {
		return emptyContent
	}
	return text
}

// observations renders the tool results of one turn.
func observations(results []gym.Message, maxOut int) string {
	var b strings.Builder
	for i, r := range results {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("Observation")
		if len(results) > 1 {
			fmt.Fprintf(&b, " %d", i+1)
		}
		if r.Name != "" {
			fmt.Fprintf(&b, " (%s)", r.Name)
		}
		b.WriteString(":\n")
		out := TruncateOutput(r.Content, maxOut)
		if out == "" {
			out = emptyContent
		}
		b.WriteString(out)
	}
	return b.String()
}

// reactPrompt describes the tools and the call format; "" without tools.
func reactPrompt(tools []gym.Tool) string {
	if len(tools) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Tools\n\nYou can use the following tools.\n")
	for _, t := range tools {
		params, err := json.Marshal(t.Function.Parameters)
		if err != nil {
			params = []byte("{}")
		}
		fmt.Fprintf(&b, "\n## %s\n%s\nArguments (JSON Schema): %s\n", t.Function.Name, t.Function.Description, params)
	}
	b.WriteString(`
# How to call a tool

Write a line "Action: " followed by the tool name, then a line "Action Input: " followed by the arguments as one JSON object on that line, for example:

Thought: what you want to do and why.
Action: TOOL_NAME
Action Input: {"argument": "value"}

To call several tools at once, repeat the Action and Action Input lines. Then stop: the results come back in the next message, each starting with "Observation". Never write an Observation yourself.
`)
	return b.String()
}
