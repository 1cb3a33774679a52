package openaitest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ChatRequest is a decoded POST /v1/chat/completions body.
type ChatRequest struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitempty"`
	// ToolChoice is "auto", "none", "required" or an object, as sent.
	ToolChoice json.RawMessage `json:"tool_choice,omitempty"`
	// Temperature and MaxTokens are nil when the client left them out.
	Temperature         *float64 `json:"temperature,omitempty"`
	MaxTokens           *int     `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int     `json:"max_completion_tokens,omitempty"`
	Stop                []string `json:"stop,omitempty"`
	Stream              bool     `json:"stream,omitempty"`
}

// Message is one chat message of a request.
type Message struct {
	Role string `json:"role"`
	// Content is the text; an array of content parts is joined into one
	// string. HasContent is false when "content" was absent or null.
	Content    string     `json:"-"`
	HasContent bool       `json:"-"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// UnmarshalJSON accepts content as a string, null, or an array of parts.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message
	var w struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Message(w.plain)
	c := strings.TrimSpace(string(w.Content))
	switch {
	case c == "" || c == "null":
	case c[0] == '"':
		m.HasContent = true
		return json.Unmarshal(w.Content, &m.Content)
	case c[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(w.Content, &parts); err != nil {
			return fmt.Errorf("content parts: %w", err)
		}
		m.HasContent = true
		for _, p := range parts {
			m.Content += p.Text
		}
	default:
		return fmt.Errorf("content must be a string, null or an array of parts, not %s", c)
	}
	return nil
}

// MarshalJSON writes content as a string, or null when absent.
func (m Message) MarshalJSON() ([]byte, error) {
	type plain Message
	w := struct {
		plain
		Content *string `json:"content"`
	}{plain: plain(m)}
	if m.HasContent {
		w.Content = &m.Content
	}
	return json.Marshal(w)
}

// ToolCall is one tool call in the OpenAI function-calling shape.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its raw JSON arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a tool schema of a request.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function is the function part of a tool schema.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Usage is the token usage of a response.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// chatResponse is the body of a successful chat completion.
type chatResponse struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   Usage    `json:"usage"`
}

type choice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	FinishReason string  `json:"finish_reason"`
}

// errorBody is the OpenAI error envelope.
type errorBody struct {
	Error APIError `json:"error"`
}

// APIError is the body of an OpenAI error response.
type APIError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	// Code is a string such as "rate_limit_exceeded", or null.
	Code  *string `json:"code"`
	Param *string `json:"param"`
}

type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}
