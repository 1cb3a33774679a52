package envs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// These tests drive the episode logic on the in-memory fake sandbox; the
// tests in env_test.go run the same behaviours on real Docker.

// pytestSummary answers unit_tests commands with a pytest -rA summary in
// which test_a passes and test_b fails unless the agent wrote fixed.txt.
func pytestSummary(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Argv) < 3 || !strings.Contains(req.Argv[2], "pytest") {
		return sandbox.ExecResult{Stdout: []byte("ran " + strings.Join(req.Argv, " ") + "\n")}, nil
	}
	b := "FAILED tests/test_x.py::test_b - assert False"
	code := 1
	if data, err := sb.ReadFile(ctx, "fixed.txt", 10); err == nil && string(data) == "yes" {
		b, code = "PASSED tests/test_x.py::test_b", 0
	}
	out := "=========================== short test summary info ============================\n" +
		"PASSED tests/test_x.py::test_a\n" + b + "\n=== done ===\n"
	return sandbox.ExecResult{ExitCode: code, Stdout: []byte(out)}, nil
}

func fakeEnv(t *testing.T, exec sandboxtest.ExecFunc) (*envs.TaskEnv, *sandboxtest.FakeProvider) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"environments": [{"id": "fake", "docker_image": "img",
		"unit_tests": ["python3 -m pytest tests/"], "prompt": "fix it", "max_actions": 5}]}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := sandboxtest.NewFakeProvider()
	p.ExecFunc = exec
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	return e, p
}

func TestFakeEpisodeRewardFromParsedTests(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fix    bool
		reward float64
	}{{"unfixed", false, 0.5}, {"fixed", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			e, p := fakeEnv(t, pytestSummary)
			s, r, err := e.Reset(t.Context(), gym.ResetRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Prompt != "fix it" || len(r.Tools) != 4 {
				t.Errorf("reset: prompt %q, %d tools", r.Prompt, len(r.Tools))
			}
			if tc.fix {
				step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "fixed.txt", Content: "yes"}))
			}
			res := step(t, s, call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
			ev := res.Info.Evaluation
			if !res.Terminated || ev == nil || res.Reward != tc.reward || ev.Total != 2 || ev.Commands[0].Source != "pytest" {
				t.Fatalf("result %+v evaluation %+v", res, ev)
			}
			if ev.Success != (tc.reward == 1) {
				t.Errorf("success %v with reward %v", ev.Success, tc.reward)
			}
			if _, err := s.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if p.Live() != 0 {
				t.Errorf("sandbox not closed")
			}
		})
	}
}

func TestFakeNoTestsCollectedIsVerifierError(t *testing.T) {
	e, _ := fakeEnv(t, func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		return sandbox.ExecResult{ExitCode: 5, Stdout: []byte("no tests ran")}, nil
	})
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ev := step(t, s, call(gym.ToolMarkDone, gym.MarkDoneArgs{})).Info.Evaluation
	if ev == nil || ev.ErrorClass != gym.ClassVerifier || !ev.Mask || ev.Success {
		t.Fatalf("evaluation %+v, want a masked verifier_error", ev)
	}
}

func TestFakeAgentErrorsAndLimit(t *testing.T) {
	e, _ := fakeEnv(t, pytestSummary)
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	r := step(t, s,
		gym.NewToolCall("a", "nope", `{}`),
		gym.NewToolCall("b", gym.ToolReadFile, `{"filepath": 3}`),
		gym.NewToolCall("c", gym.ToolReadFile, `{"filepath": "missing.txt"}`),
	)
	for i, c := range r.Info.Calls {
		if c.ErrorClass != gym.ClassAgent || r.Observation.Messages[i].ToolCallID != string(rune('a'+i)) {
			t.Errorf("call %d: %+v / %+v", i, c, r.Observation.Messages[i])
		}
	}
	if r.Done() {
		t.Fatal("agent errors ended the episode")
	}
	r = step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "true"}), call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "true"}))
	if !r.Truncated || r.Info.TerminationReason != gym.ReasonMaxActions {
		t.Fatalf("after 5 actions: %+v", r.Info)
	}
}

// TestFakeCloseCancelsEveryWaitingStep checks that Close cancels a running
// step and one queued behind it, not only the latest.
func TestFakeCloseCancelsEveryWaitingStep(t *testing.T) {
	started := make(chan struct{}, 2)
	e, _ := fakeEnv(t, func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		started <- struct{}{}
		<-ctx.Done()
		return sandbox.ExecResult{}, ctx.Err()
	})
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "sleep 1000"})}})
			errs <- err
		}()
	}
	<-started // one step runs, the other waits for it
	if _, err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-errs:
		case <-time.After(10 * time.Second):
			t.Fatal("a step was still blocked after Close")
		}
	}
}
