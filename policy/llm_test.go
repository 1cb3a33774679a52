package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
	"github.com/gymserver/gymserver/policy"
	"github.com/gymserver/gymserver/policy/openaitest"
)

const testKey = "sk-test"

// newLLM returns an LLM policy against srv with fast retries.
func newLLM(t *testing.T, srv *openaitest.Server, edit func(*policy.Config)) *policy.LLM {
	t.Helper()
	cfg := policy.DefaultConfig()
	cfg.Model = "test-model"
	cfg.APIKey = testKey
	cfg.BaseURL = srv.URL
	cfg.RetryBaseDelay = time.Millisecond
	cfg.RetryMaxDelay = 10 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if edit != nil {
		edit(&cfg)
	}
	l, err := policy.NewLLM(cfg)
	if err != nil {
		t.Fatalf("NewLLM: %v", err)
	}
	return l
}

// start is the initial transcript of an episode.
func start() []gym.Message {
	return []gym.Message{
		{Role: gym.RoleSystem, Content: "You are a careful engineer."},
		{Role: gym.RoleUser, Content: "Build a calculator API."},
	}
}

func TestActNativeToolCalls(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t, openaitest.Reply{
		Content: "Let me look around.",
		ToolCalls: []openaitest.ToolCall{
			openaitest.Call("call_a", "execute_command", `{"command": "ls -la"}`),
			openaitest.Call("call_b", "read_file", `{"filepath": "app.py"}`),
			openaitest.Call("call_c", "write_file", `{"filepath": "x.txt", "content": "hi\n"}`),
		},
		Usage: &openaitest.Usage{PromptTokens: 120, CompletionTokens: 30, TotalTokens: 150},
	}), openaitest.WithAPIKey(testKey))
	l := newLLM(t, srv, nil)

	turn, err := l.Act(t.Context(), start(), gym.StandardTools())
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	want := gym.Turn{
		Message: gym.Message{Role: gym.RoleAssistant, Content: "Let me look around.", ToolCalls: []gym.ToolCall{
			gym.NewToolCall("call_a", "execute_command", `{"command": "ls -la"}`),
			gym.NewToolCall("call_b", "read_file", `{"filepath": "app.py"}`),
			gym.NewToolCall("call_c", "write_file", `{"filepath": "x.txt", "content": "hi\n"}`),
		}},
		Usage:        gym.Usage{PromptTokens: 120, CompletionTokens: 30, TotalTokens: 150, Calls: 1},
		FinishReason: "tool_calls",
	}
	if diff := cmp.Diff(want, turn); diff != "" {
		t.Errorf("turn (-want +got):\n%s", diff)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("server got %d requests, want 1", len(reqs))
	}
	got := reqs[0].Body
	if got.Model != "test-model" {
		t.Errorf("model = %q, want test-model", got.Model)
	}
	if got.Temperature == nil || *got.Temperature != 0.7 {
		t.Errorf("temperature = %v, want 0.7", got.Temperature)
	}
	if got.MaxTokens == nil || *got.MaxTokens != 4096 {
		t.Errorf("max_tokens = %v, want 4096", got.MaxTokens)
	}
	if string(got.ToolChoice) != `"auto"` {
		t.Errorf("tool_choice = %s, want \"auto\"", got.ToolChoice)
	}
	var names []string
	for _, tool := range got.Tools {
		names = append(names, tool.Function.Name)
		var schema gym.Schema
		if err := json.Unmarshal(tool.Function.Parameters, &schema); err != nil || schema.Type != "object" {
			t.Errorf("tool %s: parameters %s are not an object schema (%v)", tool.Function.Name, tool.Function.Parameters, err)
		}
	}
	if diff := cmp.Diff([]string{"execute_command", "write_file", "read_file", "mark_done"}, names); diff != "" {
		t.Errorf("tools sent (-want +got):\n%s", diff)
	}
	wantMsgs := []openaitest.Message{
		{Role: "system", Content: "You are a careful engineer.", HasContent: true},
		{Role: "user", Content: "Build a calculator API.", HasContent: true},
	}
	if diff := cmp.Diff(wantMsgs, got.Messages); diff != "" {
		t.Errorf("messages sent (-want +got):\n%s", diff)
	}
}

func TestActSendsEachToolResultForItsCall(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t, openaitest.Text("done")))
	l := newLLM(t, srv, nil)
	msgs := append(start(),
		gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{
			gym.NewToolCall("call_1", "execute_command", `{"command":"pwd"}`),
			gym.NewToolCall("call_2", "read_file", `{"filepath":`),
		}},
		gym.Message{Role: gym.RoleTool, ToolCallID: "call_1", Name: "execute_command", Content: "/workspace\n"},
		gym.Message{Role: gym.RoleTool, ToolCallID: "call_2", Name: "read_file", Content: ""},
	)
	turn, err := l.Act(t.Context(), msgs, gym.StandardTools())
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	if turn.Message.Content != "done" || len(turn.Message.ToolCalls) != 0 || turn.FinishReason != "stop" {
		t.Errorf("turn = %+v, want the text answer \"done\" without calls", turn)
	}
	want := []openaitest.Message{
		{Role: "system", Content: "You are a careful engineer.", HasContent: true},
		{Role: "user", Content: "Build a calculator API.", HasContent: true},
		{Role: "assistant", ToolCalls: []openaitest.ToolCall{
			openaitest.Call("call_1", "execute_command", `{"command":"pwd"}`),
			openaitest.Call("call_2", "read_file", `{"filepath":`),
		}},
		{Role: "tool", ToolCallID: "call_1", Content: "/workspace\n", HasContent: true},
		{Role: "tool", ToolCallID: "call_2", Content: "(empty)", HasContent: true},
	}
	if diff := cmp.Diff(want, srv.Requests()[0].Body.Messages); diff != "" {
		t.Errorf("messages sent (-want +got):\n%s", diff)
	}
}

func TestActKeepsInvalidArgumentsRaw(t *testing.T) {
	bad := []string{`{"command": "ls`, `not json at all`, ``, `{"command": "echo \u00e9"} trailing`}
	var calls []openaitest.ToolCall
	for i, a := range bad {
		calls = append(calls, openaitest.Call("call_"+string(rune('a'+i)), "execute_command", a))
	}
	srv := openaitest.New(t, openaitest.Queue(t, openaitest.Calls(calls...)))
	l := newLLM(t, srv, nil)
	turn, err := l.Act(t.Context(), start(), gym.StandardTools())
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	var got []string
	for _, c := range turn.Message.ToolCalls {
		got = append(got, c.Function.Arguments)
	}
	if diff := cmp.Diff(bad, got); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
}

func TestActGivesCallsUniqueIDs(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t, openaitest.Calls(
		openaitest.Call("", "execute_command", `{"command":"a"}`),
		openaitest.Call("dup", "execute_command", `{"command":"b"}`),
		openaitest.Call("dup", "execute_command", `{"command":"c"}`),
	)))
	l := newLLM(t, srv, nil)
	turn, err := l.Act(t.Context(), start(), gym.StandardTools())
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	seen := map[string]bool{}
	for _, c := range turn.Message.ToolCalls {
		if c.ID == "" || seen[c.ID] || c.Type != "function" {
			t.Errorf("call %+v: want a unique non-empty id and type function", c)
		}
		seen[c.ID] = true
	}
	if turn.Message.ToolCalls[1].ID != "dup" {
		t.Errorf("first use of id %q was replaced by %q", "dup", turn.Message.ToolCalls[1].ID)
	}
}

func TestActRetriesRateLimitAfterRetryAfter(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.RateLimited("1"),
		openaitest.Calls(openaitest.Call("call_1", "mark_done", `{}`)),
	))
	l := newLLM(t, srv, nil)
	turn, err := l.Act(t.Context(), start(), gym.StandardTools())
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	if len(turn.Message.ToolCalls) != 1 {
		t.Errorf("turn has %d calls, want 1", len(turn.Message.ToolCalls))
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("server got %d requests, want 2", len(reqs))
	}
	// The backoff alone is about a millisecond; the server asked for 1s.
	if gap := reqs[1].Time.Sub(reqs[0].Time); gap < 950*time.Millisecond || gap > 5*time.Second {
		t.Errorf("retry came %s after the 429, want about 1s", gap)
	}
}

func TestActRetries(t *testing.T) {
	ok := openaitest.Text("ok")
	tests := []struct {
		name    string
		replies []openaitest.Reply
	}{
		{"server error", []openaitest.Reply{openaitest.Error(http.StatusInternalServerError, "boom"), ok}},
		{"bad gateway then unavailable", []openaitest.Reply{
			openaitest.Error(http.StatusBadGateway, "upstream"),
			openaitest.Error(http.StatusServiceUnavailable, "overloaded"), ok}},
		{"rate limit without retry-after", []openaitest.Reply{openaitest.Error(http.StatusTooManyRequests, "slow down"), ok}},
		{"non-json error body", []openaitest.Reply{{Status: http.StatusBadGateway, Body: "<html>bad gateway</html>"}, ok}},
		{"malformed response", []openaitest.Reply{{Body: `{"choices": [`}, ok}},
		{"no choices", []openaitest.Reply{{Body: `{"id":"x","object":"chat.completion","choices":[]}`}, ok}},
		{"per-call timeout", []openaitest.Reply{{Content: "late", Delay: 10 * time.Second}, ok}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t, openaitest.Queue(t, tt.replies...))
			l := newLLM(t, srv, func(c *policy.Config) { c.Timeout = 200 * time.Millisecond })
			turn, err := l.Act(t.Context(), start(), gym.StandardTools())
			if err != nil {
				t.Fatalf("Act: %v", err)
			}
			if turn.Message.Content != "ok" {
				t.Errorf("content = %q, want ok", turn.Message.Content)
			}
			if n := len(srv.Requests()); n != len(tt.replies) {
				t.Errorf("server got %d requests, want %d", n, len(tt.replies))
			}
		})
	}
}

func TestActGivesUpAfterMaxRetries(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Error(http.StatusInternalServerError, "The server had an error")))
	l := newLLM(t, srv, func(c *policy.Config) { c.MaxRetries = 2 })
	_, err := l.Act(t.Context(), start(), gym.StandardTools())
	if gym.ClassOf(err) != gym.ClassPolicy {
		t.Fatalf("Act error = %v (class %q), want class %q", err, gym.ClassOf(err), gym.ClassPolicy)
	}
	for _, want := range []string{"test-model", "status 500: The server had an error (server_error) (3 attempts)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("server got %d requests, want 3 (1 + MaxRetries)", n)
	}
}

func TestActClientErrorsFailAtOnce(t *testing.T) {
	tests := []struct {
		name  string
		reply openaitest.Reply
		key   string
		want  []string
	}{
		{"unauthorized", openaitest.Text("never"), "sk-wrong", []string{"status 401", "Incorrect API key", "check the API key", "1 attempt)"}},
		{"bad request", openaitest.Error(http.StatusBadRequest, "context too long"), testKey, []string{"status 400", "context too long"}},
		{"forbidden", openaitest.Error(http.StatusForbidden, "region"), testKey, []string{"status 403", "check the API key"}},
		{"not found", openaitest.Error(http.StatusNotFound, "no such model"), testKey, []string{"status 404", "no such model", "model id"}},
		{"retry-after too long", openaitest.RateLimited("3600"), testKey, []string{"status 429", "retry after 1h0m0s", "retry max delay"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t, openaitest.Always(tt.reply), openaitest.WithAPIKey(testKey))
			l := newLLM(t, srv, func(c *policy.Config) { c.APIKey = tt.key })
			_, err := l.Act(t.Context(), start(), gym.StandardTools())
			if !errors.Is(err, gym.ErrPolicy) {
				t.Fatalf("Act error = %v, want one wrapping gym.ErrPolicy", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("server got %d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestActNetworkErrorIsRetriedThenClassified(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	cfg := policy.DefaultConfig()
	cfg.BaseURL = gone.URL + "/v1"
	cfg.RetryBaseDelay = time.Millisecond
	cfg.MaxRetries = 1
	l, err := policy.NewLLM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Act(t.Context(), start(), nil)
	if gym.ClassOf(err) != gym.ClassPolicy || !strings.Contains(err.Error(), "2 attempts") {
		t.Errorf("Act error = %v (class %q), want a policy error after 2 attempts", err, gym.ClassOf(err))
	}
}

func TestActCancelledWhileWaitingIsNotAPolicyError(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	srv := openaitest.New(t, func(int, openaitest.ChatRequest) openaitest.Reply {
		cancel()
		return openaitest.RateLimited("5")
	})
	l := newLLM(t, srv, nil)
	_, err := l.Act(ctx, start(), nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, gym.ErrPolicy) {
		t.Errorf("Act error = %v, want context.Canceled and no policy class", err)
	}
}

func TestActUsage(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.Reply{Content: "a", Usage: &openaitest.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}},
		openaitest.Error(http.StatusInternalServerError, "retry me"),
		openaitest.Reply{Content: "b", Usage: &openaitest.Usage{PromptTokens: 20, CompletionTokens: 5, TotalTokens: 25}},
	))
	l := newLLM(t, srv, nil)
	var sum gym.Usage
	for range 2 {
		turn, err := l.Act(t.Context(), start(), nil)
		if err != nil {
			t.Fatalf("Act: %v", err)
		}
		sum.Add(turn.Usage)
	}
	want := gym.Usage{PromptTokens: 30, CompletionTokens: 7, TotalTokens: 37, Calls: 2}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Errorf("sum of turn usage (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, l.Usage()); diff != "" {
		t.Errorf("LLM.Usage (-want +got):\n%s", diff)
	}
}

func TestActTrimsContextOnTurnBoundaries(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Text("ok")))
	l := newLLM(t, srv, func(c *policy.Config) { c.MaxContextMessages = 6 })
	msgs := start()
	for _, id := range []string{"t1", "t2", "t3"} {
		msgs = append(msgs,
			gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{
				gym.NewToolCall(id+"a", "execute_command", `{"command":"true"}`),
				gym.NewToolCall(id+"b", "execute_command", `{"command":"false"}`),
			}},
			gym.Message{Role: gym.RoleTool, ToolCallID: id + "a", Content: "out a"},
			gym.Message{Role: gym.RoleTool, ToolCallID: id + "b", Content: "out b"},
		)
	}
	before := len(msgs)
	if _, err := l.Act(t.Context(), msgs, gym.StandardTools()); err != nil {
		t.Fatalf("Act: %v (the server rejects split tool calls)", err)
	}
	if len(msgs) != before {
		t.Errorf("Act changed the caller's transcript")
	}
	var got []string
	for _, m := range srv.Requests()[0].Body.Messages {
		got = append(got, m.Role+":"+m.ToolCallID)
	}
	want := []string{"system:", "user:", "assistant:", "tool:t3a", "tool:t3b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages sent (-want +got):\n%s", diff)
	}
}

func TestActTruncatesToolOutput(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Text("ok")))
	l := newLLM(t, srv, func(c *policy.Config) { c.MaxOutputLength = 100 })
	long := "HEAD" + strings.Repeat("x", 10_000) + "TAIL"
	msgs := append(start(),
		gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("c1", "execute_command", `{"command":"yes"}`)}},
		gym.Message{Role: gym.RoleTool, ToolCallID: "c1", Content: long},
	)
	if _, err := l.Act(t.Context(), msgs, gym.StandardTools()); err != nil {
		t.Fatalf("Act: %v", err)
	}
	if msgs[3].Content != long {
		t.Errorf("Act changed the caller's tool message")
	}
	sent := srv.Requests()[0].Body.Messages[3].Content
	if !strings.HasPrefix(sent, "HEAD") || !strings.HasSuffix(sent, "TAIL") || !strings.Contains(sent, "[... 9908 bytes omitted ...]") {
		t.Errorf("tool output sent = %q, want head, tail and the omitted count", sent)
	}
}

func TestActTemperatureZeroIsSent(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Text("ok")))
	l := newLLM(t, srv, func(c *policy.Config) { c.Temperature = 0; c.MaxTokens = 0 })
	if _, err := l.Act(t.Context(), start(), nil); err != nil {
		t.Fatalf("Act: %v", err)
	}
	req := srv.Requests()[0].Body
	if req.Temperature == nil || *req.Temperature > 1e-30 {
		t.Errorf("temperature = %v, want present and 0", req.Temperature)
	}
	if req.MaxTokens != nil {
		t.Errorf("max_tokens = %d, want it left out", *req.MaxTokens)
	}
	if len(req.Tools) != 0 || req.ToolChoice != nil {
		t.Errorf("tools sent without tools: %v %s", req.Tools, req.ToolChoice)
	}
}

func TestActReAct(t *testing.T) {
	answer := "Thought: I should list the files.\nAction: execute_command\nAction Input: {\"command\": \"ls\"}"
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.Text(answer),
		openaitest.Text("<tool_call>{\"name\": \"mark_done\", \"arguments\": {}}</tool_call>"),
		openaitest.Text("Action: execute_command\nAction Input: {\"command\": "),
		openaitest.Text("All done, nothing to call."),
	))
	l := newLLM(t, srv, func(c *policy.Config) { c.Mode = policy.ModeReAct })
	tools := gym.StandardTools()

	turn, err := l.Act(t.Context(), start(), tools)
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	if turn.Raw != answer || turn.Message.Content != answer || turn.ParseError != "" {
		t.Errorf("turn = %+v, want the raw text kept", turn)
	}
	// The environment reads the calls from the text, with the parser the
	// turn names.
	if turn.Parser != toolparse.ReAct || len(turn.Message.ToolCalls) != 0 {
		t.Fatalf("turn = %+v, want the text to be parsed with react by the environment", turn)
	}
	calls, err := toolparse.Calls(gym.Action{Text: turn.Message.Content, Parser: turn.Parser})
	if err != nil || len(calls) != 1 || calls[0].Function.Name != "execute_command" || calls[0].Function.Arguments != `{"command": "ls"}` {
		t.Fatalf("calls = %+v, %v; want execute_command {\"command\": \"ls\"}", calls, err)
	}
	calls[0].ID = "call_1_0" // as the environment names it
	req := srv.Requests()[0].Body
	if len(req.Tools) != 0 {
		t.Errorf("ReAct request has native tools")
	}
	if diff := cmp.Diff([]string{"\nObservation"}, req.Stop); diff != "" {
		t.Errorf("stop (-want +got):\n%s", diff)
	}
	sys := req.Messages[0].Content
	for _, want := range []string{"You are a careful engineer.", "## execute_command", "## mark_done", `"required":["command"]`, "Action Input:"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt does not contain %q:\n%s", want, sys)
		}
	}

	// The second call sees the first turn as text and its result as an
	// observation; the Hermes format is accepted.
	sent := turn.Message
	sent.ToolCalls = calls
	msgs := append(start(), sent, gym.Message{Role: gym.RoleTool, ToolCallID: calls[0].ID, Name: "execute_command", Content: "app.py\n"})
	turn, err = l.Act(t.Context(), msgs, tools)
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	if turn.Parser != toolparse.Hermes || len(turn.Message.ToolCalls) != 0 {
		t.Errorf("turn = %+v, want hermes text", turn)
	}
	var got []string
	for _, m := range srv.Requests()[1].Body.Messages[1:] {
		got = append(got, m.Role+": "+m.Content)
	}
	want := []string{"user: Build a calculator API.", "assistant: " + answer, "user: Observation (execute_command):\napp.py\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReAct transcript sent (-want +got):\n%s", diff)
	}

	// A malformed call is the environment's to report, not a policy error.
	turn, err = l.Act(t.Context(), start(), tools)
	if err != nil {
		t.Fatalf("Act: %v", err)
	}
	if turn.Parser != toolparse.ReAct || len(turn.Message.ToolCalls) != 0 || turn.ParseError != "" {
		t.Errorf("turn = %+v, want react text", turn)
	}

	// Plain text is text too; it holds no calls.
	turn, err = l.Act(t.Context(), start(), tools)
	if err != nil || turn.Parser == "" || len(turn.Message.ToolCalls) != 0 || turn.ParseError != "" {
		t.Errorf("turn = %+v, %v; want plain text", turn, err)
	}
}

func TestActConcurrent(t *testing.T) {
	srv := openaitest.New(t, func(n int, _ openaitest.ChatRequest) openaitest.Reply {
		return openaitest.Calls(openaitest.Call("call_1", "mark_done", `{}`))
	})
	l := newLLM(t, srv, nil)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = l.Act(t.Context(), start(), gym.StandardTools())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Act: %v", err)
	}
	if got := l.Usage().Calls; got != n {
		t.Errorf("usage counts %d calls, want %d", got, n)
	}
}

func TestDefaultConfig(t *testing.T) {
	c := policy.DefaultConfig()
	want := policy.Config{
		Model:          "anthropic/claude-sonnet-4",
		BaseURL:        "https://openrouter.ai/api/v1",
		Temperature:    0.7,
		MaxTokens:      4096,
		Timeout:        60 * time.Second,
		MaxRetries:     3,
		RetryBaseDelay: time.Second,
		RetryMaxDelay:  time.Minute,
		Mode:           policy.ModeNative,
		HighUsageCost:  10,
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("DefaultConfig (-want +got):\n%s", diff)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
}

func TestNewLLMRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		edit func(*policy.Config)
		want []string
	}{
		{"empty model", func(c *policy.Config) { c.Model = "" }, []string{"model is empty"}},
		{"relative base url", func(c *policy.Config) { c.BaseURL = "openrouter.ai/api/v1" }, []string{"base url"}},
		{"temperature", func(c *policy.Config) { c.Temperature = 3 }, []string{"temperature 3"}},
		{"negatives", func(c *policy.Config) { c.MaxTokens = -1; c.Timeout = -1 }, []string{"max tokens is negative", "timeout is negative"}},
		{"mode", func(c *policy.Config) { c.Mode = "xml" }, []string{`mode "xml" is unknown`}},
		{"usage settings", func(c *policy.Config) {
			c.CacheSize, c.HighUsageCost, c.Price = -1, -1, policy.Price{InputPer1K: -1}
		}, []string{"cache size is negative", "high usage cost -1 is negative", "price $-1/$0 per 1k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := policy.DefaultConfig()
			tt.edit(&c)
			_, err := policy.NewLLM(c)
			if gym.ClassOf(err) != gym.ClassInvalidArgument {
				t.Fatalf("NewLLM error = %v, want class %q", err, gym.ClassInvalidArgument)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}
