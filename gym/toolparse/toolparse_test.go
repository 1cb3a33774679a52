package toolparse_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
	"github.com/gymserver/gymserver/internal/goldentest"
)

// golden is what a golden file records for one parse.
type golden struct {
	Calls []gym.ToolCall `json:"calls"`
	Error string         `json:"error,omitempty"`
	Class gym.ErrorClass `json:"class,omitempty"`
}

func TestParseGolden(t *testing.T) {
	tests := []struct {
		parser, name, text string
		wantErr            gym.ErrorClass
	}{
		{"hermes", "one", "I will list files.\n<tool_call>\n{\"name\": \"execute_command\", \"arguments\": {\"command\": \"ls -la\"}}\n</tool_call>", ""},
		{"hermes", "several", "<tool_call>{\"name\": \"write_file\", \"arguments\": {\"filepath\": \"a.py\", \"content\": \"print(1)\\n\"}}</tool_call>\n<tool_call>{\"name\": \"execute_command\", \"arguments\": {\"command\": \"python3 a.py\"}, \"id\": \"mine\"}</tool_call>", ""},
		{"hermes", "string_arguments", `<tool_call>{"name": "read_file", "arguments": "{\"filepath\": \"x\"}"}</tool_call>`, ""},
		{"hermes", "no_arguments", `<tool_call>{"name": "mark_done"}</tool_call>`, ""},
		{"hermes", "unclosed", "<tool_call>\n{\"name\": \"mark_done\", \"arguments\": {}}\n", ""},
		{"hermes", "no_call", "I think the task is finished.", ""},
		{"hermes", "bad_json", `<tool_call>{"name": "execute_command", "arguments": {"command": "ls"</tool_call>`, gym.ClassAgent},
		{"hermes", "no_name", `<tool_call>{"arguments": {}}</tool_call>`, gym.ClassAgent},
		{"hermes", "array_arguments", `<tool_call>{"name": "x", "arguments": [1]}</tool_call>`, gym.ClassAgent},
		{"json", "object", `{"name": "execute_command", "arguments": {"command": "echo hi"}}`, ""},
		{"json", "array", `[{"name": "write_file", "arguments": {"filepath": "f", "content": "c"}}, {"name": "mark_done", "arguments": {}}]`, ""},
		{"json", "fenced", "Here is my call:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"filepath\": \"/etc/hostname\"}}\n```\nDone.", ""},
		{"json", "prose_around", `Sure. {"name": "mark_done", "parameters": {"message": "ok"}} That is all.`, ""},
		{"json", "no_call", "nothing to do", ""},
		{"json", "truncated", `{"name": "execute_command", "arguments": {"command": "ls"`, gym.ClassAgent},
		{"json", "bad_item", `[{"name": "mark_done"}, {"arguments": {}}]`, gym.ClassAgent},
		{"json", "empty_array", `[]`, ""},
		{"json", "bracket_in_prose", `The answer is [42].`, gym.ClassAgent},
		{"json", "other_fence", "```python\nprint(1)\n```\n{\"name\": \"mark_done\"}", ""},
		{"react", "one", "Thought: I should look around.\nAction: execute_command\nAction Input: {\"command\": \"ls\"}\n", ""},
		{"react", "several", "Action: write_file\nAction Input: {\"filepath\": \"a\",\n  \"content\": \"b\"}\nThought: now run it\nAction: execute_command\nAction Input: {\"command\": \"cat a\"}", ""},
		{"react", "no_input", "Action: mark_done", ""},
		{"react", "final_answer", "Thought: done\nFinal Answer: 42", ""},
		{"react", "bad_input", "Action: execute_command\nAction Input: ls -la", gym.ClassAgent},
		{"react", "string_input", "Action: execute_command\nAction Input: \"ls\"", gym.ClassAgent},
		{"react", "bad_name", "Action: run the tests please\nAction Input: {}", gym.ClassAgent},
		{"react", "quoted_name", "Action: **`execute_command`**\nAction Input: {\"command\": \"ls\"}", ""},
		{"react", "fenced_input", "Action: execute_command\nAction Input:\n```json\n{\"command\": \"ls\"}\n```\nObservation: (pending)", ""},
		{"react", "input_not_next", "Action: execute_command\nThought: with ls\nAction Input: {\"command\": \"ls\"}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.parser+"/"+tt.name, func(t *testing.T) {
			calls, err := toolparse.Parse(tt.parser, tt.text)
			if got := gym.ClassOf(err); got != tt.wantErr {
				t.Fatalf("Parse error %v (class %q), want class %q", err, got, tt.wantErr)
			}
			if err != nil && !errors.Is(err, gym.ErrAgent) {
				t.Errorf("error %v does not wrap gym.ErrAgent", err)
			}
			g := golden{Calls: calls, Class: gym.ClassOf(err)}
			if err != nil {
				g.Error = err.Error()
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(g); err != nil {
				t.Fatal(err)
			}
			goldentest.Check(t, filepath.Join("testdata", tt.parser+"_"+tt.name+".golden"), buf.Bytes())
		})
	}
}

func TestUnknownParser(t *testing.T) {
	_, err := toolparse.Parse("xml", "<call/>")
	if !errors.Is(err, gym.ErrInvalidArgument) {
		t.Errorf("unknown parser: %v, want ErrInvalidArgument", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("hermes", `<tool_call>{"name":"a","arguments":{}}</tool_call>`)
	f.Add("json", "```json\n[{\"name\":\"a\"}]\n```")
	f.Add("react", "Action: a\nAction Input: {}")
	f.Fuzz(func(t *testing.T, parser, text string) {
		calls, err := toolparse.Parse(parser, text)
		if err != nil {
			c := gym.ClassOf(err)
			if c != gym.ClassAgent && c != gym.ClassInvalidArgument {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		for _, c := range calls {
			if c.Function.Name == "" || c.Type != "function" {
				t.Fatalf("incomplete call %+v", c)
			}
		}
	})
}

func TestCallsDropsTextIDs(t *testing.T) {
	text := `<tool_call>{"id": "call_0", "name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b"}</tool_call>`
	calls, err := toolparse.Calls(gym.Action{Text: text, Parser: toolparse.Hermes})
	if err != nil || len(calls) != 2 {
		t.Fatalf("Calls: %+v, %v", calls, err)
	}
	for _, c := range calls {
		if c.ID != "" {
			t.Errorf("parsed call %s has id %q; the environment gives ids", c.Function.Name, c.ID)
		}
	}
	structured := []gym.ToolCall{gym.NewToolCall("mine", "a", "{}")}
	if calls, err := toolparse.Calls(gym.Action{ToolCalls: structured}); err != nil || len(calls) != 1 || calls[0].ID != "mine" {
		t.Errorf("structured: %+v, %v", calls, err)
	}
	if _, err := toolparse.Calls(gym.Action{Text: "x", Parser: "xml"}); !errors.Is(err, gym.ErrInvalidArgument) {
		t.Errorf("unknown parser: %v, want ErrInvalidArgument", err)
	}
}

func TestDetect(t *testing.T) {
	tests := []struct{ text, want string }{
		{"Thought: x\nAction: execute_command\nAction Input: {}", toolparse.ReAct},
		{`<tool_call>{"name": "a"}</tool_call>`, toolparse.Hermes},
		{`{"name": "a"}`, toolparse.JSON},
		{`[{"name": "a"}]`, toolparse.JSON},
		{"here:\n```json\n{\"name\": \"a\"}\n```", toolparse.JSON},
		{"no call at all", toolparse.ReAct},
	}
	for _, tt := range tests {
		if got := toolparse.Detect(tt.text); got != tt.want {
			t.Errorf("Detect(%q) = %s, want %s", tt.text, got, tt.want)
		}
	}
}
