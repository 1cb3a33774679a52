package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/rollout"
)

// seedAnalyzer and seedControl are Real Work plugin modules as its users
// write them: base classes from src.plugins.base, async methods, state in
// self. Together they use every plugin power.
const seedAnalyzer = `from typing import Any, Dict, List

from src.plugins.base import EpisodeEvaluatorPlugin, PluginHookType, TrajectoryAnalyzerPlugin
from src.core.trajectory import Trajectory


class CustomAnalyzerPlugin(TrajectoryAnalyzerPlugin):
    @property
    def name(self) -> str:
        return "custom_analyzer"

    @property
    def version(self) -> str:
        return "1.0.0"

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        return [PluginHookType.POST_EPISODE]

    async def analyze_trajectory(self, trajectory: Trajectory) -> Dict[str, Any]:
        return {"steps": len(trajectory.steps), "final_score_seen": trajectory.episode_result.final_score}

    async def suggest_improvements(self, trajectory: Trajectory) -> List[str]:
        return ["Custom suggestion based on analysis"]


class HalvingEvaluator(EpisodeEvaluatorPlugin):
    @property
    def name(self) -> str:
        return "halving_evaluator"

    @property
    def version(self) -> str:
        return "1.0.0"

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        return [PluginHookType.POST_TEST]

    async def execute(self, hook, context):
        return context

    async def evaluate_episode(self, episode_result, trajectory) -> Dict[str, Any]:
        passed = sum(1 for t in episode_result.test_results if t.success)
        return {"final_score": episode_result.final_score / 2, "commands_passed": passed}
`

const seedControl = `from typing import Any, Dict, List

from src.plugins.base import (ActionFilterPlugin, EnvironmentModifierPlugin, PluginHookType,
                              RolloutManagerPlugin)

MARK = "\n(Seed plugin: keep it short.)"


class ShortPromptModifier(EnvironmentModifierPlugin):
    @property
    def name(self) -> str:
        return "short_prompt"

    @property
    def version(self) -> str:
        return "1.0.0"

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        return [PluginHookType.PRE_EPISODE]

    async def execute(self, hook, context):
        return context

    async def modify_environment(self, env_config, context):
        env_config.prompt += MARK
        env_config.environment_variables["SEED_MARK"] = "1"
        env_config.timeout_config.global_timeout = 600
        return env_config


class OneMoreRollout(RolloutManagerPlugin):
    def __init__(self, config=None):
        super().__init__(config)
        self.added = 0

    @property
    def name(self) -> str:
        return "one_more"

    @property
    def version(self) -> str:
        return "1.0.0"

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        return [PluginHookType.POST_EPISODE]

    async def execute(self, hook, context):
        return context

    async def should_continue_rollout(self, context) -> bool:
        return True

    async def modify_rollout_strategy(self, context) -> Dict[str, Any]:
        if context.get("trajectory") is None:
            return {"max_parallel_rollouts": 1}
        if self.added < self.config.get("extra", 0):
            self.added += 1
            return {"more_episodes": 1}
        return {}


class KeepAll(ActionFilterPlugin):
    @property
    def name(self) -> str:
        return "keep_all"

    @property
    def version(self) -> str:
        return "1.0.0"

    @property
    def supported_hooks(self) -> List[PluginHookType]:
        return [PluginHookType.PRE_ACTION]

    async def execute(self, hook, context):
        return context

    async def filter_actions(self, actions, context):
        return actions
`

// seedPluginConfig writes the calculator example's config into a new
// directory (its paths made absolute) with the given plugins entries and
// plugin modules, and returns the config's path.
func seedPluginConfig(t *testing.T, plugins []any, modules map[string]string) string {
	t.Helper()
	src, err := filepath.Abs(calculatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	base := filepath.Dir(src)
	env := cfg["environments"].([]any)[0].(map[string]any)
	abs := func(copies []any) {
		for _, c := range copies {
			m := c.(map[string]any)
			m["src"] = filepath.Join(base, m["src"].(string))
		}
	}
	abs(env["copy_folders"].([]any))
	abs(env["hidden_tests"].([]any))
	abs(env["reference_solution"].(map[string]any)["files"].([]any))
	cfg["plugins"] = plugins
	dir := t.TempDir()
	for name, code := range modules {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := json.MarshalIndent(cfg, "", "  ")
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRolloutSeedPluginModules runs `gymserver rollout` with the oracle on
// real Docker and two Real Work plugin modules named by module path, and
// checks each power in the output files: the evaluator's score (the tests'
// own beside it) and the statistics on it, the environment modifier's
// prompt, variable and time limit, the rollout manager's extra episode,
// the analyzer's analysis and suggestions.
func TestRolloutSeedPluginModules(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	for _, v := range apiKeyVars {
		t.Setenv(v, "")
	}
	cfgPath := seedPluginConfig(t, []any{
		"my_custom_plugins.analyzer",
		map[string]any{"name": "my_custom_plugins.control", "config": map[string]any{"extra": 1}},
	}, map[string]string{
		"my_custom_plugins/__init__.py": "",
		"my_custom_plugins/analyzer.py": seedAnalyzer,
		"my_custom_plugins/control.py":  seedControl,
	})
	out := filepath.Join(t.TempDir(), "results.json")
	code, _, stderr := runCmd(t, dockerLoader(t), cfgPath, "--policy", "oracle", "--output", out, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}

	var stats rollout.Stats
	readFile(t, rollout.StatsPath(out), &stats)
	if o := stats.Overall; o.Episodes != 2 || o.MeanReward != 0.5 || o.SuccessRate != 1 {
		t.Errorf("overall stats = %+v, want 2 episodes (1 planned + 1 scheduled), mean reward 0.5", o)
	}
	if p := stats.Plugins["my_custom_plugins.analyzer"]; p.Failures != 0 || p.Scores != 2 {
		t.Errorf("analyzer module stats = %+v", p)
	}
	if p := stats.Plugins["my_custom_plugins.control"]; p.Failures != 0 || p.Calls == 0 {
		t.Errorf("control module stats = %+v", p)
	}
	var recs []rollout.Record
	readFile(t, out, &recs)
	if len(recs) != 2 {
		t.Fatalf("%d results, want 2", len(recs))
	}
	for i, r := range recs {
		if r.EpisodeResult.FinalScore != 0.5 {
			t.Errorf("result %d: final_score %v", i, r.EpisodeResult.FinalScore)
		}
		var tr gym.Trajectory
		readFile(t, filepath.Join(filepath.Dir(out), r.TrajectoryFile), &tr)
		er := tr.EpisodeResult
		if er.FinalScore != 0.5 || er.TestScore == nil || *er.TestScore != 1 || er.ScoreAdjustedBy != "my_custom_plugins.analyzer" || !er.Success {
			t.Errorf("trajectory %d: result %+v", i, er)
		}
		c := tr.EpisodeChanges
		if c == nil || !cmp.Equal(c.By, []string{"my_custom_plugins.control"}) || !strings.HasSuffix(c.Prompt, "(Seed plugin: keep it short.)") ||
			!cmp.Equal(c.EnvironmentVariables, map[string]string{"SEED_MARK": "1"}) || c.GlobalTimeout != gym.Duration(600*time.Second) {
			t.Errorf("trajectory %d: episode changes %+v", i, c)
		}
		analyzer, _ := tr.Plugins["my_custom_plugins.analyzer"].(map[string]any)
		custom, _ := analyzer["custom_analyzer"].(map[string]any)
		if custom["final_score_seen"] != 0.5 || custom["steps"] != float64(len(tr.Steps)) ||
			!cmp.Equal(analyzer["suggestions"], []any{"Custom suggestion based on analysis"}) {
			t.Errorf("trajectory %d: analyzer data %v", i, analyzer)
		}
		if ev, _ := analyzer["halving_evaluator"].(map[string]any); ev["final_score"] != 0.5 || ev["commands_passed"] != 1.0 {
			t.Errorf("trajectory %d: evaluator data %v", i, analyzer["halving_evaluator"])
		}
	}
}

// TestRolloutDryRunChecksPluginModules: a module that does not import, or
// holds no plugin class, fails `rollout --dry-run` with its reason.
func TestRolloutDryRunChecksPluginModules(t *testing.T) {
	noDockerNoKeys(t)
	cfgPath := seedPluginConfig(t, []any{"my_custom_plugins.broken", "my_custom_plugins.helpers", "my_custom_plugins.analyzer"},
		map[string]string{
			"my_custom_plugins/__init__.py": "",
			"my_custom_plugins/broken.py":   "import flask_that_is_missing\n",
			"my_custom_plugins/helpers.py":  "def helper():\n    return 1\n",
			"my_custom_plugins/analyzer.py": seedAnalyzer,
		})
	code, stdout, stderr := runCmd(t, noLoader(t), cfgPath, "--dry-run", "--policy", "oracle")
	if code != 1 {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"plugins[0] (my_custom_plugins.broken): python module my_custom_plugins.broken: module my_custom_plugins.broken does not import: ModuleNotFoundError: No module named 'flask_that_is_missing'",
		"plugins[1] (my_custom_plugins.helpers): python module my_custom_plugins.helpers: module my_custom_plugins.helpers has no plugin class",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "plugins[2]") {
		t.Errorf("the good module was reported:\n%s", stderr)
	}

	cfgPath = seedPluginConfig(t, []any{"my_custom_plugins.analyzer"}, map[string]string{
		"my_custom_plugins/__init__.py": "", "my_custom_plugins/analyzer.py": seedAnalyzer})
	code, stdout, stderr = runCmd(t, noLoader(t), cfgPath, "--dry-run", "--policy", "oracle")
	if code != 0 || !strings.Contains(stdout, "my_custom_plugins.analyzer") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
