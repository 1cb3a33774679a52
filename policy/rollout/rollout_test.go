package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/gym/toolparse"
	"github.com/gymserver/gymserver/internal/waittest"
	"github.com/gymserver/gymserver/policy/rollout"
)

func TestEpisodeTranscriptAndOutputs(t *testing.T) {
	env := memEnv("mem")
	sum := mustRun(t, runSpec{
		envs: []gym.Env{env},
		policy: turnsPolicy(
			[]gym.ToolCall{write("a", "out.txt", "hello"), execute("b", "cat out.txt"), execute("c", "echo hi")},
			[]gym.ToolCall{done("d")},
		),
	})
	tr := trajectory(t, sum, "mem", 0)
	var got []string
	for _, m := range tr.Messages {
		got = append(got, fmt.Sprintf("%s %s %s", m.Role, m.ToolCallID, m.Content))
	}
	want := []string{
		"system  " + tr.Messages[0].Content,
		"user  Write hello to out.txt.",
		"assistant  thinking",
		"tool a Wrote 5 bytes to /workspace/out.txt.",
		"tool b " + gymtest.Output("hello"),
		"tool c " + gymtest.Output("hi\n"),
		"assistant  thinking",
		"tool d Marked done. The episode is over; the tests will now run.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transcript (-want +got):\n%s", diff)
	}
	er := tr.EpisodeResult
	if !er.Success || er.FinalScore != 1 || er.TerminatedReason != gym.ReasonCompleted || !er.AgentDone ||
		er.AgentDoneMessage != "finished" || er.Actions != 4 || er.Mask {
		t.Errorf("episode result = %+v", er)
	}
	if len(tr.Steps) != 4 || tr.Steps[1].Action.Type != "command" || tr.Steps[1].Action.Content != "cat out.txt" ||
		tr.Steps[1].Action.Turn != 1 || tr.Steps[3].Action.Type != "done" || tr.Steps[3].Action.Turn != 2 {
		t.Errorf("steps = %+v", tr.Steps)
	}
	if tr.Usage.TotalTokens != 30 || tr.Usage.Calls != 2 || len(tr.Turns) != 2 || tr.Turns[0].ToolCalls != 3 || tr.Turns[1].MessageIndex != 6 {
		t.Errorf("usage = %+v, turns = %+v", tr.Usage, tr.Turns)
	}
	if tr.Evaluation == nil || tr.Evaluation.Passed != 1 || tr.Policy != "test" || tr.SessionID == "" {
		t.Errorf("trajectory header or evaluation wrong: %+v", tr)
	}

	recs := readJSON[[]rollout.Record](t, sum.ResultsPath)
	if len(recs) != 1 || recs[0].TrajectoryFile != filepath.Join("trajectories", "mem-0.json") || recs[0].EpisodeResult != er {
		t.Errorf("results = %+v", recs)
	}
	stats := readJSON[rollout.Stats](t, sum.StatsPath)
	if o := stats.Overall; o.Episodes != 1 || o.SuccessRate != 1 || o.MeanReward != 1 || o.TestPassRate != 1 || o.Actions != 4 {
		t.Errorf("overall stats = %+v", o)
	}
	if _, ok := stats.Environments["mem"]; !ok {
		t.Errorf("stats have no entry for mem: %+v", stats.Environments)
	}
	if open := env.OpenSessions(); len(open) != 0 {
		t.Errorf("sessions left open: %v", open)
	}
}

func TestBadCallsAreAgentErrorsAndTheEpisodeGoesOn(t *testing.T) {
	sum := mustRun(t, runSpec{
		envs: []gym.Env{memEnv("mem")},
		policy: turnsPolicy(
			[]gym.ToolCall{gym.NewToolCall("bad", gym.ToolExecuteCommand, `{"command": "echo`), gym.NewToolCall("fly", "fly", `{}`)},
			[]gym.ToolCall{write("w", "out.txt", "hello"), done("d")},
		),
	})
	tr := trajectory(t, sum, "mem", 0)
	tools := toolMessages(tr.Messages)
	if len(tools) != 4 || tools[0].ToolCallID != "bad" || tools[1].ToolCallID != "fly" {
		t.Fatalf("tool messages = %+v", tools)
	}
	for i := range 2 {
		if tr.Steps[i].Result.ErrorClass != gym.ClassAgent || tr.Steps[i].Result.Success {
			t.Errorf("step %d = %+v, want an agent_error", i, tr.Steps[i].Result)
		}
	}
	if tr.Steps[0].Action.Content != `{"command": "echo` {
		t.Errorf("raw arguments not kept: %q", tr.Steps[0].Action.Content)
	}
	if er := tr.EpisodeResult; !er.Success || er.ActionErrors != 2 || er.Actions != 4 {
		t.Errorf("episode result = %+v", er)
	}
	if got := sum.Stats.Overall.ActionErrorRate; got != 0.5 {
		t.Errorf("action error rate = %v, want 0.5", got)
	}
}

func TestTurnsWithoutToolCallsAreNudgedThenEnd(t *testing.T) {
	env := memEnv("mem")
	sum := mustRun(t, runSpec{envs: []gym.Env{env}, policy: turnsPolicy()})
	tr := trajectory(t, sum, "mem", 0)
	var nudges int
	for _, m := range tr.Messages[2:] {
		if m.Role == gym.RoleUser {
			nudges++
			if !strings.Contains(m.Content, "mark_done") {
				t.Errorf("nudge %q does not name the tools", m.Content)
			}
		}
	}
	er := tr.EpisodeResult
	if nudges != rollout.DefaultMaxNoActionTurns-1 || len(tr.Turns) != rollout.DefaultMaxNoActionTurns ||
		er.TerminatedReason != gym.ReasonNoAction || er.Success || er.Mask || tr.Evaluation == nil {
		t.Errorf("nudges = %d, turns = %d, result = %+v", nudges, len(tr.Turns), er)
	}
}

func TestParseErrorIsSentBackToTheAgent(t *testing.T) {
	var n counter
	pol := policyFunc(func(ctx context.Context, msgs []gym.Message, _ []gym.Tool) (gym.Turn, error) {
		if n.next() == 0 {
			return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant, Content: "Action: ???"}, ParseError: "could not parse your Action line"}, nil
		}
		return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{write("", "out.txt", "hello"), done("")}}}, nil
	})
	sum := mustRun(t, runSpec{envs: []gym.Env{memEnv("mem")}, policy: pol})
	tr := trajectory(t, sum, "mem", 0)
	if tr.Messages[3].Role != gym.RoleUser || tr.Messages[3].Content != "could not parse your Action line" {
		t.Errorf("message after the bad turn = %+v", tr.Messages[3])
	}
	if tr.Turns[0].ParseError == "" || !tr.EpisodeResult.Success {
		t.Errorf("turns = %+v, result = %+v", tr.Turns, tr.EpisodeResult)
	}
	// Calls without ids get ids, and each tool message answers its own.
	tools := toolMessages(tr.Messages)
	if len(tools) != 2 || tools[0].ToolCallID == "" || tools[0].ToolCallID == tools[1].ToolCallID ||
		tools[0].ToolCallID != tr.Messages[4].ToolCalls[0].ID {
		t.Errorf("tool call ids: assistant %+v, tools %+v", tr.Messages[4].ToolCalls, tools)
	}
}

// TestTextTurnsAreParsedByTheEnvironment: a text-mode turn is stepped as
// text, so the environment parses it, reports a malformed call as it does
// to a remote trainer, and names the calls; the transcript uses its ids.
func TestTextTurnsAreParsedByTheEnvironment(t *testing.T) {
	var n counter
	turns := []gym.Turn{
		{Message: gym.Message{Content: `<tool_call>{"name": "write_file", "arguments": {oops</tool_call>`}, Parser: toolparse.Hermes},
		{Message: gym.Message{Content: `<tool_call>{"id": "call_0", "name": "write_file", "arguments": {"filepath": "out.txt", "content": "hello"}}</tool_call>`}, Parser: toolparse.Hermes},
		{Message: gym.Message{Content: "Action: mark_done\nAction Input: {}"}, Parser: toolparse.ReAct},
	}
	pol := policyFunc(func(ctx context.Context, msgs []gym.Message, _ []gym.Tool) (gym.Turn, error) {
		return turns[min(n.next(), len(turns)-1)], nil
	})
	sum := mustRun(t, runSpec{envs: []gym.Env{memEnv("mem")}, policy: pol})
	tr := trajectory(t, sum, "mem", 0)
	if !tr.EpisodeResult.Success || len(tr.Turns) != 3 {
		t.Fatalf("turns = %+v, result = %+v", tr.Turns, tr.EpisodeResult)
	}
	// The malformed turn was a step: the environment's explanation follows.
	if m := tr.Messages[3]; m.Role != gym.RoleUser || !strings.Contains(m.Content, "<tool_call> block 1") || tr.Turns[0].ParseError == "" {
		t.Errorf("after the malformed turn: %+v (turn %+v)", m, tr.Turns[0])
	}
	tools := toolMessages(tr.Messages)
	if len(tools) != 2 || tools[0].ToolCallID != gym.CallID(2, 0) || tools[1].ToolCallID != gym.CallID(3, 0) ||
		tr.Messages[4].ToolCalls[0].ID != tools[0].ToolCallID || tr.Messages[6].ToolCalls[0].ID != tools[1].ToolCallID {
		t.Errorf("tool call ids: assistants %+v %+v, tools %+v", tr.Messages[4].ToolCalls, tr.Messages[6].ToolCalls, tools)
	}
}

func TestPolicyErrorIsClassifiedAndMasked(t *testing.T) {
	env := memEnv("mem")
	pol := policyFunc(func(context.Context, []gym.Message, []gym.Tool) (gym.Turn, error) {
		return gym.Turn{}, gym.Classify(errors.New("llm: status 500: upstream failed"), gym.ClassPolicy)
	})
	sum := mustRun(t, runSpec{envs: []gym.Env{env}, policy: pol})
	tr := trajectory(t, sum, "mem", 0)
	er := tr.EpisodeResult
	if er.TerminatedReason != gym.ReasonPolicyError || er.ErrorClass != gym.ClassPolicy || !er.Mask || er.Success ||
		!strings.Contains(er.Error, "upstream failed") || tr.Evaluation != nil {
		t.Errorf("episode result = %+v", er)
	}
	if len(tr.Turns) != 1 || tr.Turns[0].Error == "" || tr.Turns[0].MessageIndex != -1 {
		t.Errorf("turns = %+v", tr.Turns)
	}
	o := sum.Stats.Overall
	if o.PolicyErrors != 1 || o.Masked != 1 || o.Scored != 0 || o.SuccessRate != 0 || o.ErrorClasses[gym.ClassPolicy] != 1 {
		t.Errorf("overall = %+v", o)
	}
	if open := env.OpenSessions(); len(open) != 0 {
		t.Errorf("sessions left open: %v", open)
	}
}

func TestSafetyFilterBlocksOnlyTheDangerousCall(t *testing.T) {
	env := memEnv("mem")
	sum := mustRun(t, runSpec{
		envs: []gym.Env{env},
		policy: turnsPolicy(
			[]gym.ToolCall{execute("x", "echo before"), execute("rm", "rm -rf / --no-preserve-root"), write("w", "out.txt", "hello")},
			[]gym.ToolCall{done("d")},
		),
		plugins: []config.Plugin{{Name: "safety_filter", Enabled: true, Timeout: time.Second}},
	})
	tr := trajectory(t, sum, "mem", 0)
	tools := toolMessages(tr.Messages)
	if len(tools) != 4 || tools[1].ToolCallID != "rm" || !strings.HasPrefix(tools[1].Content, "Blocked by safety_filter:") ||
		!strings.Contains(tools[1].Content, "delete_root") || tools[0].Content != gymtest.Output("before\n") {
		t.Fatalf("tool messages = %+v", tools)
	}
	st := tr.Steps[1]
	if !st.Result.Blocked || st.Result.ErrorClass != gym.ClassAgent || st.Result.Success {
		t.Errorf("blocked step = %+v", st)
	}
	if er := tr.EpisodeResult; !er.Success || er.Actions != 4 || er.ActionErrors != 1 {
		t.Errorf("episode result = %+v", er)
	}
	if p := sum.Stats.Plugins["safety_filter"]; p.Blocks != 1 || p.Calls != 4 {
		t.Errorf("plugin stats = %+v", p)
	}
	if _, ok := tr.Plugins["safety_filter"]; !ok {
		t.Errorf("trajectory plugins = %v", tr.Plugins)
	}
}

func TestPluginsDisabledDoNotRun(t *testing.T) {
	sum := mustRun(t, runSpec{
		cfg:     testConfig(func(c *config.Config) { c.Rollout.EnablePlugins = false }),
		envs:    []gym.Env{memEnv("mem")},
		policy:  turnsPolicy([]gym.ToolCall{execute("rm", "rm -rf /")}, []gym.ToolCall{done("d")}),
		plugins: []config.Plugin{{Name: "safety_filter", Enabled: true, Timeout: time.Second}},
	})
	tr := trajectory(t, sum, "mem", 0)
	if tr.Steps[0].Result.Blocked || len(sum.Stats.Plugins) != 0 {
		t.Errorf("plugins ran though disabled: step %+v, stats %+v", tr.Steps[0], sum.Stats.Plugins)
	}
}

// limitedEnv gives its episodes a global timeout.
type limitedEnv struct {
	gym.Env
	global time.Duration
}

func (e limitedEnv) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	s, r, err := e.Env.Reset(ctx, req)
	r.Limits.GlobalTimeout = gym.Duration(e.global)
	return s, r, err
}

func TestSlowPolicyIsCutAtTheGlobalTimeout(t *testing.T) {
	pol := policyFunc(func(ctx context.Context, _ []gym.Message, _ []gym.Tool) (gym.Turn, error) {
		<-ctx.Done()
		return gym.Turn{}, fmt.Errorf("llm: %w", ctx.Err())
	})
	start := time.Now()
	sum := mustRun(t, runSpec{envs: []gym.Env{limitedEnv{memEnv("mem"), 200 * time.Millisecond}}, policy: pol})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("run took %s", took)
	}
	er := trajectory(t, sum, "mem", 0).EpisodeResult
	if er.TerminatedReason != gym.ReasonTimeout || er.ErrorClass != "" || er.Mask {
		t.Errorf("episode result = %+v, want an unmasked timeout", er)
	}
}

// hungEnv's sessions never finish a step before their context ends.
type hungEnv struct{ limitedEnv }

type hungSession struct{ gym.Session }

func (e hungEnv) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	s, r, err := e.limitedEnv.Reset(ctx, req)
	return hungSession{s}, r, err
}

func (hungSession) Step(ctx context.Context, _ gym.Action) (gym.StepResult, error) {
	<-ctx.Done()
	return gym.StepResult{}, ctx.Err()
}

func TestHungEnvironmentEndsAtTheHardDeadline(t *testing.T) {
	env := memEnv("mem")
	start := time.Now()
	sum := mustRun(t, runSpec{
		cfg:    testConfig(func(c *config.Config) { c.Timeouts.Test = 10 * time.Millisecond }),
		envs:   []gym.Env{hungEnv{limitedEnv{env, 100 * time.Millisecond}}},
		policy: turnsPolicy([]gym.ToolCall{execute("s", "sleep 1000")}),
		grace:  100 * time.Millisecond,
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("run took %s", took)
	}
	er := trajectory(t, sum, "mem", 0).EpisodeResult
	if er.TerminatedReason != gym.ReasonTimeout || er.ErrorClass != gym.ClassSandbox || !er.Mask {
		t.Errorf("episode result = %+v, want a masked sandbox_error timeout", er)
	}
	if open := env.OpenSessions(); len(open) != 0 {
		t.Errorf("sessions left open: %v", open)
	}
}

func TestCancelStopsCleanly(t *testing.T) {
	env := memEnv("slow")
	fast := memEnv("fast")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	factory := func(spec gym.EnvSpec, _ gym.TaskSpec) (gym.Policy, error) {
		if spec.ID == "fast" {
			return turnsPolicy([]gym.ToolCall{write("w", "out.txt", "hello"), done("d")}), nil
		}
		return policyFunc(func(ctx context.Context, _ []gym.Message, _ []gym.Tool) (gym.Turn, error) {
			<-ctx.Done()
			return gym.Turn{}, ctx.Err()
		}), nil
	}
	dir := t.TempDir()
	errc := make(chan error, 1)
	var sum *rollout.Summary
	go func() {
		var err error
		sum, err = run(t, ctx, runSpec{
			cfg:     testConfig(func(c *config.Config) { c.EpisodeControl.MaxEpisodes = 3 }),
			envs:    []gym.Env{fast, env},
			factory: factory,
			dir:     dir,
		})
		errc <- err
	}()
	waittest.For(t, "the slow episodes to start", 5*time.Second, func() bool { return len(env.OpenSessions()) == 2 })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run error = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop after cancel")
	}
	if open := env.OpenSessions(); len(open) != 0 {
		t.Errorf("sessions left open: %v", open)
	}
	recs := readJSON[[]rollout.Record](t, filepath.Join(dir, "results.json"))
	for _, r := range recs {
		if r.EnvironmentID != "fast" {
			t.Errorf("a stopped episode was recorded: %+v", r)
		}
	}
	stats := readJSON[rollout.Stats](t, filepath.Join(dir, "results.stats.json"))
	if !stats.Run.Interrupted || stats.Run.Stopped != 2 || sum.Stats.Run.Stopped != 2 {
		t.Errorf("run info = %+v", stats.Run)
	}
	if _, err := os.Stat(filepath.Join(dir, "trajectories", "slow-0.json")); !os.IsNotExist(err) {
		t.Errorf("stopped episode has a trajectory: %v", err)
	}
}

func TestStatePersistenceResumes(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(func(c *config.Config) {
		c.EpisodeControl.MaxEpisodes = 3
		c.Rollout.StatePersistenceEnabled = true
	})
	pol := turnsPolicy([]gym.ToolCall{write("w", "out.txt", "hello"), done("d")})
	first := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{memEnv("mem")}, policy: pol, dir: dir})
	if first.Stats.Overall.Episodes != 3 {
		t.Fatalf("first run: %+v", first.Stats.Overall)
	}
	// Drop one trajectory: only that episode runs again.
	if err := os.Remove(filepath.Join(dir, "trajectories", "mem-1.json")); err != nil {
		t.Fatal(err)
	}
	env := memEnv("mem")
	second := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{env}, policy: pol, dir: dir})
	if env.Resets() != 1 || second.Stats.Run.Resumed != 2 || second.Stats.Overall.Episodes != 3 || second.Stats.Overall.Successes != 3 {
		t.Errorf("resets = %d, run = %+v, overall = %+v", env.Resets(), second.Stats.Run, second.Stats.Overall)
	}
	var got []string
	for _, r := range readJSON[[]rollout.Record](t, filepath.Join(dir, "results.json")) {
		got = append(got, fmt.Sprintf("%s-%d resumed=%t", r.EnvironmentID, r.Episode, r.Resumed))
	}
	want := []string{"mem-0 resumed=true", "mem-1 resumed=false", "mem-2 resumed=true"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}
