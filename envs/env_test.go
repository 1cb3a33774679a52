package envs_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/docker/dockertest"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// The tests in this file run real episodes on the real Docker Engine with
// the examples' configs.

// shared is the Docker provider of this package's tests.
var shared dockertest.Shared

// testProvider returns the shared Docker provider.
func testProvider(t *testing.T) *docker.Provider { return shared.Provider(t) }

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// loadEnv loads one environment of an example config.
func loadEnv(t *testing.T, example string) (*envs.TaskEnv, config.Environment) {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", example, "config.json"))
	if err != nil {
		t.Fatalf("load %s: %v", example, err)
	}
	ec := cfg.Environments[0]
	e, err := envs.New(cfg, ec, envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatalf("new env: %v", err)
	}
	return e, ec
}

func reset(t *testing.T, e *envs.TaskEnv) (gym.Session, gym.Reset) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	s, r, err := e.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	t.Cleanup(func() {
		if _, err := s.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, r
}

func call(name string, args any) gym.ToolCall {
	b, _ := json.Marshal(args)
	return gym.NewToolCall("", name, string(b))
}

func step(t *testing.T, s gym.Session, calls ...gym.ToolCall) gym.StepResult {
	t.Helper()
	r, err := s.Step(t.Context(), gym.Action{ToolCalls: calls})
	if err != nil {
		t.Fatalf("step: %v", err)
	}
	return r
}

func TestReferenceSolutionScoresOne(t *testing.T) {
	for _, example := range []string{"calculator_api", "fix_inventory"} {
		t.Run(example, func(t *testing.T) {
			e, ec := loadEnv(t, example)
			calls, err := envs.ReferenceCalls(ec.Tasks[0])
			if err != nil {
				t.Fatal(err)
			}
			s, _ := reset(t, e)
			var last gym.StepResult
			for _, c := range calls {
				last = step(t, s, c)
				for _, ci := range last.Info.Calls {
					if ci.ErrorClass != "" {
						t.Fatalf("reference call %s failed: %s %s", ci.Name, ci.ErrorClass, ci.Error)
					}
				}
			}
			if !last.Terminated || last.Truncated {
				t.Fatalf("after mark_done: terminated=%v truncated=%v", last.Terminated, last.Truncated)
			}
			ev := last.Info.Evaluation
			if ev == nil || ev.Reward != 1 || !ev.Success || ev.Total < 5 {
				t.Fatalf("evaluation = %+v, want reward 1 over >= 5 tests", ev)
			}
			if last.Reward != 1 || last.Info.TerminationReason != gym.ReasonCompleted {
				t.Errorf("step reward %v reason %s", last.Reward, last.Info.TerminationReason)
			}
			for _, c := range ev.Commands {
				if c.Source != "junit" {
					t.Errorf("command %q: results from %s, want junit", c.Command, c.Source)
				}
			}
			if _, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolMarkDone, map[string]string{})}}); gym.ClassOf(err) != gym.ClassEpisodeDone {
				t.Errorf("step after the end: %v, want episode_done", err)
			}
			again, err := s.Evaluate(t.Context())
			if err != nil || again.Reward != 1 {
				t.Errorf("evaluate again: %+v %v", again, err)
			}
		})
	}
}

func TestDoingNothingScoresBelowOne(t *testing.T) {
	e, _ := loadEnv(t, "calculator_api")
	s, _ := reset(t, e)
	r := step(t, s, call(gym.ToolMarkDone, gym.MarkDoneArgs{Message: "done"}))
	if !r.Info.AgentDone || r.Info.Evaluation == nil {
		t.Fatalf("info = %+v", r.Info)
	}
	if r.Reward >= 1 || r.Info.Evaluation.Success {
		t.Fatalf("doing nothing: reward %v success %v", r.Reward, r.Info.Evaluation.Success)
	}
	if r.Info.Evaluation.Total < 10 {
		t.Errorf("calculator_api has %d test cases, want >= 10", r.Info.Evaluation.Total)
	}
}

func TestHiddenTestsInvisibleAndTamperProof(t *testing.T) {
	e, ec := loadEnv(t, "fix_inventory")
	// Baseline: the do-nothing reward.
	s0, _ := reset(t, e)
	base := step(t, s0, call(gym.ToolMarkDone, map[string]string{})).Reward

	s, _ := reset(t, e)
	var testDir string
	for _, h := range ec.HiddenTests {
		testDir = h.Dest
	}
	files, err := ec.HiddenTests[0].Files()
	if err != nil || len(files) == 0 {
		t.Fatalf("hidden files: %v", err)
	}
	r := step(t, s, call(gym.ToolReadFile, gym.ReadFileArgs{Filepath: files[0].Path}))
	if c := r.Info.Calls[0]; c.ErrorClass != gym.ClassAgent || !strings.Contains(c.Error, "no such file") {
		t.Fatalf("reading a hidden test before evaluation: %+v", c)
	}
	r = step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "ls -a " + testDir + " 2>&1; ls -aR " + ec.WorkingDirectory}))
	for _, f := range files {
		if strings.Contains(r.Observation.Text, filepath.Base(f.Path)) {
			t.Fatalf("hidden file %s visible to the agent:\n%s", f.Path, r.Observation.Text)
		}
	}
	// Tamper: replace a hidden test with one that passes, add an extra
	// passing test, and plant a conftest that rewrites every report.
	step(t, s,
		call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: files[0].Path, Content: "def test_ok():\n    pass\n"}),
		call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: filepath.Join(testDir, "test_extra.py"), Content: "def test_a():\n    pass\ndef test_b():\n    pass\n"}),
		call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: filepath.Join(ec.WorkingDirectory, "conftest.py"), Content: `import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    rep = out.get_result()
    rep.outcome = "passed"
`}),
	)
	r = step(t, s, call(gym.ToolMarkDone, map[string]string{}))
	if r.Reward != base {
		t.Fatalf("tampering changed the reward: %v, do-nothing reward %v; tests: %+v", r.Reward, base, r.Info.Evaluation.Tests)
	}
	for _, tc := range r.Info.Evaluation.Tests {
		if strings.Contains(tc.Name, "test_extra") || strings.Contains(tc.Name, "test_ok") {
			t.Errorf("agent-written test %s was counted", tc.Name)
		}
	}
}

func TestAgentErrorsAreObservations(t *testing.T) {
	e, _ := loadEnv(t, "fix_inventory")
	s, _ := reset(t, e)
	r := step(t, s,
		gym.NewToolCall("a", "no_such_tool", `{}`),
		gym.NewToolCall("b", gym.ToolExecuteCommand, `{"command": `),
		gym.NewToolCall("c", gym.ToolExecuteCommand, `{"command": "echo hello; exit 3"}`),
		gym.NewToolCall("d", gym.ToolReadFile, `{"filepath": "/nonexistent"}`),
	)
	if r.Done() {
		t.Fatal("agent errors ended the episode")
	}
	want := []struct {
		id    string
		class gym.ErrorClass
		text  string
	}{
		{"a", gym.ClassAgent, "unknown tool"},
		{"b", gym.ClassAgent, "not a valid JSON"},
		{"c", "", "hello"},
		{"d", gym.ClassAgent, "no such file"},
	}
	if len(r.Observation.Messages) != len(want) {
		t.Fatalf("got %d tool messages, want %d", len(r.Observation.Messages), len(want))
	}
	for i, w := range want {
		m, c := r.Observation.Messages[i], r.Info.Calls[i]
		if m.ToolCallID != w.id || c.ErrorClass != w.class || !strings.Contains(m.Content, w.text) {
			t.Errorf("call %s: message %+v info %+v; want class %q containing %q", w.id, m, c, w.class, w.text)
		}
	}
	if r.Info.Calls[2].ExitCode != 3 {
		t.Errorf("exit code %d, want 3", r.Info.Calls[2].ExitCode)
	}
}

func TestActionLimitTruncates(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "examples", "fix_inventory", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ec := cfg.Environments[0]
	ec.MaxActions = 2
	e, err := envs.New(cfg, ec, envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := reset(t, e)
	r := step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "true"}))
	if r.Done() {
		t.Fatal("ended after one action")
	}
	r = step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "true"}))
	if !r.Truncated || r.Terminated || r.Info.TerminationReason != gym.ReasonMaxActions || r.Info.Evaluation == nil {
		t.Fatalf("after the limit: %+v", r)
	}
}

func TestGlobalTimeoutStopsLongCommand(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "examples", "fix_inventory", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ec := cfg.Environments[0]
	ec.Timeouts.Global = 4 * time.Second
	e, err := envs.New(cfg, ec, envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Prepare(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, _ := reset(t, e)
	start := time.Now()
	r := step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "sleep 1000"}))
	if time.Since(start) > 60*time.Second {
		t.Errorf("step took %s", time.Since(start))
	}
	if !r.Truncated || r.Info.TerminationReason != gym.ReasonTimeout {
		t.Fatalf("got %+v, want truncation by timeout", r.Info)
	}
	if c := r.Info.Calls[0]; c.ErrorClass != gym.ClassToolTimeout {
		t.Errorf("call info %+v, want tool_timeout", c)
	}
	if ev := r.Info.Evaluation; ev == nil || ev.ErrorClass != "" || ev.Total == 0 {
		t.Errorf("evaluation after timeout: %+v", ev)
	}
}

func TestCloseRemovesContainer(t *testing.T) {
	e, _ := loadEnv(t, "fix_inventory")
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	list := func() int {
		l, err := shared.Client().ContainerList(t.Context(), container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+s.ID()))})
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	if n := list(); n != 1 {
		t.Fatalf("%d containers for the session, want 1", n)
	}
	res, err := s.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.TerminationReason != gym.ReasonClosed || res.Evaluation != nil {
		t.Errorf("result %+v", res)
	}
	// The container goes in the background after Close returns.
	waittest.For(t, "the session's container to be removed", time.Minute, func() bool { return list() == 0 })
	if _, err := s.Close(t.Context()); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolMarkDone, map[string]string{})}}); gym.ClassOf(err) != gym.ClassEpisodeDone {
		t.Errorf("step after close: %v", err)
	}
}

// TestKilledContainerIsSandboxError kills the session's container behind
// its back: the next step reports a masked sandbox_error, and the
// environment still serves new sessions.
func TestKilledContainerIsSandboxError(t *testing.T) {
	e, _ := loadEnv(t, "fix_inventory")
	s, _ := reset(t, e)
	list, err := shared.Client().ContainerList(t.Context(), container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+s.ID()))})
	if err != nil || len(list) != 1 {
		t.Fatalf("find the session's container: %d found, %v", len(list), err)
	}
	if err := shared.Client().ContainerKill(t.Context(), list[0].ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "echo hi"})}})
	switch {
	case err != nil:
		if gym.ClassOf(err) != gym.ClassSandbox || !gym.Masked(gym.ClassOf(err)) {
			t.Fatalf("step error %v (class %s), want sandbox_error", err, gym.ClassOf(err))
		}
	case len(r.Info.Calls) != 1 || r.Info.Calls[0].ErrorClass != gym.ClassSandbox ||
		!r.Done() || r.Info.TerminationReason != gym.ReasonSandboxError:
		t.Fatalf("step after the container died: %+v", r.Info)
	}
	// The next session works.
	s2, _ := reset(t, e)
	if r := step(t, s2, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "echo alive"})); !strings.Contains(r.Observation.Text, "alive") {
		t.Fatalf("new session: %q", r.Observation.Text)
	}
}

// TestPooledResetKeepsLabelAndID checks that with a warm pool the second
// reset gets a pooled sandbox whose gymserver.session label is the
// session's id, and that the episode works as usual.
func TestPooledResetKeepsLabelAndID(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{WarmPool: 1})
	cfg, err := config.Load(filepath.Join("..", "examples", "fix_inventory", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := reset(t, e)
	waitPooled(t, p, e)
	before := time.Now()
	second, _ := reset(t, e)
	if second.ID() == first.ID() {
		t.Fatalf("two sessions with id %s", first.ID())
	}
	list, err := cli.ContainerList(t.Context(), container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+second.ID()))})
	if err != nil || len(list) != 1 {
		t.Fatalf("containers labelled with session %s: %d (%v)", second.ID(), len(list), err)
	}
	// The pooled container was made before this reset began.
	info, err := cli.ContainerInspect(t.Context(), list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, info.Created)
	if err != nil {
		t.Fatal(err)
	}
	if !created.Before(before) {
		t.Errorf("container created at %s, after the reset began at %s: not from the pool", created, before)
	}
	r := step(t, second, call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	if r.Info.Evaluation == nil || r.Info.Evaluation.Total != 10 || r.Info.Evaluation.ErrorClass != "" {
		t.Fatalf("evaluation in a pooled sandbox: %+v", r.Info.Evaluation)
	}
}

// TestShadowedTestRunnerDoesNotScore plants a fake pytest module (and a
// sitecustomize) in the working directory that forges a passing report; the
// tests must still run the real pytest, so the reward stays at the
// do-nothing baseline.
func TestShadowedTestRunnerDoesNotScore(t *testing.T) {
	e, ec := loadEnv(t, "fix_inventory")
	s0, _ := reset(t, e)
	base := step(t, s0, call(gym.ToolMarkDone, map[string]string{})).Reward
	if base >= 1 {
		t.Fatalf("do-nothing reward %v", base)
	}
	forge := `import os, re, sys
opts = os.environ.get("PYTEST_ADDOPTS", "")
m = re.search(r"--junitxml=(\S+)", opts)
cases = "".join('<testcase classname="tests.test_inventory" name="test_%d"/>' % i for i in range(50))
if m:
    open(m.group(1), "w").write("<testsuites><testsuite>" + cases + "</testsuite></testsuites>")
print("=" * 20 + " short test summary info " + "=" * 20)
for i in range(50):
    print("PASSED tests/test_inventory.py::test_%d" % i)
print("=" * 20 + " 50 passed " + "=" * 20)
sys.exit(0)
`
	s, _ := reset(t, e)
	step(t, s,
		call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: filepath.Join(ec.WorkingDirectory, "pytest.py"), Content: forge}),
		call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: filepath.Join(ec.WorkingDirectory, "sitecustomize.py"), Content: forge}),
	)
	r := step(t, s, call(gym.ToolMarkDone, map[string]string{}))
	if ev := r.Info.Evaluation; ev == nil || r.Reward != base || ev.Total != 10 {
		t.Fatalf("forged runner: reward %v (baseline %v), evaluation %+v", r.Reward, base, ev)
	}
}

// TestCutShortTestRunDoesNotScore makes the agent's module end the test
// process with status 0 as soon as pytest imports it, after printing a
// forged summary: a pytest run without its report counts as an error.
func TestCutShortTestRunDoesNotScore(t *testing.T) {
	e, ec := loadEnv(t, "fix_inventory")
	s, _ := reset(t, e)
	step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: filepath.Join(ec.WorkingDirectory, "inventory.py"), Content: `import os, sys
print("=" * 20 + " short test summary info " + "=" * 20)
print("PASSED tests/test_inventory.py::test_everything")
print("=" * 20 + " 1 passed " + "=" * 20)
sys.stdout.flush()
os._exit(0)
`}))
	r := step(t, s, call(gym.ToolMarkDone, map[string]string{}))
	ev := r.Info.Evaluation
	if ev == nil || r.Reward != 0 || ev.Success || ev.ErrorClass != "" || len(ev.Tests) != 1 || ev.Tests[0].Status != gym.TestError {
		t.Fatalf("cut-short run: reward %v, evaluation %+v", r.Reward, ev)
	}
}

// TestSnapshotAndForkOnDocker saves a calculator_api session after the
// reference solution is written and forks it twice: one fork keeps the
// solution (reward 1), the other breaks it (reward < 1). Dropping the
// snapshot removes its image.
func TestSnapshotAndForkOnDocker(t *testing.T) {
	e, ec := loadEnv(t, "calculator_api")
	calls, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	s, _ := reset(t, e)
	// Every reference call but the final mark_done.
	for _, c := range calls[:len(calls)-1] {
		step(t, s, c)
	}
	step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "sleep 1000", Background: true}))
	snap, err := s.(gym.Snapshotter).Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var forks []gym.Session
	for range 2 {
		f, r, err := e.Fork(ctx, snap.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close(context.Background()) })
		if r.ForkOf != snap.ID || r.Actions != snap.Actions {
			t.Errorf("fork reset %+v", r)
		}
		forks = append(forks, f)
	}
	step(t, forks[1], call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "rm app.py"}))
	good := step(t, forks[0], call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	bad := step(t, forks[1], call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	if good.Reward != 1 || bad.Reward >= 1 {
		t.Fatalf("fork rewards: kept solution %v, broken %v", good.Reward, bad.Reward)
	}
	// The original session is unaffected by its forks.
	if r := step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "test -f app.py && echo present"})); !strings.Contains(r.Observation.Text, "present") {
		t.Errorf("original session: %q", r.Observation.Text)
	}
	// Dropped while its forks run, the image goes when the last closes.
	if err := e.DropSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		if _, err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The forks' containers, and then the image, go in the background.
	waittest.Until(t, "no snapshot image left after the drop", time.Minute, func() (bool, error) {
		imgs, err := shared.Client().ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "gymserver.snapshot"),
			filters.Arg("label", sandbox.LabelOwner+"="+shared.Provider(t).Owner()))})
		return len(imgs) == 0, err
	})
}
