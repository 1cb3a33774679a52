package rollout_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// powersPlugin answers each hook with one of the powers: parallel at
// pre_rollout, episode changes at pre_episode, a score at post_test, more
// episodes (once) and suggestions at post_episode.
const powersPlugin = `import json, sys
ev = json.load(sys.stdin)
h = ev["hook"]
out = {}
if h == "pre_rollout":
    out = {"parallel": 1}
elif h == "pre_episode":
    assert "environment" in ev
    out = {"episode": {"prompt": "Please write hello to out.txt.", "max_actions": 5, "global_timeout": 30, "command_timeout": 2}}
elif h == "post_test":
    out = {"score": ev["score"] / 4, "data": {"tests_reward": ev["evaluation"]["reward"], "steps_so_far": len(ev["trajectory"]["steps"])}}
elif h == "post_episode":
    out = {"suggestions": ["episode %d: fewer steps" % ev["episode"]]}
    if ev["episode"] == 0:
        out["more_episodes"] = 1
print(json.dumps(out))
`

// TestPluginPowers: a pre_episode answer changes the prompt and the
// limits, a post_test answer the score (the tests' own kept beside it,
// statistics on the new one), a post_episode answer schedules one more
// episode and leaves suggestions.
func TestPluginPowers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "powers.py"), []byte(powersPlugin), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := mustRun(t, runSpec{
		dir:  dir,
		envs: []gym.Env{memEnv("mem")},
		policy: turnsPolicy(
			[]gym.ToolCall{execute("e", "echo hi"), write("w", "out.txt", "hello")},
			[]gym.ToolCall{done("d")},
		),
		plugins: []config.Plugin{{Name: "ext", Enabled: true, Timeout: 10 * time.Second, Command: []string{"/usr/bin/python3", "powers.py"}}},
	})
	if len(sum.Records) != 2 {
		t.Fatalf("%d episodes, want the planned one and the one more", len(sum.Records))
	}
	if o := sum.Stats.Overall; o.Episodes != 2 || o.MeanReward != 0.25 || o.SuccessRate != 1 {
		t.Errorf("overall stats = %+v", o)
	}
	for i, rec := range sum.Records {
		if rec.EpisodeResult.FinalScore != 0.25 {
			t.Errorf("record %d: final_score %v", i, rec.EpisodeResult.FinalScore)
		}
		tr := trajectory(t, sum, "mem", i)
		er := tr.EpisodeResult
		if er.FinalScore != 0.25 || er.TestScore == nil || *er.TestScore != 1 || er.ScoreAdjustedBy != "ext" || !er.Success {
			t.Errorf("episode %d result = %+v", i, er)
		}
		if tr.Evaluation == nil || tr.Evaluation.Reward != 1 {
			t.Errorf("episode %d: evaluation %+v, want the tests' own reward", i, tr.Evaluation)
		}
		want := &gym.EpisodeChanges{By: []string{"ext"}, Prompt: "Please write hello to out.txt.", OriginalPrompt: "Write hello to out.txt.",
			MaxActions: 5, GlobalTimeout: gym.Duration(30 * time.Second), CommandTimeout: gym.Duration(2 * time.Second)}
		if diff := cmp.Diff(want, tr.EpisodeChanges); diff != "" {
			t.Errorf("episode %d changes (-want +got):\n%s", i, diff)
		}
		var user []string
		for _, m := range tr.Messages {
			if m.Role == gym.RoleUser {
				user = append(user, m.Content)
			}
		}
		if len(user) == 0 || user[0] != "Please write hello to out.txt." {
			t.Errorf("episode %d: user messages %q", i, user)
		}
		// The command ran with the plugin's command timeout; the call as
		// the policy made it is kept.
		step := tr.Steps[0]
		var args gym.ExecuteCommandArgs
		_ = json.Unmarshal([]byte(step.Action.ToolCall.Function.Arguments), &args)
		if args.Timeout != 2 || step.Action.OriginalToolCall == nil || strings.Contains(step.Action.OriginalToolCall.Function.Arguments, "timeout") {
			t.Errorf("episode %d: first step %+v", i, step.Action)
		}
		data, _ := tr.Plugins["ext"].(map[string]any)
		wantData := map[string]any{"tests_reward": 1.0, "steps_so_far": 3.0, "suggestions": []any{"episode " + string(rune('0'+i)) + ": fewer steps"}}
		if diff := cmp.Diff(wantData, data); diff != "" {
			t.Errorf("episode %d plugin data (-want +got):\n%s", i, diff)
		}
	}
	if p := sum.Stats.Plugins["ext"]; p.Scores != 2 || p.Failures != 0 {
		t.Errorf("plugin stats = %+v", p)
	}
}

// TestPluginLowersActionLimit: calls past a limit a plugin lowered are not
// sent to the environment, whose own limit is higher, and the episode ends
// at the lowered limit.
func TestPluginLowersActionLimit(t *testing.T) {
	sum := mustRun(t, runSpec{
		envs: []gym.Env{memEnv("mem").SetMaxActions(50)},
		policy: turnsPolicy(
			[]gym.ToolCall{write("a", "a.txt", "1"), write("b", "b.txt", "2"), write("c", "c.txt", "3")},
			[]gym.ToolCall{done("d")},
		),
		plugins: []config.Plugin{{Name: "lim", Enabled: true, Timeout: 10 * time.Second, Hooks: []string{"pre_episode"},
			Command: []string{"/bin/sh", "-c", `cat >/dev/null; echo '{"episode": {"max_actions": 2}}'`}}},
	})
	tr := trajectory(t, sum, "mem", 0)
	if er := tr.EpisodeResult; er.TerminatedReason != gym.ReasonMaxActions || er.Actions != 3 {
		t.Errorf("episode result = %+v", er)
	}
	tools := toolMessages(tr.Messages)
	if len(tools) != 3 || !strings.Contains(tools[2].Content, "Not executed: the action limit (2) was reached.") ||
		strings.Contains(tools[1].Content, "Not executed") {
		t.Errorf("tool messages = %+v", tools)
	}
	if tr.Steps[2].Result.Success || tr.Steps[2].Result.ErrorClass != gym.ClassAgent {
		t.Errorf("third step = %+v", tr.Steps[2].Result)
	}

	// A limit above the environment's does not raise it.
	sum = mustRun(t, runSpec{
		envs:   []gym.Env{memEnv("mem").SetMaxActions(1)},
		policy: turnsPolicy([]gym.ToolCall{write("a", "a.txt", "1")}, []gym.ToolCall{write("b", "b.txt", "2")}),
		plugins: []config.Plugin{{Name: "lim", Enabled: true, Timeout: 10 * time.Second, Hooks: []string{"pre_episode"},
			Command: []string{"/bin/sh", "-c", `cat >/dev/null; echo '{"episode": {"max_actions": 9}}'`}}},
	})
	tr = trajectory(t, sum, "mem", 0)
	if tr.EpisodeChanges == nil || tr.EpisodeChanges.MaxActions != 1 || tr.EpisodeResult.Actions != 1 {
		t.Errorf("changes %+v, result %+v", tr.EpisodeChanges, tr.EpisodeResult)
	}
}

// TestPluginChangesParallelism: a pre_rollout answer of parallel 1 runs
// the episodes one at a time although the config allows four.
func TestPluginChangesParallelism(t *testing.T) {
	var mu sync.Mutex
	running, most := 0, 0
	pol := policyFunc(func(ctx context.Context, msgs []gym.Message, _ []gym.Tool) (gym.Turn, error) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{done("d")}}}, nil
	})
	envs := []gym.Env{memEnv("a"), memEnv("b"), memEnv("c"), memEnv("d")}
	cfg := testConfig(func(c *config.Config) { c.Rollout.MaxParallelRollouts = 4 })
	sum := mustRun(t, runSpec{cfg: cfg, envs: envs, policy: pol,
		plugins: []config.Plugin{{Name: "serial", Enabled: true, Timeout: 10 * time.Second, Hooks: []string{"pre_rollout"},
			Command: []string{"/bin/sh", "-c", `cat >/dev/null; echo '{"parallel": 1}'`}}}})
	if len(sum.Records) != 4 || most != 1 {
		t.Errorf("%d episodes, at most %d at once; want 4, 1", len(sum.Records), most)
	}
}
