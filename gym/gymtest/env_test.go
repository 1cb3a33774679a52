package gymtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
)

func newEnv() *gymtest.Env {
	return gymtest.NewEnv("mem",
		gymtest.Task{ID: "t1", Prompt: "write hello", Expect: map[string]string{"a.txt": "hello", "b.txt": "world"}},
		gymtest.Task{ID: "t2", Prompt: "nothing"},
	)
}

func call(id, name, args string) gym.ToolCall { return gym.NewToolCall(id, name, args) }

func TestEpisode(t *testing.T) {
	env := newEnv()
	ctx := t.Context()
	s, r, err := env.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.TaskID != "t1" || r.SessionID != s.ID() || len(r.Messages) != 2 || len(r.Tools) != 4 {
		t.Fatalf("reset = %+v", r)
	}
	res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{
		call("c1", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`),
		call("c2", gym.ToolExecuteCommand, `{"command":"cat a.txt"}`),
		call("", gym.ToolExecuteCommand, `{"command":"nosuch"}`),
		call("c4", "fly", `{}`),
		call("c5", gym.ToolReadFile, `{"filepath":`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ids, contents []string
	var classes []gym.ErrorClass
	var codes []int
	for i, m := range res.Observation.Messages {
		ids = append(ids, m.ToolCallID)
		contents = append(contents, m.Content)
		classes = append(classes, res.Info.Calls[i].ErrorClass)
		codes = append(codes, res.Info.Calls[i].ExitCode)
	}
	if d := cmp.Diff([]string{"c1", "c2", "call_1_2", "c4", "c5"}, ids); d != "" {
		t.Errorf("call ids (-want +got):\n%s", d)
	}
	if contents[1] != "hello" || contents[2] != "sh: nosuch: command not found\n" {
		t.Errorf("contents = %q", contents)
	}
	if d := cmp.Diff([]gym.ErrorClass{"", "", "", gym.ClassAgent, gym.ClassAgent}, classes); d != "" {
		t.Errorf("classes (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{-1, 0, 127, -1, -1}, codes); d != "" {
		t.Errorf("exit codes (-want +got):\n%s", d)
	}
	if res.Done() || res.Info.Actions != 5 {
		t.Errorf("step = %+v", res)
	}
	res, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{call("d", gym.ToolMarkDone, `{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Terminated || res.Reward != 0.5 || res.Info.TerminationReason != gym.ReasonCompleted || !res.Info.AgentDone {
		t.Errorf("final step = %+v", res)
	}
	if _, err := s.Step(ctx, gym.Action{}); !errors.Is(err, gym.ErrEpisodeDone) {
		t.Errorf("step after end: %v, want ErrEpisodeDone", err)
	}
	ev1, err1 := s.Evaluate(ctx)
	ev2, err2 := s.Evaluate(ctx)
	if err1 != nil || err2 != nil || ev1.Reward != 0.5 || !cmp.Equal(ev1, ev2) {
		t.Errorf("evaluate twice: %v %v %+v %+v", err1, err2, ev1, ev2)
	}
	r1, err1 := s.Close(ctx)
	r2, err2 := s.Close(ctx)
	if err1 != nil || err2 != nil || !cmp.Equal(r1, r2) || r1.Evaluation == nil || r1.TerminationReason != gym.ReasonCompleted {
		t.Errorf("close twice: %v %v %+v %+v", err1, err2, r1, r2)
	}
	if got := env.OpenSessions(); len(got) != 0 {
		t.Errorf("open sessions after close: %v", got)
	}
}

func TestMaxActions(t *testing.T) {
	env := newEnv().SetMaxActions(2)
	s, _, err := env.Reset(t.Context(), gym.ResetRequest{Task: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	res, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{
		call("a", gym.ToolExecuteCommand, `{"command":"true"}`),
		call("b", gym.ToolExecuteCommand, `{"command":"false"}`),
		call("c", gym.ToolExecuteCommand, `{"command":"echo x"}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.Info.TerminationReason != gym.ReasonMaxActions || res.Info.Calls[2].ErrorClass != gym.ClassEpisodeDone || res.Reward != 0 {
		t.Errorf("step = %+v", res)
	}
	if res.Info.Calls[1].ExitCode != 1 {
		t.Errorf("false exit code = %d", res.Info.Calls[1].ExitCode)
	}
}

func TestResetErrors(t *testing.T) {
	env := newEnv()
	if _, _, err := env.Reset(t.Context(), gym.ResetRequest{Task: "nope"}); !errors.Is(err, gym.ErrNotFound) {
		t.Errorf("unknown task: %v", err)
	}
	if _, _, err := env.Reset(t.Context(), gym.ResetRequest{Options: map[string]any{"x": 1}}); !errors.Is(err, gym.ErrInvalidArgument) {
		t.Errorf("options: %v", err)
	}
}

func TestCloseCancelsSleep(t *testing.T) {
	env := newEnv()
	s, _, err := env.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{call("a", gym.ToolExecuteCommand, `{"command":"sleep 60"}`)}})
		errc <- err
	}()
	// Close may run before the step starts; then the step sees a closed
	// session. Either way it must return promptly.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) && !errors.Is(err, gym.ErrEpisodeDone) {
				t.Errorf("step = %v, want canceled or episode done", err)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("step did not return after close")
}

func TestUniqueIDs(t *testing.T) {
	env := newEnv()
	seen := map[string]bool{}
	for range 100 {
		s, _, err := env.Reset(t.Context(), gym.ResetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if seen[s.ID()] {
			t.Fatalf("duplicate id %s", s.ID())
		}
		seen[s.ID()] = true
	}
	if env.Resets() != 100 || len(env.OpenSessions()) != 100 {
		t.Errorf("resets %d open %d", env.Resets(), len(env.OpenSessions()))
	}
}

func TestCloseCancelsRunningAndWaitingSteps(t *testing.T) {
	env := newEnv()
	s, _, err := env.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{call("a", gym.ToolExecuteCommand, `{"command":"sleep 60"}`)}})
			errc <- err
		}()
	}
	// Wait until one step is sleeping (holding the session) and the
	// other is waiting for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := s.(*gymtest.Session).StepsInFlight(); n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("steps did not start")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if _, err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("close took %s: it waited for the sleeping step", d)
	}
	for range 2 {
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) && !errors.Is(err, gym.ErrEpisodeDone) {
				t.Errorf("step = %v, want canceled or episode done", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a step did not return after close")
		}
	}
}

func TestResetHookAndCrash(t *testing.T) {
	boom := gym.Errorf(gym.ClassSandbox, "no docker")
	fail := true
	env := newEnv().SetResetHook(func(context.Context, gym.ResetRequest) error {
		if fail {
			return boom
		}
		return nil
	})
	if _, _, err := env.Reset(t.Context(), gym.ResetRequest{}); !errors.Is(err, gym.ErrSandbox) {
		t.Fatalf("reset with failing hook: %v, want sandbox error", err)
	}
	fail = false
	s, _, err := env.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	res, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{call("a", gym.ToolExecuteCommand, `{"command":"crash"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.Info.TerminationReason != gym.ReasonSandboxError || res.Info.Calls[0].ErrorClass != gym.ClassSandbox {
		t.Errorf("crash step = %+v", res)
	}
}

func TestSnapshotAndFork(t *testing.T) {
	env := newEnv()
	ctx := t.Context()
	s, _, err := env.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{call("w", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`)}}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.(gym.Snapshotter).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.EnvID != "mem" || snap.TaskID != "t1" || snap.SessionID != s.ID() || snap.Steps != 1 || snap.Actions != 1 || snap.Created.IsZero() {
		t.Errorf("snapshot = %+v", snap)
	}
	if got := env.Snapshots(); !cmp.Equal(got, []string{snap.ID}) {
		t.Errorf("snapshots = %v", got)
	}
	// The original goes on; the fork sees the files as they were.
	if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{call("w", gym.ToolWriteFile, `{"filepath":"a.txt","content":"changed"}`)}}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	f, r, err := env.Fork(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer f.Close(context.Background())
	if r.ForkOf != snap.ID || r.Steps != 1 || r.Actions != 1 || r.TaskID != "t1" || r.SessionID == s.ID() || r.SessionID != f.ID() {
		t.Errorf("fork reset = %+v", r)
	}
	res, err := f.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{
		call("c", gym.ToolExecuteCommand, `{"command":"cat a.txt"}`),
		call("w", gym.ToolWriteFile, `{"filepath":"b.txt","content":"world"}`),
		call("d", gym.ToolMarkDone, `{}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Observation.Messages[0].Content != "hello" || res.Info.Step != 2 || res.Info.Actions != 4 || res.Reward != 1 {
		t.Errorf("fork step = %+v", res)
	}
	fin, err := f.Close(ctx)
	if err != nil || fin.Steps != 2 {
		t.Errorf("fork result = %+v %v; want 2 steps", fin, err)
	}
	// The fork's clock counts the time the snapshot had used.
	if forked := fin.StartTime.Add(time.Duration(snap.Elapsed)); forked.Before(before) || forked.After(after) {
		t.Errorf("fork started %v + elapsed %v, want within the Fork call [%v, %v]", fin.StartTime, snap.Elapsed, before, after)
	}
	// After the end no snapshot; unknown and dropped snapshots are not found.
	if _, err := f.(gym.Snapshotter).Snapshot(ctx); !errors.Is(err, gym.ErrEpisodeDone) {
		t.Errorf("snapshot after the end: %v, want ErrEpisodeDone", err)
	}
	if err := env.DropSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{snap.ID, "nope"} {
		if _, _, err := env.Fork(ctx, id); !errors.Is(err, gym.ErrNotFound) {
			t.Errorf("fork %s: %v, want ErrNotFound", id, err)
		}
		if err := env.DropSnapshot(ctx, id); !errors.Is(err, gym.ErrNotFound) {
			t.Errorf("drop %s: %v, want ErrNotFound", id, err)
		}
	}
	if got := env.Snapshots(); len(got) != 0 {
		t.Errorf("snapshots after drop = %v", got)
	}
}
