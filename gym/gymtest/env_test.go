package gymtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
)

// These tests cover what gymtest adds to the episode logic: the tiny
// shell, the tasks' tests, the hooks and the counts. The episode logic
// itself is envs', tested in envs on the same in-memory sandbox and on
// Docker.

func newEnv() *gymtest.Env {
	return gymtest.NewEnv("mem",
		gymtest.Task{ID: "t1", Prompt: "write hello", Expect: map[string]string{"a.txt": "hello", "b.txt": "it's \"quoted\"\n"}},
		gymtest.Task{ID: "t2", Prompt: "nothing"},
	)
}

func call(id, name, args string) gym.ToolCall { return gym.NewToolCall(id, name, args) }

func reset(t *testing.T, env *gymtest.Env, task string) gym.Session {
	t.Helper()
	s, r, err := env.Reset(t.Context(), gym.ResetRequest{Task: task})
	if err != nil {
		t.Fatal(err)
	}
	if r.SessionID != s.ID() || r.TaskID != task || r.SystemPrompt != gymtest.SystemPrompt {
		t.Fatalf("reset = %+v", r)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func step(t *testing.T, s gym.Session, calls ...gym.ToolCall) gym.StepResult {
	t.Helper()
	res, err := s.Step(t.Context(), gym.Action{ToolCalls: calls})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestEpisodeScoresExpect(t *testing.T) {
	env := newEnv()
	s := reset(t, env, "t1")
	res := step(t, s,
		call("w", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`),
		call("c", gym.ToolExecuteCommand, `{"command":"cat a.txt"}`),
		call("n", gym.ToolExecuteCommand, `{"command":"nosuch"}`),
	)
	var got []string
	var codes []int
	for i, m := range res.Observation.Messages {
		got = append(got, m.Content)
		codes = append(codes, res.Info.Calls[i].ExitCode)
	}
	want := []string{"Wrote 5 bytes to /workspace/a.txt.", gymtest.Output("hello"), "Exit code: 127\nstderr:\nsh: nosuch: command not found"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("observations (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{0, 0, 127}, codes); d != "" {
		t.Errorf("exit codes (-want +got):\n%s", d)
	}
	res = step(t, s, call("d", gym.ToolMarkDone, `{}`))
	ev := res.Info.Evaluation
	if !res.Terminated || res.Reward != 0.5 || ev == nil || ev.Total != 2 || ev.Passed != 1 || ev.Mask {
		t.Fatalf("final step = %+v, evaluation %+v", res, ev)
	}
	// Closing an ended episode keeps its reason and evaluation; closing a
	// running one says closed, unevaluated (PROTOCOL.md §4.6).
	if fin, err := s.Close(t.Context()); err != nil || fin.TerminationReason != gym.ReasonCompleted || fin.Evaluation == nil || fin.Evaluation.Reward != 0.5 {
		t.Errorf("close after the end: %+v %v", fin, err)
	}
	running := reset(t, env, "t1")
	if fin, err := running.Close(t.Context()); err != nil || fin.TerminationReason != gym.ReasonClosed || fin.Evaluation != nil {
		t.Errorf("close while running: %+v %v", fin, err)
	}
	// The test of a file written with quotes and a newline passes too.
	s = reset(t, env, "t1")
	step(t, s, call("a", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`),
		call("b", gym.ToolWriteFile, `{"filepath":"b.txt","content":"it's \"quoted\"\n"}`))
	if res := step(t, s, call("d", gym.ToolMarkDone, `{}`)); res.Reward != 1 || !res.Info.Evaluation.Success {
		t.Errorf("solved: reward %v, evaluation %+v", res.Reward, res.Info.Evaluation)
	}
	// A task without Expect has one test, which passes.
	s = reset(t, env, "t2")
	if res := step(t, s, call("d", gym.ToolMarkDone, `{}`)); res.Reward != 1 || res.Info.Evaluation.Total != 1 {
		t.Errorf("task without Expect: reward %v, evaluation %+v", res.Reward, res.Info.Evaluation)
	}
}

func TestShell(t *testing.T) {
	s := reset(t, newEnv(), "t2")
	for _, tt := range []struct {
		command, want string
		code          int
	}{
		{`echo  a   'b  c' "d \"e\"" f\ g`, gymtest.Output("a b  c d \"e\" f g\n"), 0},
		{`true`, gymtest.Output(""), 0},
		{`false`, "Exit code: 1", 1},
		{`sleep 0.01`, gymtest.Output(""), 0},
		{`expect x.txt ""`, "Exit code: 1\nstdout:\nx.txt: not written", 1},
		{`echo 'open`, "Exit code: 2\nstderr:\nsh: unterminated quoted string", 2},
	} {
		res := step(t, s, call("c", gym.ToolExecuteCommand, fmt.Sprintf(`{"command":%q}`, tt.command)))
		if got := res.Observation.Messages[0].Content; got != tt.want || res.Info.Calls[0].ExitCode != tt.code {
			t.Errorf("%s: %q exit %d, want %q exit %d", tt.command, got, res.Info.Calls[0].ExitCode, tt.want, tt.code)
		}
	}
	// sleep is killed by the command's timeout.
	start := time.Now()
	res := step(t, s, call("c", gym.ToolExecuteCommand, `{"command":"sleep 60","timeout":0.05}`))
	if c := res.Info.Calls[0]; c.ErrorClass != gym.ClassToolTimeout || time.Since(start) > 10*time.Second {
		t.Errorf("sleep past its timeout: %+v after %s", c, time.Since(start))
	}
}

func TestCrashMasksTheEpisode(t *testing.T) {
	env := newEnv()
	s := reset(t, env, "t1")
	res := step(t, s, call("a", gym.ToolExecuteCommand, `{"command":"crash"}`), call("b", gym.ToolExecuteCommand, `{"command":"true"}`))
	if !res.Truncated || res.Info.TerminationReason != gym.ReasonSandboxError || res.Info.Calls[0].ErrorClass != gym.ClassSandbox ||
		res.Info.Calls[1].ErrorClass != gym.ClassEpisodeDone {
		t.Errorf("crash step = %+v", res)
	}
	if ev := res.Info.Evaluation; ev == nil || !ev.Mask || ev.ErrorClass != gym.ClassSandbox {
		t.Errorf("evaluation after a crash = %+v, want a masked sandbox error", ev)
	}
	if n := env.Provider().Live(); n != 0 {
		t.Errorf("%d sandboxes live after the only one crashed", n)
	}
}

// TestMaxActions pins PROTOCOL.md §4.4: the call that reaches max_actions
// runs, the later calls of the step are not executed (episode_done), and
// the truncated episode is evaluated on the work done: here it scores 1.
func TestMaxActions(t *testing.T) {
	s := reset(t, newEnv().SetMaxActions(2), "t1")
	res := step(t, s,
		call("a", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`),
		call("b", gym.ToolWriteFile, `{"filepath":"b.txt","content":"it's \"quoted\"\n"}`),
		call("c", gym.ToolExecuteCommand, `{"command":"echo x"}`),
	)
	c := res.Info.Calls[2]
	if !res.Truncated || res.Terminated || res.Info.TerminationReason != gym.ReasonMaxActions || res.Info.Actions != 2 ||
		c.ErrorClass != gym.ClassEpisodeDone || c.ExitCode != -1 ||
		res.Observation.Messages[2].Content != "Not executed: the episode already ended (max_actions)." {
		t.Errorf("step = %+v", res)
	}
	if ev := res.Info.Evaluation; ev == nil || res.Reward != 1 || !ev.Success || ev.Mask {
		t.Errorf("the truncated episode's evaluation = %+v, reward %v; want 1 from the tests", ev, res.Reward)
	}
}

// TestTaskAndSeed pins PROTOCOL.md §4.3: task picks the task whatever the
// seed; a seed without task picks SeedIndex(seed, task_count).
func TestTaskAndSeed(t *testing.T) {
	env := gymtest.NewEnv("m", gymtest.Task{ID: "a"}, gymtest.Task{ID: "b"}, gymtest.Task{ID: "c"})
	ids := []string{"a", "b", "c"}
	for seed := range int64(12) {
		s, r, err := env.Reset(t.Context(), gym.ResetRequest{Task: "b", Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		s.Close(t.Context())
		if r.TaskID != "b" {
			t.Errorf("task b with seed %d: task %s", seed, r.TaskID)
		}
		s, r, err = env.Reset(t.Context(), gym.ResetRequest{Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		s.Close(t.Context())
		if want := ids[envs.SeedIndex(seed, 3)]; r.TaskID != want {
			t.Errorf("seed %d: task %s, want %s", seed, r.TaskID, want)
		}
	}
}

func TestResetErrorsAndHook(t *testing.T) {
	boom := gym.Errorf(gym.ClassSandbox, "no docker")
	fail := true
	env := newEnv().SetResetHook(func(context.Context, gym.ResetRequest) error {
		if fail {
			return boom
		}
		return nil
	})
	if _, _, err := env.Reset(t.Context(), gym.ResetRequest{Task: "t1"}); !errors.Is(err, gym.ErrSandbox) {
		t.Errorf("reset with failing hook: %v, want sandbox error", err)
	}
	fail = false
	if _, _, err := env.Reset(t.Context(), gym.ResetRequest{Task: "nope"}); !errors.Is(err, gym.ErrNotFound) {
		t.Errorf("unknown task: %v", err)
	}
	// Unknown options are all named, sorted.
	if _, _, err := env.Reset(t.Context(), gym.ResetRequest{Options: map[string]any{"x": 1, "b": 2, "a": 3}}); !errors.Is(err, gym.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "options are not supported (got a, b, x;") {
		t.Errorf("options: %v", err)
	}
	if env.Resets() != 0 || len(env.OpenSessions()) != 0 {
		t.Errorf("after failed resets: %d resets, open %v", env.Resets(), env.OpenSessions())
	}
}

func TestCountsAndUniqueIDs(t *testing.T) {
	env := newEnv()
	seen := map[string]bool{}
	var sessions []gym.Session
	for range 50 {
		s, _, err := env.Reset(t.Context(), gym.ResetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if seen[s.ID()] {
			t.Fatalf("duplicate id %s", s.ID())
		}
		seen[s.ID()] = true
		sessions = append(sessions, s)
	}
	if env.Resets() != 50 || len(env.OpenSessions()) != 50 {
		t.Errorf("resets %d open %d", env.Resets(), len(env.OpenSessions()))
	}
	for _, s := range sessions {
		if _, err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(env.OpenSessions()); n != 0 || env.Provider().Live() != 0 {
		t.Errorf("after close: %d open sessions, %d live sandboxes", n, env.Provider().Live())
	}
}

func TestSpecListsEveryTask(t *testing.T) {
	var tasks []gymtest.Task
	for i := range 150 {
		tasks = append(tasks, gymtest.Task{ID: fmt.Sprintf("t%03d", i), Metadata: map[string]any{"i": float64(i)}})
	}
	spec := gymtest.NewEnv("many", tasks...).Spec()
	if spec.TaskCount != 150 || len(spec.Tasks) != 150 || spec.Tasks[149].ID != "t149" || spec.Tasks[7].Metadata["i"] != float64(7) ||
		spec.Tasks[0].Prompt != "Do t000." || len(spec.Tools) != 4 {
		t.Errorf("spec: %d of %d tasks, last %+v", len(spec.Tasks), spec.TaskCount, spec.Tasks[len(spec.Tasks)-1])
	}
	// Without tasks, the environment has its own.
	if spec := gymtest.NewEnv("none").Spec(); spec.TaskCount != 1 || spec.Tasks[0].ID != "none" {
		t.Errorf("spec without tasks: %+v", spec)
	}
}

func TestSnapshotForkAndHook(t *testing.T) {
	forks := 0
	env := newEnv().SetForkHook(func(ctx context.Context, id string) error {
		forks++
		if strings.HasPrefix(id, "refused") {
			return gym.Errorf(gym.ClassUnavailable, "refused")
		}
		return nil
	})
	ctx := t.Context()
	s := reset(t, env, "t1")
	step(t, s, call("w", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`))
	snap, err := s.(gym.Snapshotter).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := env.Snapshots(); !cmp.Equal(got, []string{snap.ID}) {
		t.Errorf("snapshots = %v", got)
	}
	step(t, s, call("w", gym.ToolWriteFile, `{"filepath":"a.txt","content":"changed"}`))
	f, r, err := env.Fork(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	if r.ForkOf != snap.ID || r.Steps != 1 || r.SessionID != f.ID() || !slices.Contains(env.OpenSessions(), f.ID()) {
		t.Errorf("fork reset = %+v; open %v", r, env.OpenSessions())
	}
	if res := step(t, f, call("c", gym.ToolExecuteCommand, `{"command":"cat a.txt"}`)); res.Observation.Messages[0].Content != gymtest.Output("hello") {
		t.Errorf("fork sees %q", res.Observation.Messages[0].Content)
	}
	if _, _, err := env.Fork(ctx, "refused-1"); !errors.Is(err, gym.ErrUnavailable) || forks != 2 {
		t.Errorf("fork refused by the hook: %v after %d forks", err, forks)
	}
	if err := env.DropSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.DropSnapshot(ctx, snap.ID); !errors.Is(err, gym.ErrNotFound) || len(env.Snapshots()) != 0 {
		t.Errorf("drop twice: %v; snapshots %v", err, env.Snapshots())
	}
}
