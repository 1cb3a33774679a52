package envs_test

import (
	"context"
	"fmt"
	"regexp"
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

// fakePytest answers unit_tests commands like pytest: test_a passes and
// test_b fails unless the agent wrote fixed.txt. A command naming pytest
// writes its JUnit report to the report pipe, with the canary tests the
// guard plugin adds (see fakeJUnit); any other command prints pytest's -rA
// summary, which must not count.
func fakePytest(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Argv) < 3 || !strings.Contains(req.Argv[2], "tests") {
		return sandbox.ExecResult{Stdout: []byte("ran " + strings.Join(req.Argv, " ") + "\n")}, nil
	}
	fixed := false
	if data, err := sb.ReadFile(ctx, "fixed.txt", 10); err == nil && string(data) == "yes" {
		fixed = true
	}
	code := 1
	b, bXML := "FAILED tests/test_x.py::test_b - assert False", `<testcase classname="tests.test_x" name="test_b"><failure message="assert False"/></testcase>`
	if fixed {
		code = 0
		b, bXML = "PASSED tests/test_x.py::test_b", `<testcase classname="tests.test_x" name="test_b"/>`
	}
	if strings.Contains(req.Argv[2], "pytest") {
		report, err := fakeJUnit(ctx, sb, req, `<testcase classname="tests.test_x" name="test_a"/>`+bXML)
		if err != nil {
			return sandbox.ExecResult{}, err
		}
		return sandbox.ExecResult{ExitCode: 1, Stdout: []byte("2 tests\n"), Report: report}, nil
	}
	out := "=========================== short test summary info ============================\n" +
		"PASSED tests/test_x.py::test_a\n" + b + "\n=== done ===\n"
	return sandbox.ExecResult{ExitCode: code, Stdout: []byte(out)}, nil
}

// fakeJUnit does what pytest does with the guard plugin: it reads the
// canary file the plugin names and reports its tests as failed, with the
// given test cases, as JUnit XML on the report pipe.
func fakeJUnit(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest, cases string) ([]byte, error) {
	if !req.Report {
		return nil, fmt.Errorf("a pytest command without a report pipe")
	}
	var guardDir string
	for _, kv := range req.Env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok {
			guardDir, _, _ = strings.Cut(v, ":")
		}
	}
	guard, err := sb.ReadFile(ctx, guardDir+"/gymserver_guard.py", 1<<20)
	if err != nil {
		return nil, fmt.Errorf("guard plugin: %w", err)
	}
	m := regexp.MustCompile(`(?m)^_CANARY = "([^"]+)"`).FindSubmatch(guard)
	if m == nil {
		return nil, fmt.Errorf("guard plugin names no canary:\n%s", guard)
	}
	canary, err := sb.ReadFile(ctx, string(m[1]), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("canary: %w", err)
	}
	for _, name := range regexp.MustCompile(`(?m)^def (test_\w+)\(`).FindAllSubmatch(canary, -1) {
		cases += `<testcase classname="canary" name="` + string(name[1]) + `"><failure message="assert"/></testcase>`
	}
	return []byte(`<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite>` + cases + `</testsuite></testsuites>`), nil
}

func fakeEnv(t *testing.T, exec sandboxtest.ExecFunc) (*envs.TaskEnv, *sandboxtest.FakeProvider) {
	t.Helper()
	return fakeEnvWith(t, exec, "python3 -m pytest tests/")
}

// fakeEnvWith is fakeEnv with the given unit_tests command.
func fakeEnvWith(t *testing.T, exec sandboxtest.ExecFunc, unitTest string) (*envs.TaskEnv, *sandboxtest.FakeProvider) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"environments": [{"id": "fake", "docker_image": "img",
		"unit_tests": ["`+unitTest+`"], "prompt": "fix it", "max_actions": 5}]}`), t.TempDir())
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
		name, command, source string
		fix                   bool
		reward                float64
		total                 int
	}{
		{"junit/unfixed", "python3 -m pytest tests/", "junit", false, 0.5, 2},
		{"junit/fixed", "python3 -m pytest tests/", "junit", true, 1, 2},
		// Not pytest: its printed summary does not count, its exit status does.
		{"exit_code/unfixed", "python3 run_tests.py tests/", "exit_code", false, 0, 1},
		{"exit_code/fixed", "python3 run_tests.py tests/", "exit_code", true, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, p := fakeEnvWith(t, fakePytest, tc.command)
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
			if !res.Terminated || ev == nil || res.Reward != tc.reward || ev.Total != tc.total || ev.Commands[0].Source != tc.source {
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
		// Only the canaries ran: the task's hidden tests are missing.
		report, err := fakeJUnit(ctx, sb, req, "")
		return sandbox.ExecResult{ExitCode: 1, Stdout: []byte("2 failed in 0.01s"), Report: report}, err
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
	e, _ := fakeEnv(t, fakePytest)
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

// TestFakeSnapshotAndFork runs with snapshots kept as archives and, when
// the sandbox cannot make one, as committed images.
func TestFakeSnapshotAndFork(t *testing.T) {
	for _, mode := range []string{gym.SnapshotArchive, gym.SnapshotCommit} {
		t.Run(mode, func(t *testing.T) { testFakeSnapshotAndFork(t, mode) })
	}
}

func testFakeSnapshotAndFork(t *testing.T, mode string) {
	e, p := fakeEnv(t, fakePytest)
	p.NoArchive = mode == gym.SnapshotCommit
	ctx := t.Context()
	s, _, err := e.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "notes.txt", Content: "prefix"}))
	snap, err := s.(gym.Snapshotter).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Steps != 1 || snap.Actions != 1 || snap.EnvID != "fake" || snap.SessionID != s.ID() || snap.Mode != mode ||
		(snap.Fallback != "") != (mode == gym.SnapshotCommit) || (snap.Bytes > 0) != (mode == gym.SnapshotArchive) {
		t.Errorf("snapshot %+v", snap)
	}
	// The original goes on; what it does later is not in the snapshot.
	step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "later.txt", Content: "x"}))

	var forks []gym.Session
	for i := range 2 {
		f, r, err := e.Fork(ctx, snap.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		if r.ForkOf != snap.ID || r.Steps != 1 || r.Actions != 1 || f.ID() == s.ID() {
			t.Errorf("fork %d: reset %+v", i, r)
		}
		forks = append(forks, f)
	}
	for i, f := range forks {
		r := step(t, f, call(gym.ToolReadFile, gym.ReadFileArgs{Filepath: "notes.txt"}), call(gym.ToolReadFile, gym.ReadFileArgs{Filepath: "later.txt"}))
		if r.Info.Step != 2 || r.Info.Actions != 3 {
			t.Errorf("fork %d: step %d actions %d, want 2 and 3", i, r.Info.Step, r.Info.Actions)
		}
		if !strings.Contains(r.Observation.Messages[0].Content, "prefix") || r.Info.Calls[1].ErrorClass != gym.ClassAgent {
			t.Errorf("fork %d sees %+v", i, r.Observation.Messages)
		}
	}
	// Forks are independent: only the first is fixed.
	step(t, forks[0], call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "fixed.txt", Content: "yes"}))
	r0 := step(t, forks[0], call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	r1 := step(t, forks[1], call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	if r0.Reward != 1 || r1.Reward != 0.5 {
		t.Errorf("fork rewards %v and %v, want 1 and 0.5", r0.Reward, r1.Reward)
	}
	if _, err := forks[0].(gym.Snapshotter).Snapshot(ctx); gym.ClassOf(err) != gym.ClassEpisodeDone {
		t.Errorf("snapshot after the end: %v, want episode_done", err)
	}
	images := p.Images()
	if err := e.DropSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if want := images - map[string]int{gym.SnapshotCommit: 1}[mode]; p.Images() != want {
		t.Errorf("images after the drop: %d, want %d", p.Images(), want)
	}
	if _, _, err := e.Fork(ctx, snap.ID); gym.ClassOf(err) != gym.ClassNotFound {
		t.Errorf("fork of a dropped snapshot: %v, want not_found", err)
	}
	if err := e.DropSnapshot(ctx, snap.ID); gym.ClassOf(err) != gym.ClassNotFound {
		t.Errorf("second drop: %v, want not_found", err)
	}
}

// TestFakeAgentCrashIsScored: a sandbox that dies of what the agent did
// (the Docker backend says so for a container killed for memory) ends the
// episode as agent_crash, scored 0 and not masked; no test runs.
func TestFakeAgentCrashIsScored(t *testing.T) {
	e, _ := fakeEnv(t, func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		if strings.Contains(strings.Join(req.Argv, " "), "hog") {
			return sandbox.ExecResult{}, gym.Classify(fmt.Errorf("executor closed its stream (the container was killed for running out of memory): %w", sandbox.ErrAgentCrash), gym.ClassSandbox)
		}
		t.Errorf("unexpected command after the crash: %v", req.Argv)
		return sandbox.ExecResult{}, nil
	})
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	r := step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "python3 hog.py"}))
	ev := r.Info.Evaluation
	if r.Info.TerminationReason != gym.ReasonAgentCrash || r.Info.Mask() || !r.Truncated || r.Reward != 0 {
		t.Fatalf("crash step: reason %s mask %v truncated %v reward %v", r.Info.TerminationReason, r.Info.Mask(), r.Truncated, r.Reward)
	}
	if r.Info.Calls[0].ErrorClass != gym.ClassAgent {
		t.Errorf("crash call class %s, want agent_error", r.Info.Calls[0].ErrorClass)
	}
	if ev == nil || ev.Mask || ev.ErrorClass != gym.ClassAgent || ev.Reward != 0 || len(ev.Commands) != 0 {
		t.Errorf("evaluation %+v, want an unmasked agent_error with reward 0 and no test run", ev)
	}
}

// TestFakeTextActions: the episode logic reads text actions itself, with
// the action's parser, so the server and an in-process driver cannot
// differ; every call gets an id unique within the session, whether it was
// parsed or structured.
func TestFakeTextActions(t *testing.T) {
	e, _ := fakeEnv(t, fakePytest)
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	text := func(parser, text string) gym.StepResult {
		t.Helper()
		res, err := s.Step(t.Context(), gym.Action{Text: text, Parser: parser})
		if err != nil {
			t.Fatalf("%s step: %v", parser, err)
		}
		return res
	}
	seen := map[string]bool{}
	checkIDs := func(res gym.StepResult) {
		t.Helper()
		for i, c := range res.ToolCalls {
			if c.ID == "" || seen[c.ID] || res.Observation.Messages[i].ToolCallID != c.ID || res.Info.Calls[i].ID != c.ID {
				t.Errorf("step %d call %d: id %q (seen before: %v), message answers %q", res.Info.Step, i, c.ID, seen[c.ID], res.Observation.Messages[i].ToolCallID)
			}
			seen[c.ID] = true
		}
	}

	// The text's own ids are not kept: models repeat them turn after turn.
	r := text("hermes", `<tool_call>{"id": "call_0", "name": "write_file", "arguments": {"filepath": "a.txt", "content": "hi"}}</tool_call>
<tool_call>{"name": "read_file", "arguments": {"filepath": "a.txt"}}</tool_call>`)
	if len(r.ToolCalls) != 2 || r.ToolCalls[0].ID != "call_1_0" || r.ToolCalls[1].ID != "call_1_1" || r.Observation.Messages[1].Content != "hi" {
		t.Fatalf("hermes step: calls %+v observation %+v", r.ToolCalls, r.Observation)
	}
	checkIDs(r)
	r = text("react", "Action: read_file\nAction Input: {\"filepath\": \"a.txt\"}")
	if len(r.ToolCalls) != 1 || r.ToolCalls[0].ID != "call_2_0" {
		t.Fatalf("react step: calls %+v", r.ToolCalls)
	}
	checkIDs(r)
	// Structured calls without an id get the same scheme.
	r = step(t, s, gym.NewToolCall("", gym.ToolReadFile, `{"filepath": "a.txt"}`))
	if r.ToolCalls[0].ID != "call_3_0" {
		t.Fatalf("structured step: calls %+v", r.ToolCalls)
	}
	checkIDs(r)

	// A malformed call is an agent_error observation and a counted step.
	r = text("hermes", `<tool_call>{"name": "read_file", "arguments": {oops</tool_call>`)
	if r.Info.Step != 4 || r.Info.Actions != 4 || len(r.ToolCalls) != 0 || len(r.Info.Calls) != 1 ||
		r.Info.Calls[0].ErrorClass != gym.ClassAgent || !strings.Contains(r.Observation.Text, "<tool_call> block 1") {
		t.Fatalf("malformed text: %+v", r)
	}
	// An unknown parser is the caller's error: no step is taken.
	if _, err := s.Step(t.Context(), gym.Action{Text: "x", Parser: "xml"}); gym.ClassOf(err) != gym.ClassInvalidArgument {
		t.Fatalf("unknown parser: %v, want invalid_argument", err)
	}
	if r = text("json", `{"name": "mark_done"}`); r.Info.Step != 5 || !r.Terminated || r.ToolCalls[0].ID != "call_5_0" {
		t.Fatalf("json step: %+v", r)
	}
}

// TestFakeExtraArgumentsAreRefused: the tool schemas say
// additionalProperties: false, so a call with an argument they do not
// declare is an agent_error observation and does not run.
func TestFakeExtraArgumentsAreRefused(t *testing.T) {
	var ran []string
	e, _ := fakeEnv(t, func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		ran = append(ran, strings.Join(req.Argv, " "))
		return sandbox.ExecResult{}, nil
	})
	s, r, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, tool := range r.Tools {
		if tool.Function.Parameters.AdditionalProperties {
			t.Fatalf("tool %s allows additional properties; this test assumes it does not", tool.Function.Name)
		}
	}
	res := step(t, s,
		gym.NewToolCall("a", gym.ToolExecuteCommand, `{"command": "touch x", "cwd": "/tmp", "env": {}}`),
		gym.NewToolCall("b", gym.ToolWriteFile, `{"filepath": "a.txt", "content": "x", "mode": "0755"}`),
		gym.NewToolCall("c", gym.ToolMarkDone, `{"message": "ok", "force": true}`),
		gym.NewToolCall("d", gym.ToolExecuteCommand, `{"command": "true", "timeout": 5}`),
	)
	for i, c := range res.Info.Calls[:3] {
		if c.ErrorClass != gym.ClassAgent || !strings.Contains(c.Error, "unknown argument") {
			t.Errorf("call %d: %+v, want an agent_error for the unknown argument", i, c)
		}
	}
	if want := `execute_command: unknown argument "cwd", "env"; the tool takes only "background", "command", "timeout", "working_directory"`; res.Info.Calls[0].Error != want {
		t.Errorf("error %q, want %q", res.Info.Calls[0].Error, want)
	}
	if res.Done() || res.Info.Calls[3].ErrorClass != "" {
		t.Errorf("declared arguments refused or the episode ended: %+v", res.Info)
	}
	if len(ran) != 1 || !strings.Contains(ran[0], "true") {
		t.Errorf("commands run: %q, want only the valid one", ran)
	}
}

// TestFakeForkReportsRemainingTimeout: a forked session goes on with the
// rest of the global timeout budget, and its limits say so.
func TestFakeForkReportsRemainingTimeout(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"environments": [{"id": "fake", "docker_image": "img",
		"unit_tests": ["python3 -m pytest tests/"], "prompt": "fix it"}],
		"timeout_config": {"global_timeout": 600}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := sandboxtest.NewFakeProvider()
	p.ExecFunc = fakePytest
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, r, err := e.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	budget := gym.Duration(600 * time.Second)
	if r.Limits.GlobalTimeout != budget {
		t.Fatalf("reset limits %+v, want the whole budget", r.Limits)
	}
	step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "notes.txt", Content: "x"}))
	snap, err := s.(gym.Snapshotter).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, fr, err := e.Fork(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	if snap.Elapsed <= 0 || fr.Limits.GlobalTimeout != budget-snap.Elapsed {
		t.Errorf("fork limits %+v after %v of %v used, want global_timeout %v", fr.Limits, snap.Elapsed, budget, budget-snap.Elapsed)
	}
	if fr.Limits.CommandTimeout != r.Limits.CommandTimeout || fr.Limits.MaxActions != r.Limits.MaxActions {
		t.Errorf("fork limits %+v, reset limits %+v: only global_timeout changes", fr.Limits, r.Limits)
	}
}

// TestFakeSessionIDIsItsSandboxes: the environment mints no session id of
// its own; a session, a fork too, is named by its sandbox's
// (sandbox.NewSessionID, minted by the provider).
func TestFakeSessionIDIsItsSandboxes(t *testing.T) {
	sandboxSession := make(chan string, 1)
	e, _ := fakeEnv(t, func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		select {
		case sandboxSession <- sb.SessionID():
		default:
		}
		return sandbox.ExecResult{}, nil
	})
	ctx := t.Context()
	check := func(name string, s gym.Session, r gym.Reset) {
		t.Helper()
		step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "true"}))
		if got := <-sandboxSession; s.ID() != got || r.SessionID != got {
			t.Errorf("%s: session %q, reset %q; its sandbox's session id %q", name, s.ID(), r.SessionID, got)
		}
	}
	s, r, err := e.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	check("reset", s, r)
	snap, err := s.(gym.Snapshotter).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, r, err := e.Fork(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	check("fork", f, r)
	if f.ID() == s.ID() {
		t.Errorf("the fork has its original's id %s", s.ID())
	}
}

// TestFakeResetOptions: environment_variables is the one reset option, an
// object of strings; anything else is an invalid argument.
func TestFakeResetOptions(t *testing.T) {
	e, _ := fakeEnv(t, fakePytest)
	tests := []struct {
		name string
		opts map[string]any
		want string
	}{
		{"ok", map[string]any{gym.OptionEnvironmentVariables: map[string]any{"A": "1"}}, ""},
		{"unknown", map[string]any{"colour": "blue"}, `options are not supported (got colour; the only option is environment_variables)`},
		{"not_an_object", map[string]any{gym.OptionEnvironmentVariables: "A=1"}, "want an object of strings"},
		{"not_a_string", map[string]any{gym.OptionEnvironmentVariables: map[string]any{"A": 1}}, `"A": want a variable name and a string value`},
		{"bad_name", map[string]any{gym.OptionEnvironmentVariables: map[string]any{"A=B": "1"}}, `"A=B": want a variable name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, err := e.Reset(t.Context(), gym.ResetRequest{Options: tt.opts})
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				s.Close(t.Context())
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || gym.ClassOf(err) != gym.ClassInvalidArgument {
				t.Errorf("error %v, want %q (invalid_argument)", err, tt.want)
			}
		})
	}
}
