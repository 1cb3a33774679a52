package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/policy/openaitest"
	"github.com/gymserver/gymserver/policy/rollout"
)

// memLoader serves the config's environments from in-memory fakes whose
// one task expects out.txt to hold "hello".
func memLoader(t *testing.T) registryLoader {
	return func(_ context.Context, cfg *config.Config, _ *slog.Logger, _ loadOptions) (*gym.Registry, func(context.Context) error, error) {
		var list []gym.Env
		for _, e := range cfg.Environments {
			list = append(list, gymtest.NewEnv(e.ID, gymtest.Task{ID: e.ID, Prompt: "Write hello to out.txt.", Expect: map[string]string{"out.txt": "hello"}}))
		}
		reg, err := gym.NewRegistry(list...)
		return reg, func(context.Context) error { return nil }, err
	}
}

// seedUser runs testdata/seed_user.py, a seed user's script, over a run's
// outputs and returns what it printed.
func seedUser(t *testing.T, results string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "/usr/bin/python3", "testdata/seed_user.py", results, rollout.StatsPath(results),
		filepath.Join(filepath.Dir(results), "trajectories"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seed_user.py: %v\n%s", err, out)
	}
	return string(out)
}

// seedLLMConfig is a seed config whose llm_config uses the seed's caching
// and usage keys, greedy, against base.
func seedLLMConfig(t *testing.T, base string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seed.json")
	cfg := `{
		"environments": [{"id": "e", "docker_image": "unused", "prompt": "p", "unit_tests": ["true"]}],
		"llm_config": {"model": "test-model", "base_url": "` + base + `", "api_key": "k", "temperature": 0,
			"enable_caching": true, "cache_size": 10, "track_token_usage": true, "warn_high_usage": true,
			"max_cost_per_episode": 5},
		"rollout_config": {"max_parallel_rollouts": 1},
		"episode_control_config": {"max_episodes": 3}
	}`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeThenDone answers an episode's first request by writing the answer and
// any later one with mark_done.
func writeThenDone(_ int, req openaitest.ChatRequest) openaitest.Reply {
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			return openaitest.Calls(openaitest.Call("d", "mark_done", `{"message": "done"}`))
		}
	}
	return openaitest.Calls(openaitest.Call("w", "write_file", `{"filepath": "out.txt", "content": "hello"}`))
}

// TestRolloutSeedLLMConfig runs a seed user's llm_config and flags: the
// response cache at temperature 0, the per-episode budget, the seed-format
// results read by a seed user's script.
func TestRolloutSeedLLMConfig(t *testing.T) {
	noDockerNoKeys(t)
	srv := openaitest.New(t, writeThenDone)
	cfg := seedLLMConfig(t, srv.URL)
	out := filepath.Join(t.TempDir(), "results.json")
	code, stdout, stderr := runCmd(t, memLoader(t), cfg, "--output", out, "--quiet", "--results-format", "seed", "--log-level", "WARNING")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout is not empty: %q", stdout)
	}
	// Three identical greedy episodes: the first one's two calls answer
	// the other two episodes from the cache.
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d API calls for 3 identical greedy episodes, want 2", n)
	}
	report := seedUser(t, out)
	// The in-memory environment runs its one test command (gymtest).
	for _, want := range []string{
		"env=e success=True score=1 reason=completed actions=2 steps=2 tests=1 tests_passed=1 input_tokens=",
		"api_calls=2 cache_hits=0",
		"api_calls=0 cache_hits=2",
		"stats total_episodes=3 successful_episodes=3 failed_episodes=0 success_rate=1 total_duration_positive=True e:episodes=3,successful=3,failed=0,avg_score=1",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the seed user's script did not print %q:\n%s", want, report)
		}
	}
	if n := strings.Count(report, "cache_hits=2"); n != 2 {
		t.Errorf("%d episodes answered from the cache, want 2:\n%s", n, report)
	}
	m := regexp.MustCompile(`timestamps checked: (\d+)`).FindStringSubmatch(report)
	// Per episode: start and end in results and trajectory, two steps
	// each in both; the stats' run start and end.
	if n, _ := strconv.Atoi(m[1]); m == nil || n < 3*(4+4)+2 {
		t.Errorf("too few timestamps checked:\n%s", report)
	}
	var stats rollout.Stats
	readFile(t, rollout.StatsPath(out), &stats)
	if u := stats.TokenUsage; u == nil || u.APICalls != 2 || u.CacheHits != 4 || u.TotalCost <= 0 {
		t.Errorf("stats token_usage = %+v", u)
	}

	// The flags override llm_config: no cache, and a budget the first
	// answer spends, after which the tests still run.
	before := len(srv.Requests())
	code, _, stderr = runCmd(t, memLoader(t), cfg, "--output", out, "--quiet", "--llm-disable-caching", "--llm-max-tokens-per-episode", "1")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if n := len(srv.Requests()) - before; n != 3 {
		t.Errorf("%d API calls for 3 episodes of one call each without the cache, want 3", n)
	}
	var recs []rollout.Record
	readFile(t, out, &recs)
	for _, r := range recs {
		if er := r.EpisodeResult; er.TerminatedReason != gym.ReasonBudget || !er.Success || r.Usage.Calls != 1 {
			t.Errorf("episode %d: %+v, usage %+v; want ended by the budget after one call, tests passed", r.Episode, er, r.Usage)
		}
	}
}

// TestRolloutSeedFlags checks that every flag of the seed's main.py is
// accepted, and that bad values are usage errors.
func TestRolloutSeedFlags(t *testing.T) {
	noDockerNoKeys(t)
	seedArgs := []string{calculatorConfig, "--dry-run",
		"--llm-model", "anthropic/claude-sonnet-4", "--llm-api-key", "k", "--llm-base-url", "https://openrouter.ai/api/v1",
		"--llm-temperature", "0", "--llm-max-tokens", "4096", "--llm-timeout", "60",
		"--llm-enable-caching", "--llm-cache-size", "100", "--llm-max-context-messages", "50", "--llm-max-output-length", "2000",
		"--llm-disable-token-tracking", "--llm-disable-high-usage-warnings", "--llm-max-cost-per-episode", "1.0",
		"--output", filepath.Join(t.TempDir(), "r.json"), "--quiet", "--log-level", "WARNING"}
	code, stdout, stderr := runCmd(t, noLoader(t), seedArgs...)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"llm usage: response cache of 100 answers; no high-usage warnings; per-episode budget $1",
		"warning: --llm-disable-token-tracking: the seed stopped counting tokens",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, stdout)
		}
	}
	// --llm-disable-caching wins; at temperature 0.7 the cache is off, with
	// a warning that says why.
	_, stdout, _ = runCmd(t, noLoader(t), calculatorConfig, "--dry-run", "--llm-enable-caching")
	if !strings.Contains(stdout, "response cache off at temperature 0.7") || !strings.Contains(stdout, "warning: response caching is off at temperature 0.7: the seed replayed") {
		t.Errorf("caching at 0.7: plan:\n%s", stdout)
	}
	_, stdout, _ = runCmd(t, noLoader(t), calculatorConfig, "--dry-run", "--llm-temperature", "0", "--llm-enable-caching", "--llm-disable-caching")
	if !strings.Contains(stdout, "no response cache") {
		t.Errorf("--llm-disable-caching: plan:\n%s", stdout)
	}
	// A cache size alone does not turn the cache on, and says so.
	_, stdout, _ = runCmd(t, noLoader(t), calculatorConfig, "--dry-run", "--llm-temperature", "0", "--llm-cache-size", "5")
	if !strings.Contains(stdout, "no response cache") || !strings.Contains(stdout, "warning: cache_size is set but there is no response cache") {
		t.Errorf("--llm-cache-size alone: plan:\n%s", stdout)
	}
	// An unknown model's cost is GPT-4's, with a warning.
	_, stdout, _ = runCmd(t, noLoader(t), calculatorConfig, "--dry-run", "--llm-model", "local/qwen", "--llm-max-cost-per-episode", "2")
	if !strings.Contains(stdout, "model local/qwen is not in the seed's price table") {
		t.Errorf("unknown model's price: plan:\n%s", stdout)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--llm-cache-size", "0"}, "--llm-cache-size must be at least 1"},
		{[]string{"--llm-max-cost-per-episode", "-1"}, "--llm-max-cost-per-episode must be positive"},
		{[]string{"--llm-max-tokens-per-episode", "0"}, "--llm-max-tokens-per-episode must be at least 1"},
		{[]string{"--results-format", "csv"}, `--results-format "csv"`},
		{[]string{"--log-level", "LOUD"}, `log level "LOUD"`},
	} {
		code, _, stderr := runCmd(t, noLoader(t), append([]string{calculatorConfig, "--dry-run"}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr:\n%s", tt.args, code, stderr)
		}
	}
}
