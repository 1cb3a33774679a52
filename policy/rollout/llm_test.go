package rollout_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/policy"
	"github.com/gymserver/gymserver/policy/openaitest"
)

// llmPolicy returns an LLM policy on the fixture server.
func llmPolicy(t *testing.T, srv *openaitest.Server) gym.Policy {
	t.Helper()
	cfg := policy.DefaultConfig()
	cfg.Model = "test-model"
	cfg.BaseURL = srv.URL
	cfg.APIKey = "test-key"
	cfg.MaxRetries = 1
	cfg.RetryBaseDelay = time.Millisecond
	cfg.RetryMaxDelay = 10 * time.Millisecond
	p, err := policy.NewLLM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// toolReplies returns the tool messages of a request.
func toolReplies(req openaitest.Request) []openaitest.Message {
	var out []openaitest.Message
	for _, m := range req.Body.Messages {
		if m.Role == "tool" {
			out = append(out, m)
		}
	}
	return out
}

func TestLLMEpisodeThroughTheWire(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.Calls(
			openaitest.Call("c1", "write_file", `{"filepath": "out.txt", "content": "hello"}`),
			openaitest.Call("c2", "execute_command", `{"command": "cat out.txt"}`),
			openaitest.Call("c3", "execute_command", `{"command": "echo three"}`),
		),
		openaitest.Calls(
			openaitest.Call("bad", "execute_command", `{"command": "echo unterminated`),
			openaitest.Call("fly", "fly_to_the_moon", `{}`),
		),
		openaitest.Calls(openaitest.Call("rm", "execute_command", `{"command": "sudo rm -rf /"}`)),
		openaitest.Text("All done, I think."),
		openaitest.Calls(openaitest.Call("done", "mark_done", `{"message": "ok"}`)),
	))
	sum := mustRun(t, runSpec{
		envs:    []gym.Env{memEnv("mem")},
		policy:  llmPolicy(t, srv),
		plugins: []config.Plugin{{Name: "safety_filter", Enabled: true, Timeout: time.Second}},
	})
	reqs := srv.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d requests, want 5", len(reqs))
	}
	// Three calls, three distinct results, each answering its own id.
	got := toolReplies(reqs[1])
	want := map[string]string{"c1": "Wrote 5 bytes to /workspace/out.txt.", "c2": gymtest.Output("hello"), "c3": gymtest.Output("three\n")}
	if len(got) != 3 {
		t.Fatalf("request 1 has %d tool messages, want 3", len(got))
	}
	for _, m := range got {
		if want[m.ToolCallID] != m.Content {
			t.Errorf("tool message %s = %q, want %q", m.ToolCallID, m.Content, want[m.ToolCallID])
		}
	}
	// Malformed arguments and an unknown tool are observations, not the end.
	got = toolReplies(reqs[2])[3:]
	if len(got) != 2 || !strings.Contains(got[0].Content, "not a valid JSON") || !strings.Contains(got[1].Content, "unknown tool") {
		t.Errorf("request 2 tool messages = %+v", got)
	}
	// The blocked call's message reaches the model with the call's id.
	got = toolReplies(reqs[3])[5:]
	if len(got) != 1 || got[0].ToolCallID != "rm" || !strings.HasPrefix(got[0].Content, "Blocked by safety_filter") {
		t.Errorf("request 3 tool messages = %+v", got)
	}
	// A text answer gets a nudge as the next user message.
	last := reqs[4].Body.Messages[len(reqs[4].Body.Messages)-1]
	if last.Role != "user" || !strings.Contains(last.Content, "mark_done") {
		t.Errorf("message after a text answer = %+v", last)
	}

	tr := trajectory(t, sum, "mem", 0)
	er := tr.EpisodeResult
	if !er.Success || er.FinalScore != 1 || er.TerminatedReason != gym.ReasonCompleted || er.Actions != 7 || er.ActionErrors != 3 {
		t.Errorf("episode result = %+v", er)
	}
	if tr.Usage.Calls != 5 || tr.Usage.TotalTokens == 0 || len(tr.Turns) != 5 || tr.Turns[3].ToolCalls != 0 || tr.Turns[0].FinishReason != "tool_calls" {
		t.Errorf("usage = %+v, turns = %+v", tr.Usage, tr.Turns)
	}
	if args := tr.Steps[3].Action.ToolCall.Function.Arguments; args != `{"command": "echo unterminated` {
		t.Errorf("raw arguments = %q", args)
	}
}

func TestFailingEndpointEndsWithPolicyError(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Error(http.StatusInternalServerError, "the model is on fire")))
	env := memEnv("mem")
	sum := mustRun(t, runSpec{envs: []gym.Env{env}, policy: llmPolicy(t, srv)})
	er := trajectory(t, sum, "mem", 0).EpisodeResult
	if er.TerminatedReason != gym.ReasonPolicyError || er.ErrorClass != gym.ClassPolicy || !er.Mask || er.Success ||
		!strings.Contains(er.Error, "the model is on fire") {
		t.Errorf("episode result = %+v", er)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d requests, want 2 (one retry)", n)
	}
	if o := sum.Stats.Overall; o.PolicyErrors != 1 || o.Scored != 0 {
		t.Errorf("overall = %+v", o)
	}
	if open := env.OpenSessions(); len(open) != 0 {
		t.Errorf("sessions left open: %v", open)
	}
}
