package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

func TestEpisodeThroughClient(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	reg, err := c.Registry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env, err := reg.Lookup("mem")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ts.env.Spec(), env.Spec()); d != "" {
		t.Errorf("remote spec (-local +remote):\n%s", d)
	}
	s, r, err := env.Reset(ctx, gym.ResetRequest{Task: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if r.SessionID != s.ID() || r.TaskID != "hello" || len(r.Tools) != 4 || len(r.Messages) != 2 {
		t.Fatalf("reset = %+v", r)
	}
	res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{
		tc("c1", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`),
		tc("c2", gym.ToolExecuteCommand, `{"command":"cat a.txt"}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done() || len(res.Observation.Messages) != 2 || res.Observation.Messages[1].Content != gymtest.Output("hello") ||
		res.Observation.Messages[1].ToolCallID != "c2" || res.Info.Actions != 2 {
		t.Fatalf("step = %+v", res)
	}
	res, calls, err := s.(*gymclient.Session).StepText(ctx, "hermes", `Done. <tool_call>{"name": "mark_done", "arguments": {}}</tool_call>`)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Terminated || res.Reward != 1 || res.Info.Evaluation == nil || !res.Info.Evaluation.Success ||
		len(calls) != 1 || calls[0].Function.Name != gym.ToolMarkDone || calls[0].ID != res.Observation.Messages[0].ToolCallID {
		t.Fatalf("final step = %+v, calls %+v", res, calls)
	}
	if _, err := s.Step(ctx, gym.Action{}); !errors.Is(err, gym.ErrEpisodeDone) {
		t.Errorf("step after the end: %v, want episode_done", err)
	}
	for range 2 {
		ev, err := s.Evaluate(ctx)
		if err != nil || ev.Reward != 1 || ev.Total != 1 {
			t.Errorf("evaluate: %+v %v", ev, err)
		}
	}
	var first gym.Result
	for i := range 2 {
		fin, err := s.Close(ctx)
		if err != nil || fin.Evaluation == nil || fin.Evaluation.Reward != 1 || fin.TerminationReason != gym.ReasonCompleted ||
			fin.Steps != 2 || fin.StartTime.IsZero() {
			t.Errorf("close %d: %+v %v", i, fin, err)
		}
		if i == 0 {
			first = fin
		} else if d := cmp.Diff(first, fin); d != "" {
			t.Errorf("second close differs (-first +second):\n%s", d)
		}
	}
	if open := ts.env.OpenSessions(); len(open) != 0 {
		t.Errorf("open sessions after close: %v", open)
	}
	// Evaluate still answers after close; step says the session is closed.
	if ev, err := s.Evaluate(ctx); err != nil || ev.Reward != 1 {
		t.Errorf("evaluate after close: %+v %v", ev, err)
	}
	var ce *gymclient.Error
	if _, err := s.Step(ctx, gym.Action{}); !errors.As(err, &ce) || ce.Code != gym.ClassEpisodeDone || ce.Reason != wire.ReasonSessionClosed {
		t.Errorf("step after close: %v, want episode_done/session_closed", err)
	}
}

func TestRawTextParsers(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	tests := []struct {
		parser, text string
		wantClass    gym.ErrorClass
		wantCalls    int
		wantOut      string
	}{
		{"hermes", `<tool_call>{"name": "execute_command", "arguments": {"command": "echo hi"}}</tool_call>`, "", 1, "hi\n"},
		{"json", "```json\n[{\"name\": \"execute_command\", \"arguments\": {\"command\": \"echo a\"}}, {\"name\": \"execute_command\", \"arguments\": {\"command\": \"echo b\"}}]\n```", "", 2, "a\n"},
		{"react", "Thought: run it\nAction: execute_command\nAction Input: {\"command\": \"echo r\"}", "", 1, "r\n"},
		{"hermes", `<tool_call>{"name": "execute_command", "arguments": {oops</tool_call>`, gym.ClassAgent, 0, ""},
		{"hermes", `I think I am done, no tools needed.`, gym.ClassAgent, 0, ""},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d_%s", i, tt.parser), func(t *testing.T) {
			s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			res, calls, err := s.StepText(ctx, tt.parser, tt.text)
			if err != nil {
				t.Fatalf("a malformed action must be an observation, got error %v", err)
			}
			if len(calls) != tt.wantCalls || len(res.Info.Calls) == 0 || res.Info.Calls[0].ErrorClass != tt.wantClass {
				t.Fatalf("calls %+v info %+v", calls, res.Info)
			}
			if tt.wantCalls > 0 && res.Observation.Messages[0].Content != gymtest.Output(tt.wantOut) {
				t.Errorf("output %q, want %q", res.Observation.Messages[0].Content, tt.wantOut)
			}
			if tt.wantClass != "" && (res.Info.Step != 1 || res.Observation.Text == "") {
				t.Errorf("bad action: step %d, text %q; want a counted step with an explanation", res.Info.Step, res.Observation.Text)
			}
		})
	}
}

// TestCallIDsUniqueInSession: calls parsed from text and structured calls
// without an id get ids from one scheme, unique within the session, and the
// step result's tool_calls carry them, so a transcript never answers two
// calls with the same tool_call_id.
func TestCallIDsUniqueInSession(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{Task: "two"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	seen := map[string]bool{}
	for i, text := range []string{
		`<tool_call>{"name": "execute_command", "arguments": {"command": "echo a"}}</tool_call>`,
		`<tool_call>{"id": "call_0", "name": "execute_command", "arguments": {"command": "echo b"}}</tool_call>`,
		"Action: execute_command\nAction Input: {\"command\": \"echo c\"}",
	} {
		res, calls, err := s.StepText(ctx, []string{"hermes", "hermes", "react"}[i], text)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 1 || seen[calls[0].ID] || calls[0].ID != res.Observation.Messages[0].ToolCallID {
			t.Fatalf("text step %d: calls %+v, tool message answers %q; ids so far %v", i+1, calls, res.Observation.Messages[0].ToolCallID, seen)
		}
		seen[calls[0].ID] = true
	}
	res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", gym.ToolExecuteCommand, `{"command":"echo d"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if id := res.Observation.Messages[0].ToolCallID; seen[id] || id != "call_4_0" {
		t.Fatalf("structured step: tool message answers %q; ids so far %v", id, seen)
	}
}

// TestResetIsByteStable: resets of the same env, task and seed give the
// same bytes for every prompt, message, tool schema and limit (what a
// prompt cache and a reproducible run see); also the envs listing.
func TestResetIsByteStable(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dialRaw(t, ts, nil)
	// stable is the part of a reset result that must not change; the
	// session id does.
	type stable struct {
		Env          msgpack.RawMessage `msgpack:"env"`
		Task         msgpack.RawMessage `msgpack:"task"`
		SystemPrompt msgpack.RawMessage `msgpack:"system_prompt"`
		Prompt       msgpack.RawMessage `msgpack:"prompt"`
		Tools        msgpack.RawMessage `msgpack:"tools"`
		Messages     msgpack.RawMessage `msgpack:"messages"`
		Limits       msgpack.RawMessage `msgpack:"limits"`
	}
	seed := int64(7)
	var first stable
	var firstEnvs []byte
	for i := range 8 {
		id := uint64(2*i + 1)
		var got stable
		r := c.call(wire.Request{ID: id, Op: wire.OpReset, Env: "mem", Seed: &seed}, &got)
		if !r.OK {
			t.Fatalf("reset: %+v", r.Error)
		}
		c.call(wire.Request{ID: id + 1, Op: wire.OpClose, Session: sessionOf(t, r)}, nil)
		envs := c.call(wire.Request{ID: 100 + id, Op: wire.OpEnvs}, nil).Result
		if i == 0 {
			first, firstEnvs = got, envs
			continue
		}
		if d := cmp.Diff(first, got); d != "" {
			t.Fatalf("reset %d differs from the first in its bytes (-first +reset):\n%s", i+1, d)
		}
		if !bytes.Equal(firstEnvs, envs) {
			t.Fatalf("envs answer %d differs from the first in its bytes", i+1)
		}
	}
}

// sessionOf returns the session id of a reset response.
func sessionOf(t *testing.T, r wire.RawResponse) string {
	t.Helper()
	var res wire.ResetResult
	if err := wire.DecodeResult(r.Result, &res); err != nil {
		t.Fatal(err)
	}
	return res.SessionID
}

func TestConcurrentSessionsOnOneConnection(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	const sessions, steps = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{Task: "hello"})
				if err != nil {
					return err
				}
				for j := range steps {
					want := fmt.Sprintf("s%d-%d", i, j)
					res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", gym.ToolExecuteCommand, `{"command":"echo `+want+`"}`)}})
					if err != nil {
						return err
					}
					if got := res.Observation.Messages[0].Content; got != gymtest.Output(want) || res.Info.Step != j+1 {
						return fmt.Errorf("session %d step %d: got %q (step %d)", i, j, got, res.Info.Step)
					}
				}
				if i%2 == 0 {
					if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{
						tc("w", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`), tc("d", gym.ToolMarkDone, `{}`)}}); err != nil {
						return err
					}
				}
				fin, err := s.Close(ctx)
				if err != nil {
					return err
				}
				if wantEval := i%2 == 0; (fin.Evaluation != nil) != wantEval || fin.Steps != steps+map[bool]int{true: 1}[wantEval] {
					return fmt.Errorf("session %d: result %+v", i, fin)
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if ts.env.Resets() != sessions || len(ts.env.OpenSessions()) != 0 {
		t.Errorf("resets %d, open %v", ts.env.Resets(), ts.env.OpenSessions())
	}
}

func TestPipelinedRequests(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	rc := dialRaw(t, ts, nil)
	var sessions [2]string
	for i := range sessions {
		var r wire.ResetResult
		if resp := rc.call(wire.Request{ID: uint64(i + 1), Op: wire.OpReset, Env: "mem"}, &r); !resp.OK {
			t.Fatalf("reset: %+v", resp.Error)
		}
		sessions[i] = r.SessionID
	}
	// 100 steps on two sessions, a hello and an envs, all sent before
	// reading anything.
	const n = 100
	for i := range n {
		rc.request(wire.Request{ID: uint64(100 + i), Op: wire.OpStep, Session: sessions[i%2],
			ToolCalls: []wire.ToolCall{{ID: fmt.Sprint("c", i), Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: wire.Arguments(fmt.Sprintf(`{"command":"echo %d"}`, i))}}}})
	}
	rc.request(wire.Request{ID: 98, Op: wire.OpHello})
	rc.request(wire.Request{ID: 99, Op: wire.OpEnvs})
	seen := map[uint64]bool{}
	lastStep := map[string]int{}
	for range n + 2 {
		r := rc.next()
		if !r.OK || seen[r.ID] {
			t.Fatalf("response %d: ok=%v error=%+v (seen before: %v)", r.ID, r.OK, r.Error, seen[r.ID])
		}
		seen[r.ID] = true
		if r.ID < 100 {
			continue
		}
		i := int(r.ID - 100)
		var sr wire.StepResult
		if err := wire.DecodeResult(r.Result, &sr); err != nil {
			t.Fatal(err)
		}
		// Requests on one session run in arrival order.
		sess := sessions[i%2]
		if want := i/2 + 1; sr.Info.Step != want || sr.Observation.Messages[0].Content != gymtest.Output(fmt.Sprint(i, "\n")) {
			t.Errorf("request %d: step %d output %q, want step %d", i, sr.Info.Step, sr.Observation.Messages[0].Content, want)
		}
		if sr.Info.Step <= lastStep[sess] {
			t.Errorf("session %s: step %d answered after step %d", sess, sr.Info.Step, lastStep[sess])
		}
		lastStep[sess] = sr.Info.Step
	}
}

func TestResetReplacesSession(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	rc := dialRaw(t, ts, nil)
	var a, b wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &a)
	if resp := rc.call(wire.Request{ID: 2, Op: wire.OpReset, Env: "mem", Session: a.SessionID}, &b); !resp.OK {
		t.Fatalf("reset with session: %+v", resp.Error)
	}
	if got := ts.env.OpenSessions(); !cmp.Equal(got, []string{b.SessionID}) {
		t.Errorf("open sessions %v, want only %s", got, b.SessionID)
	}
}

func TestSandboxFailureIsMasked(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	rc := dialRaw(t, ts, nil)
	var r wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &r)
	var sr wire.StepResult
	resp := rc.call(wire.Request{ID: 2, Op: wire.OpStep, Session: r.SessionID,
		ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: `{"command":"crash"}`}}}}, &sr)
	if !resp.OK || !sr.Truncated || !sr.Info.Mask || sr.Info.TerminationReason != string(gym.ReasonSandboxError) {
		t.Errorf("crash step: %+v %+v", resp.Error, sr)
	}
}
