package plugin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/plugin"
)

// TestAdapterCopyMatchesPythonPackage: the adapter the binary carries is
// the one the Python package ships (run `go generate ./policy/plugin/`).
func TestAdapterCopyMatchesPythonPackage(t *testing.T) {
	shipped, err := os.ReadFile(filepath.Join("..", "..", "clients", "python", "gymserver", "seedplugins.py"))
	if err != nil {
		t.Fatal(err)
	}
	carried, err := os.ReadFile("seedplugins.py")
	if err != nil {
		t.Fatal(err)
	}
	if string(shipped) != string(carried) {
		t.Error("policy/plugin/seedplugins.py differs from clients/python/gymserver/seedplugins.py: run go generate ./policy/plugin/")
	}
}

// writeModules writes Python files (path → source) under a new directory
// and returns it.
func writeModules(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// seedKinds is a plugin module with one class of each seed kind, written
// the seed's way (imports from src.plugins.base).
const seedKinds = `
from typing import Any, Dict, List

from src.plugins.base import (
    ActionFilterPlugin, BasePlugin, EnvironmentModifierPlugin, EpisodeEvaluatorPlugin,
    PluginHookType, RolloutManagerPlugin, TrajectoryAnalyzerPlugin,
)
from src.core.config import ActionType


class Analyzer(TrajectoryAnalyzerPlugin):
    @property
    def name(self) -> str:
        return "custom_analyzer"

    @property
    def version(self) -> str:
        return "1.0.0"

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        return [PluginHookType.POST_EPISODE]

    async def analyze_trajectory(self, trajectory) -> Dict[str, Any]:
        return {"steps": len(trajectory.steps), "first": trajectory.steps[0].action.type == ActionType.COMMAND,
                "threshold": self.config.get("threshold")}

    async def suggest_improvements(self, trajectory) -> List[str]:
        return ["use fewer steps"]


class Evaluator(EpisodeEvaluatorPlugin):
    name = "halver"

    async def evaluate_episode(self, episode_result, trajectory) -> Dict[str, Any]:
        return {"final_score": episode_result.final_score / 2, "tests": len(episode_result.test_results)}


class Modifier(EnvironmentModifierPlugin):
    name = "modifier"

    async def modify_environment(self, env_config, context):
        env_config.prompt = env_config.prompt + " (be brief)"
        env_config.environment_variables["MODE"] = "fast"
        env_config.timeout_config.command_timeout = 5
        env_config.max_actions = 3
        return env_config


class Manager(RolloutManagerPlugin):
    name = "manager"

    def __init__(self, config=None):
        super().__init__(config)
        self.episodes = 0

    async def should_continue_rollout(self, context) -> bool:
        self.episodes += 1
        return self.episodes <= 2

    async def modify_rollout_strategy(self, context) -> Dict[str, Any]:
        if context.get("trajectory") is None:
            return {"max_parallel_rollouts": 3}
        return {"more_episodes": 2, "timeout_multiplier": 1.5}


class Filter(ActionFilterPlugin):
    name = "filter"

    async def filter_actions(self, actions, context):
        out = []
        for a in actions:
            if "rm -rf" in a.content:
                continue
            if a.content == "ls":
                a.content = "ls -la"
            out.append(a)
        return out


class Counter(BasePlugin):
    name = "counter"

    def __init__(self, config=None):
        super().__init__(config)
        self.calls = 0

    @property
    def supported_hooks(self):
        return [PluginHookType.POST_ACTION]

    async def execute(self, hook, context):
        self.calls += 1
        context.set("calls", self.calls)
        context.set("output", context.get("result").output)
        return context
`

func TestModuleRunsEverySeedKind(t *testing.T) {
	dir := writeModules(t, map[string]string{"my_plugins/__init__.py": "", "my_plugins/kinds.py": seedKinds})
	set, err := plugin.Load([]config.Plugin{{Name: "my_plugins.kinds", Enabled: true, Timeout: 20 * time.Second,
		Config: json.RawMessage(`{"threshold": 0.5}`)}}, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	const name = "my_plugins.kinds"
	want := []plugin.Hook{plugin.PreRollout, plugin.PreEpisode, plugin.PreAction, plugin.PostAction, plugin.PostTest, plugin.PostEpisode}
	if diff := cmp.Diff(want, set.HooksOf(name)); diff != "" {
		t.Errorf("hooks (-want +got):\n%s", diff)
	}
	ctx := t.Context()

	out := set.Fire(ctx, plugin.Event{Hook: plugin.PreRollout, Plan: &plugin.Plan{Parallel: 1}})
	if out.Parallel != 3 || out.ParallelBy != name || out.MoreEpisodes != 0 {
		t.Errorf("pre_rollout: %+v", out)
	}

	settings := plugin.EpisodeSettings{Prompt: "Do it.", EnvironmentVariables: map[string]string{"A": "1"}, MaxActions: 10, GlobalTimeout: 60, CommandTimeout: 30}
	out = set.Fire(ctx, plugin.Event{Hook: plugin.PreEpisode, Env: "e", Environment: &settings})
	prompt, five, three := "Do it. (be brief)", 5.0, 3
	wantChange := &plugin.EpisodeChange{Prompt: &prompt, EnvironmentVariables: map[string]string{"MODE": "fast"}, CommandTimeout: &five, MaxActions: &three}
	if diff := cmp.Diff(wantChange, out.Episode); diff != "" || out.Stop || len(out.Failures) > 0 {
		t.Errorf("pre_episode: change (-want +got):\n%s\noutcome %+v", diff, out)
	}

	rm := gym.NewToolCall("c1", gym.ToolExecuteCommand, `{"command": "rm -rf build"}`)
	if out := set.Fire(ctx, plugin.Event{Hook: plugin.PreAction, ToolCall: &rm}); !out.Blocked || !strings.Contains(out.Reason, "filter") {
		t.Errorf("pre_action rm: %+v", out)
	}
	ls := gym.NewToolCall("c2", gym.ToolExecuteCommand, `{"command": "ls"}`)
	out = set.Fire(ctx, plugin.Event{Hook: plugin.PreAction, ToolCall: &ls})
	if out.Blocked || out.ToolCall == nil || out.ToolCall.ID != "c2" || out.ToolCall.Function.Arguments != `{"command": "ls -la"}` {
		t.Errorf("pre_action ls: %+v (call %+v)", out, out.ToolCall)
	}

	// The counter keeps its count across calls, each its own process.
	for i := 1; i <= 2; i++ {
		out = set.Fire(ctx, plugin.Event{Hook: plugin.PostAction, ToolCall: &ls, Result: &plugin.ActionResult{Output: "x"}})
		if got := out.Data[name]["counter"]; !cmp.Equal(got, map[string]any{"calls": float64(i), "output": "x"}) {
			t.Errorf("post_action %d: data %v (failures %v)", i, got, out.Failures)
		}
	}

	eval := gym.Evaluation{Reward: 0.8, Success: false, Commands: []gym.TestCommand{{Command: "pytest"}}}
	score := 0.8
	out = set.Fire(ctx, plugin.Event{Hook: plugin.PostTest, Env: "e", Evaluation: &eval, Score: &score})
	if out.Score == nil || *out.Score != 0.4 || !cmp.Equal(out.ScoredBy, []string{name}) {
		t.Errorf("post_test: %+v", out)
	}
	if got := out.Data[name]["halver"]; !cmp.Equal(got, map[string]any{"final_score": 0.4, "tests": 1.0}) {
		t.Errorf("post_test data: %v", got)
	}

	traj := gym.Trajectory{EnvironmentID: "e", Steps: []gym.TrajectoryStep{{Action: gym.TrajectoryAction{Type: "command", Content: "ls"}}},
		EpisodeResult: gym.EpisodeResult{FinalScore: 0.4}}
	out = set.Fire(ctx, plugin.Event{Hook: plugin.PostEpisode, Env: "e", Trajectory: &traj})
	if got := out.Data[name]["custom_analyzer"]; !cmp.Equal(got, map[string]any{"steps": 1.0, "first": true, "threshold": 0.5,
		"suggestions": []any{"use fewer steps"}}) {
		t.Errorf("post_episode analyzer data: %v", got)
	}
	if got := out.Data[name]["suggestions"]; !cmp.Equal(got, []string{"use fewer steps"}) {
		t.Errorf("post_episode suggestions: %v", got)
	}
	if got := out.Data[name]["manager"]; !cmp.Equal(got, map[string]any{"strategy": map[string]any{"timeout_multiplier": 1.5}}) {
		t.Errorf("post_episode manager data: %v", got)
	}
	if out.MoreEpisodes != 2 || !cmp.Equal(out.ScheduledBy, []string{name}) {
		t.Errorf("post_episode: %+v", out)
	}

	// should_continue_rollout counted one episode above; the third stops.
	if out := set.Fire(ctx, plugin.Event{Hook: plugin.PreEpisode, Env: "e", Environment: &settings}); out.Stop {
		t.Errorf("second pre_episode stopped: %+v", out)
	}
	if out := set.Fire(ctx, plugin.Event{Hook: plugin.PreEpisode, Env: "e", Environment: &settings}); !out.Stop || out.StoppedBy != name {
		t.Errorf("third pre_episode did not stop: %+v", out)
	}
	if st := set.Stats()[name]; st.Failures != 0 || st.Scores != 1 || st.Blocks != 1 || st.Stops != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestModuleLoadErrors(t *testing.T) {
	dir := writeModules(t, map[string]string{
		"pkg/__init__.py": "",
		"pkg/broken.py":   "def oops(:\n",
		"pkg/raises.py":   "import json\nraise RuntimeError('no database')\n",
		"pkg/empty.py":    "class Helper:\n    pass\n",
		"pkg/abstract.py": "from src.plugins.base import TrajectoryAnalyzerPlugin\n\nclass Half(TrajectoryAnalyzerPlugin):\n    pass\n",
		"pkg/needs.py":    "import not_installed_anywhere\n",
	})
	tests := []struct {
		module string
		want   string
		class  gym.ErrorClass
	}{
		{"pkg.missing", "python module pkg.missing: module pkg.missing not found (searched the config's directory and PYTHONPATH", gym.ClassNotFound},
		{"nopkg.mod", "module nopkg.mod not found", gym.ClassNotFound},
		{"pkg.broken", "module pkg.broken does not import: SyntaxError", gym.ClassInvalidArgument},
		{"pkg.raises", "module pkg.raises does not import: RuntimeError: no database", gym.ClassInvalidArgument},
		{"pkg.needs", "module pkg.needs does not import: ModuleNotFoundError: No module named 'not_installed_anywhere'", gym.ClassInvalidArgument},
		{"pkg.empty", "module pkg.empty has no plugin class", gym.ClassInvalidArgument},
		{"pkg.abstract", "these classes are abstract (a required method is missing): Half", gym.ClassInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.module, func(t *testing.T) {
			_, err := plugin.Load([]config.Plugin{{Name: tt.module, Enabled: true, Timeout: 20 * time.Second}}, dir, nil)
			if err == nil || !strings.Contains(err.Error(), "plugins[0] ("+tt.module+"): ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v lacks %q", err, tt.want)
			}
			if c := gym.ClassOf(err); c != tt.class {
				t.Errorf("class %s, want %s", c, tt.class)
			}
		})
	}

	t.Run("disabled_is_not_imported", func(t *testing.T) {
		set, err := plugin.Load([]config.Plugin{{Name: "pkg.broken", Enabled: false, Timeout: time.Second}}, dir, nil)
		if err != nil || !cmp.Equal(set.Disabled(), []string{"pkg.broken"}) {
			t.Errorf("Load = %v, disabled %v", err, set.Disabled())
		}
	})
	t.Run("no_python", func(t *testing.T) {
		t.Setenv(plugin.PythonEnv, "/nonexistent/python3")
		_, err := plugin.Load([]config.Plugin{{Name: "pkg.empty", Enabled: true, Timeout: time.Second}}, dir, nil)
		if err == nil || !strings.Contains(err.Error(), "no Python to run it (set GYMSERVER_PYTHON") || gym.ClassOf(err) != gym.ClassNotFound {
			t.Errorf("error %v", err)
		}
	})
	t.Run("hooks_narrow", func(t *testing.T) {
		dir := writeModules(t, map[string]string{"my_plugins/__init__.py": "", "my_plugins/kinds.py": seedKinds})
		_, err := plugin.Load([]config.Plugin{{Name: "my_plugins.kinds", Enabled: true, Timeout: 20 * time.Second, Hooks: []string{"pre_test"}}}, dir, nil)
		if err == nil || !strings.Contains(err.Error(), "my_plugins.kinds does not handle pre_test") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("unknown_undotted_name", func(t *testing.T) {
		_, err := plugin.Load([]config.Plugin{{Name: "my_plugins", Enabled: true, Timeout: time.Second}}, dir, nil)
		if err == nil || !strings.Contains(err.Error(), "a Python module's dotted path") || gym.ClassOf(err) != gym.ClassInvalidArgument {
			t.Errorf("error %v", err)
		}
	})
}

// TestAnswerFieldsAreCheckedPerHook: the new answer fields are refused at
// hooks where they mean nothing, and bad values are failures.
func TestAnswerFieldsAreCheckedPerHook(t *testing.T) {
	tests := []struct {
		name   string
		hook   plugin.Hook
		answer string
		want   string
	}{
		{"score_outside_post_test", plugin.PostEpisode, `{"score": 0.5}`, "answered score to post_episode; only post_test may"},
		{"score_not_finite", plugin.PostTest, `{"score": 1e999}`, "answer is not a response object"},
		{"episode_outside_pre_episode", plugin.PostTest, `{"episode": {"prompt": "x"}}`, "answered episode to post_test"},
		{"episode_bad_limits", plugin.PreEpisode, `{"episode": {"max_actions": 0, "global_timeout": -1}}`, "episode.max_actions 0 must be at least 1"},
		{"episode_bad_variable", plugin.PreEpisode, `{"episode": {"environment_variables": {"A=B": "1"}}}`, `bad name "A=B"`},
		{"more_episodes_at_post_test", plugin.PostTest, `{"more_episodes": 1}`, "only pre_rollout, pre_episode and post_episode may"},
		{"more_episodes_negative", plugin.PostEpisode, `{"more_episodes": -1}`, "answered more_episodes -1"},
		{"parallel_negative", plugin.PreRollout, `{"parallel": -2}`, "answered parallel -2; it must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := plugin.Load([]config.Plugin{{Name: "ext", Enabled: true, Timeout: 10 * time.Second,
				Command: []string{"/bin/sh", "-c", "cat >/dev/null; echo '" + tt.answer + "'"}}}, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			out := set.Fire(t.Context(), plugin.Event{Hook: tt.hook})
			if len(out.Failures) != 1 || !strings.Contains(out.Failures[0].Error, tt.want) {
				t.Errorf("failures %+v, want one with %q", out.Failures, tt.want)
			}
			if out.Score != nil || out.Episode != nil || out.MoreEpisodes != 0 || out.Parallel != 0 {
				t.Errorf("a refused answer took effect: %+v", out)
			}
		})
	}
}

// TestOutcomeCombinesAnswers: each post_test plugin sees the score the
// ones before it set; episode changes merge, later fields over earlier;
// more_episodes add up; suggestions land in the plugin's data.
func TestOutcomeCombinesAnswers(t *testing.T) {
	echoScore := `import json, sys; ev = json.load(sys.stdin); print(json.dumps({"score": ev["score"] + 0.25, "data": {"seen": ev["score"]}, "suggestions": ["s2"]}))`
	first := `import json, sys
ev = json.load(sys.stdin)
if ev["hook"] == "post_test":
    print(json.dumps({"score": 0.5}))
else:
    print(json.dumps({"episode": {"prompt": "p1", "max_actions": 4, "environment_variables": {"A": "1", "B": "1"}}, "more_episodes": 1, "parallel": 2}))
`
	set, err := plugin.Load([]config.Plugin{
		{Name: "first", Enabled: true, Timeout: 10 * time.Second, Command: []string{"/usr/bin/python3", "-c", first}, Hooks: []string{"post_test", "pre_episode"}},
		{Name: "second", Enabled: true, Timeout: 10 * time.Second, Command: []string{"/usr/bin/python3", "-c", echoScore}, Hooks: []string{"post_test"}},
		{Name: "third", Enabled: true, Timeout: 10 * time.Second, Command: []string{"/bin/sh", "-c",
			`cat >/dev/null; echo '{"episode": {"max_actions": 2, "environment_variables": {"B": "2"}}, "more_episodes": 2, "parallel": 1}'`}, Hooks: []string{"pre_episode"}},
	}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	score := 1.0
	out := set.Fire(t.Context(), plugin.Event{Hook: plugin.PostTest, Score: &score, Evaluation: &gym.Evaluation{Reward: 1}})
	if len(out.Failures) != 0 {
		t.Fatalf("failures = %+v", out.Failures)
	}
	if out.Score == nil || *out.Score != 0.75 || !cmp.Equal(out.ScoredBy, []string{"first", "second"}) ||
		!cmp.Equal(out.Data["second"], map[string]any{"seen": 0.5, "suggestions": []string{"s2"}}) {
		t.Errorf("post_test: score %v by %v, data %v", out.Score, out.ScoredBy, out.Data)
	}

	out = set.Fire(t.Context(), plugin.Event{Hook: plugin.PreEpisode})
	p1, two := "p1", 2
	want := &plugin.EpisodeChange{Prompt: &p1, MaxActions: &two, EnvironmentVariables: map[string]string{"A": "1", "B": "2"}}
	if diff := cmp.Diff(want, out.Episode); diff != "" || len(out.Failures) != 0 {
		t.Errorf("pre_episode change (-want +got):\n%s\nfailures %+v", diff, out.Failures)
	}
	if out.MoreEpisodes != 3 || !cmp.Equal(out.ScheduledBy, []string{"first", "third"}) || out.Parallel != 1 || out.ParallelBy != "third" ||
		!cmp.Equal(out.EpisodeChangedBy, []string{"first", "third"}) {
		t.Errorf("pre_episode outcome = %+v", out)
	}
}
