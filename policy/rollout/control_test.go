package rollout_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/rollout"
)

// outcomePolicy solves the i-th episode it starts when outcomes[i] is true
// (the last outcome repeats). Episodes must run one at a time.
func outcomePolicy(outcomes ...bool) gym.Policy {
	var episodes counter
	return policyFunc(func(ctx context.Context, msgs []gym.Message, _ []gym.Tool) (gym.Turn, error) {
		if len(msgs) > 2 {
			return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{done("d")}}}, nil
		}
		i := min(episodes.next(), len(outcomes)-1)
		content := "nope"
		if outcomes[i] {
			content = "hello"
		}
		return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{write("w", "out.txt", content)}}}, nil
	})
}

func TestEpisodeControl(t *testing.T) {
	one, two := 1, 2
	half := 0.5
	const S, F = true, false
	tests := []struct {
		name     string
		mod      func(*config.Config)
		envs     []string
		outcomes []bool
		plugins  []config.Plugin
		// want is the number of episodes run per environment.
		want map[string]int
		// stop is the expected stop reason by environment ("*": run).
		stop map[string]string
	}{
		{name: "max_episodes", mod: func(c *config.Config) { c.EpisodeControl.MaxEpisodes = 4 },
			envs: []string{"a", "b"}, outcomes: []bool{F}, want: map[string]int{"a": 4, "b": 4}},
		{name: "max_episodes_per_env", mod: func(c *config.Config) {
			c.EpisodeControl.MaxEpisodes = 5
			c.EpisodeControl.MaxEpisodesPerEnv = &two
		}, envs: []string{"a"}, outcomes: []bool{F}, want: map[string]int{"a": 2}},
		{name: "max_episodes_per_env_above_max", mod: func(c *config.Config) {
			c.EpisodeControl.MaxEpisodes = 1
			c.EpisodeControl.MaxEpisodesPerEnv = &two
		}, envs: []string{"a"}, outcomes: []bool{F}, want: map[string]int{"a": one}},
		{name: "stop_on_success", mod: func(c *config.Config) {
			c.EpisodeControl.MaxEpisodes = 5
			c.EpisodeControl.StopOnSuccess = true
		}, envs: []string{"a"}, outcomes: []bool{F, S, F}, want: map[string]int{"a": 2}, stop: map[string]string{"a": "stop_on_success"}},
		{name: "min_success_rate", mod: func(c *config.Config) {
			c.EpisodeControl.MaxEpisodes = 6
			c.EpisodeControl.MinSuccessRate = &half
		}, envs: []string{"a"}, outcomes: []bool{F, F, S, S, S}, want: map[string]int{"a": 4},
			stop: map[string]string{"a": "min_success_rate 0.50 reached"}},
		{name: "min_success_rate_needs_two_episodes", mod: func(c *config.Config) {
			c.EpisodeControl.MaxEpisodes = 3
			c.EpisodeControl.MinSuccessRate = &half
		}, envs: []string{"a"}, outcomes: []bool{S}, want: map[string]int{"a": 2},
			stop: map[string]string{"a": "min_success_rate 0.50 reached"}},
		{name: "safety_limit", mod: func(c *config.Config) {
			c.EpisodeControl.MaxEpisodes = 3
			c.EpisodeControl.SafetyLimit = 4
		}, envs: []string{"a", "b"}, outcomes: []bool{F}, want: map[string]int{"a": 2, "b": 2},
			stop: map[string]string{"*": "safety_limit 4 reached"}},
		{name: "performance_based_rollout", mod: func(c *config.Config) { c.EpisodeControl.MaxEpisodes = 6 },
			envs: []string{"a"}, outcomes: []bool{F, S, S, F},
			plugins: []config.Plugin{{Name: "performance_based_rollout", Enabled: true, Timeout: time.Second,
				Config: json.RawMessage(`{"window": 2, "threshold": 1.0}`)}},
			want: map[string]int{"a": 3}, stop: map[string]string{"a": "plugin performance_based_rollout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(func(c *config.Config) {
				c.Rollout.MaxParallelRollouts = 1
				tt.mod(c)
			})
			var list []gym.Env
			for _, id := range tt.envs {
				list = append(list, memEnv(id))
			}
			sum := mustRun(t, runSpec{cfg: cfg, envs: list, policy: outcomePolicy(tt.outcomes...), plugins: tt.plugins})
			got := map[string]int{}
			for id, a := range sum.Stats.Environments {
				got[id] = a.Episodes
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("episodes per environment (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.stop, sum.Stats.Run.StopReasons, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("stop reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompute(t *testing.T) {
	rec := func(env string, reward float64, success, mask bool, class gym.ErrorClass, passed, total, actions, errs int, secs float64) rollout.Record {
		return rollout.Record{EnvironmentID: env, EpisodeResult: gym.EpisodeResult{
			Success: success, FinalScore: reward, Mask: mask, ErrorClass: class, TestsPassed: passed, TestsTotal: total,
			Actions: actions, ActionErrors: errs, DurationSeconds: secs, TerminatedReason: gym.ReasonCompleted,
		}}
	}
	recs := []rollout.Record{
		rec("a", 1, true, false, "", 4, 4, 5, 1, 10),
		rec("a", 0.5, false, false, "", 2, 4, 5, 0, 20),
		rec("a", 0, false, true, gym.ClassPolicy, 0, 0, 0, 0, 3),
		rec("b", 0, false, true, gym.ClassSandbox, 0, 4, 10, 4, 3),
	}
	plans := []rollout.EnvPlan{{ID: "a", Tasks: []string{"a"}}, {ID: "b", Tasks: []string{"b"}}, {ID: "c", Tasks: []string{"c"}}}
	stats := rollout.Compute(recs, plans)
	overall, per := stats.Overall, stats.Environments
	a := per["a"]
	if a.Episodes != 3 || a.Scored != 2 || a.Successes != 1 || a.SuccessRate != 0.5 || a.MeanReward != 0.75 ||
		a.TestPassRate != 0.75 || a.MeanDuration != 11 || a.ActionErrorRate != 0.1 || a.PolicyErrors != 1 || a.Masked != 1 {
		t.Errorf("a = %+v", a)
	}
	if b := per["b"]; b.Scored != 0 || b.SuccessRate != 0 || b.MeanReward != 0 || b.Masked != 1 || b.TestsTotal != 0 || b.ErrorClasses[gym.ClassSandbox] != 1 {
		t.Errorf("b = %+v", b)
	}
	if c, ok := per["c"]; !ok || c.Episodes != 0 {
		t.Errorf("c = %+v, %v", c, ok)
	}
	// A tampered episode is scored (0), not masked, and counted.
	tampered := rec("c", 0, false, false, gym.ClassAgent, 0, 0, 3, 0, 2)
	tampered.EpisodeResult.Tampered = true
	if c := rollout.Compute([]rollout.Record{tampered}, plans[2:]).Overall; c.Tampered != 1 || c.Scored != 1 || c.Masked != 0 || c.MeanReward != 0 {
		t.Errorf("tampered episode: %+v", c)
	}
	if overall.Episodes != 4 || overall.Scored != 2 || overall.Masked != 2 || overall.PolicyErrors != 1 ||
		overall.ActionErrorRate != 0.25 || overall.TerminationReasons[gym.ReasonCompleted] != 4 {
		t.Errorf("overall = %+v", overall)
	}
}

// hookPlugin is an external plugin in Python: it logs every event's hook
// to hooks.log, refuses commands containing "forbidden", and answers data.
const hookPlugin = `import json, sys
ev = json.load(sys.stdin)
with open("hooks.log", "a") as f:
    f.write(json.dumps({"hook": ev["hook"], "env": ev.get("env", ""), "tool": (ev.get("tool_call") or {}).get("function", {}).get("name", "")}) + "\n")
h = ev["hook"]
out = {}
if h == "pre_action" and "forbidden" in ev["tool_call"]["function"]["arguments"]:
    out = {"block": True, "reason": "forbidden things are not allowed here"}
elif h == "post_test":
    out = {"data": {"reward_seen": ev["evaluation"]["reward"]}}
elif h == "post_episode":
    out = {"data": {"steps_seen": len(ev["trajectory"]["steps"])}}
elif h == "pre_rollout":
    out = {"data": {"planned": ev["plan"]["environments"][0]["episodes"]}}
json.dump(out, sys.stdout)
`

func TestExternalPluginSeesEveryHook(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hooks.py"), []byte(hookPlugin), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := mustRun(t, runSpec{
		dir:  dir,
		envs: []gym.Env{memEnv("mem")},
		policy: turnsPolicy(
			[]gym.ToolCall{execute("f", "echo forbidden"), write("w", "out.txt", "hello")},
			[]gym.ToolCall{done("d")},
		),
		plugins: []config.Plugin{{Name: "ext", Enabled: true, Timeout: 10 * time.Second,
			Command: []string{python3(t), "hooks.py"}}},
	})
	f, err := os.Open(filepath.Join(dir, "hooks.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct{ Hook, Env, Tool string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.TrimSpace(l.Hook+" "+l.Env+" "+l.Tool))
	}
	want := []string{
		"pre_rollout",
		"pre_episode mem",
		"pre_action mem execute_command",
		"pre_action mem write_file",
		"post_action mem execute_command",
		"post_action mem write_file",
		"pre_action mem mark_done",
		"pre_test mem",
		"post_action mem mark_done",
		"post_test mem",
		"post_episode mem",
		"post_rollout",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hooks (-want +got):\n%s", diff)
	}
	tr := trajectory(t, sum, "mem", 0)
	if tools := toolMessages(tr.Messages); !strings.Contains(tools[0].Content, "Blocked by ext: forbidden things are not allowed here") {
		t.Errorf("blocked tool message = %q", tools[0].Content)
	}
	wantData := map[string]any{"reward_seen": 1.0, "steps_seen": 3.0}
	if diff := cmp.Diff(wantData, tr.Plugins["ext"]); diff != "" {
		t.Errorf("trajectory plugin data (-want +got):\n%s", diff)
	}
	if p := sum.Stats.Plugins["ext"]; p.Calls != len(want) || p.Failures != 0 || p.Blocks != 1 || p.Data["planned"] != 1.0 {
		t.Errorf("plugin stats = %+v", p)
	}
}

func TestFailingExternalPluginDoesNotStopTheRun(t *testing.T) {
	tests := []struct{ name, script, wantErr string }{
		{"exit_status", "import sys; sys.stderr.write('boom'); sys.exit(3)", "boom"},
		{"bad_answer", "print('{\"blok\": true}')", "unknown field"},
		{"timeout", "import time; time.sleep(30)", "no answer within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.py"), []byte(tt.script), 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			sum := mustRun(t, runSpec{
				dir:    dir,
				envs:   []gym.Env{memEnv("mem")},
				policy: turnsPolicy([]gym.ToolCall{write("w", "out.txt", "hello")}, []gym.ToolCall{done("d")}),
				plugins: []config.Plugin{{Name: "bad", Enabled: true, Timeout: 300 * time.Millisecond,
					Command: []string{python3(t), "p.py"}, Hooks: []string{"pre_action", "post_episode"}}},
			})
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("run took %s", took)
			}
			tr := trajectory(t, sum, "mem", 0)
			if !tr.EpisodeResult.Success {
				t.Errorf("episode failed: %+v", tr.EpisodeResult)
			}
			p := sum.Stats.Plugins["bad"]
			if p.Calls != 3 || p.Failures != 3 || !strings.Contains(p.LastError, tt.wantErr) {
				t.Errorf("plugin stats = %+v, want 3 failures mentioning %q", p, tt.wantErr)
			}
			data, _ := tr.Plugins["bad"].(map[string]any)
			if errs, _ := data["errors"].([]any); len(errs) != 3 {
				t.Errorf("trajectory plugin errors = %v", tr.Plugins)
			}
		})
	}
}
