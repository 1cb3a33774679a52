package openaitest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/policy/openaitest"
)

// post sends body to the chat endpoint and decodes the JSON answer.
func post(t *testing.T, srv *openaitest.Server, key, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("response %q is not a JSON object: %v", b, err)
	}
	return resp.StatusCode, resp.Header, v
}

// roundTrip normalises v through JSON so that it compares with decoded
// responses.
func roundTrip(t *testing.T, v string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

const request = `{"model": "m1", "temperature": 0.5, "tool_choice": "auto",
	"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
	"tools": [{"type": "function", "function": {"name": "execute_command", "parameters": {"type": "object"}}}]}`

func TestCompletionWireFormat(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.Reply{Content: "", ToolCalls: []openaitest.ToolCall{
			openaitest.Call("call_1", "execute_command", `{"command":"ls"}`),
			openaitest.Call("call_2", "execute_command", `{"command":`),
		}, Usage: &openaitest.Usage{PromptTokens: 5, CompletionTokens: 3, TotalTokens: 8}},
		openaitest.Text("bye"),
	))
	status, _, got := post(t, srv, "", request)
	if status != http.StatusOK {
		t.Fatalf("status = %d, want 200: %v", status, got)
	}
	if _, ok := got["created"].(float64); !ok {
		t.Errorf("created = %v, want a number", got["created"])
	}
	delete(got, "created")
	want := roundTrip(t, `{
		"id": "chatcmpl-openaitest-0", "object": "chat.completion", "model": "m1",
		"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
			{"id": "call_1", "type": "function", "function": {"name": "execute_command", "arguments": "{\"command\":\"ls\"}"}},
			{"id": "call_2", "type": "function", "function": {"name": "execute_command", "arguments": "{\"command\":"}}]}}],
		"usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}`)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}

	_, _, got = post(t, srv, "", request)
	choice := got["choices"].([]any)[0].(map[string]any)
	if choice["finish_reason"] != "stop" || choice["message"].(map[string]any)["content"] != "bye" {
		t.Errorf("text reply = %v, want content bye and finish_reason stop", choice)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("recorded %d requests, want 2", len(reqs))
	}
	body := reqs[0].Body
	if body.Model != "m1" || *body.Temperature != 0.5 || string(body.ToolChoice) != `"auto"` || len(body.Tools) != 1 || body.Tools[0].Function.Name != "execute_command" {
		t.Errorf("decoded request = %+v", body)
	}
	wantMsgs := []openaitest.Message{{Role: "system", Content: "sys", HasContent: true}, {Role: "user", Content: "hi", HasContent: true}}
	if diff := cmp.Diff(wantMsgs, body.Messages); diff != "" {
		t.Errorf("decoded messages (-want +got):\n%s", diff)
	}
	if reqs[1].Time.Before(reqs[0].Time) {
		t.Errorf("request times out of order")
	}
}

func TestErrorReplies(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t, openaitest.RateLimited("2"), openaitest.Error(http.StatusInternalServerError, "boom")))
	status, header, got := post(t, srv, "", request)
	if status != http.StatusTooManyRequests || header.Get("Retry-After") != "2" {
		t.Errorf("status %d, Retry-After %q; want 429 and 2", status, header.Get("Retry-After"))
	}
	want := roundTrip(t, `{"error": {"message": "Rate limit reached; please retry later.", "type": "requests", "code": "rate_limit_exceeded", "param": null}}`)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("429 body (-want +got):\n%s", diff)
	}
	status, _, got = post(t, srv, "", request)
	want = roundTrip(t, `{"error": {"message": "boom", "type": "server_error", "code": null, "param": null}}`)
	if diff := cmp.Diff(want, got); status != http.StatusInternalServerError || diff != "" {
		t.Errorf("500 reply: status %d (-want +got):\n%s", status, diff)
	}
}

func TestAPIKey(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Text("ok")), openaitest.WithAPIKey("k"))
	if status, _, got := post(t, srv, "wrong", request); status != http.StatusUnauthorized || got["error"].(map[string]any)["code"] != "invalid_api_key" {
		t.Errorf("wrong key: status %d, body %v; want 401 invalid_api_key", status, got)
	}
	if status, _, _ := post(t, srv, "k", request); status != http.StatusOK {
		t.Errorf("right key: status %d, want 200", status)
	}
}

func TestRejectsMalformedConversations(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"not json", `{"model":`, "could not parse the JSON body"},
		{"no model", `{"messages": [{"role": "user", "content": "x"}]}`, "model parameter"},
		{"no messages", `{"model": "m", "messages": []}`, "at least one message"},
		{"orphan tool message", `{"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c1", "content": "out"}]}`, "must be a response to a preceding message"},
		{"unanswered call", `{"model": "m", "messages": [{"role": "user", "content": "x"},
			{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}, {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "out"}, {"role": "user", "content": "next"}]}`, "responding to each 'tool_call_id'"},
		{"tool message without content", `{"model": "m", "messages": [{"role": "user", "content": "x"},
			{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
			{"role": "tool", "tool_call_id": "c1"}]}`, "messages[2].content is required"},
		{"bad role", `{"model": "m", "messages": [{"role": "robot", "content": "x"}]}`, "not a valid role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t, openaitest.Queue(t))
			status, _, got := post(t, srv, "", tt.body)
			msg, _ := got["error"].(map[string]any)["message"].(string)
			if status != http.StatusBadRequest || !strings.Contains(msg, tt.want) {
				t.Errorf("status %d, message %q; want 400 mentioning %q", status, msg, tt.want)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("recorded %d requests, want 1", n)
			}
		})
	}
}

func TestModels(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t), openaitest.WithModels("a", "b"))
	resp, err := http.Get(srv.URL + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "a" || list.Data[1].Object != "model" {
		t.Errorf("models = %+v", list)
	}
}
