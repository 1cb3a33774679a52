package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/policy"
	"github.com/gymserver/gymserver/policy/rollout"
	"github.com/gymserver/gymserver/server"
)

const calculatorConfig = "examples/calculator_api/config.json"

// noDockerNoKeys makes Docker unreachable and removes API keys from the
// environment, as on a machine that only checks configs.
func noDockerNoKeys(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	for _, v := range apiKeyVars {
		t.Setenv(v, "")
	}
}

// runCmd runs `gymserver rollout args` in process with the given loader.
func runCmd(t *testing.T, load registryLoader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = rolloutWith(t.Context(), args, &out, &errb, load)
	return code, out.String(), errb.String()
}

// noLoader fails the test when the command tries to reach Docker.
func noLoader(t *testing.T) registryLoader {
	return func(context.Context, *config.Config, *slog.Logger, loadOptions) (*gym.Registry, func(context.Context) error, error) {
		t.Error("the command tried to load the environments")
		return nil, nil, context.Canceled
	}
}

func TestRolloutDryRunNeedsNoKeyAndNoDocker(t *testing.T) {
	noDockerNoKeys(t)
	out := filepath.Join(t.TempDir(), "out.json")
	// Flags after the config, as with the seed's main.py.
	code, stdout, stderr := runCmd(t, noLoader(t), calculatorConfig, "--dry-run", "--output", out, "--episodes", "3", "--parallel", "2")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"calculator_api: up to 3 episode(s)",
		"model anthropic/claude-sonnet-4 at https://openrouter.ai/api/v1",
		"API key MISSING",
		"3 in total (safety_limit 100), 2 at a time",
		"stats " + strings.TrimSuffix(out, ".json") + ".stats.json",
		"trajectories " + filepath.Join(filepath.Dir(out), "trajectories"),
		"nothing was started",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("dry run wrote %s", out)
	}
}

func TestRolloutFlagsAndErrors(t *testing.T) {
	noDockerNoKeys(t)
	dir := t.TempDir()
	badPlugin := filepath.Join(dir, "plugins.json")
	if err := os.WriteFile(badPlugin, []byte(`{
		"environments": [{"id": "e", "docker_image": "gymserver/python:3.11-bookworm", "prompt": "p", "unit_tests": ["true"]}],
		"plugins": ["safety_filter", "my_custom_plugins.analyzer", {"name": "performance_based_rollout", "config": {"windw": 3}}]
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noRef := filepath.Join(dir, "noref.json")
	if err := os.WriteFile(noRef, []byte(`{
		"environments": [{"id": "e", "docker_image": "gymserver/python:3.11-bookworm", "prompt": "p", "unit_tests": ["true"]}]
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		// want are substrings of stderr.
		want []string
	}{
		{"no key", []string{calculatorConfig, "--output", filepath.Join(dir, "r.json")}, 2,
			[]string{"--llm-api-key", "OPENROUTER_API_KEY", "--policy oracle"}},
		{"unknown plugin fails the dry run", []string{badPlugin, "--dry-run"}, 1,
			[]string{`plugins[1] (my_custom_plugins.analyzer): python module my_custom_plugins.analyzer: module my_custom_plugins.analyzer not found`, `unknown field "windw"`}},
		{"unknown policy", []string{calculatorConfig, "--dry-run", "--policy", "magic"}, 2, []string{`--policy "magic"`}},
		{"oracle needs a reference solution", []string{noRef, "--policy", "oracle", "--dry-run"}, 1, []string{"no reference_solution"}},
		{"bad temperature", []string{calculatorConfig, "--dry-run", "--llm-temperature", "3"}, 2, []string{"temperature 3"}},
		{"bad timeout", []string{calculatorConfig, "--dry-run", "--llm-timeout", "soon"}, 2, []string{"want seconds"}},
		{"missing config", []string{filepath.Join(dir, "none.json"), "--dry-run"}, 1, []string{"no such file"}},
		{"no config", []string{"--dry-run"}, 2, []string{"usage: gymserver rollout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, noLoader(t), tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func TestRolloutAPIKeyPrecedence(t *testing.T) {
	cfg := config.LLM{Model: "m", BaseURL: "http://x/v1", APIKey: "from-config", MaxTokens: 1, Timeout: time.Second}
	tests := []struct {
		name, flag, openrouter, openai, want string
	}{
		{"flag", "from-flag", "or", "oa", "--llm-api-key"},
		{"openrouter", "", "or", "oa", "$OPENROUTER_API_KEY"},
		{"openai", "", "", "oa", "$OPENAI_API_KEY"},
		{"config", "", "", "", "llm_config.api_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OPENROUTER_API_KEY", tt.openrouter)
			t.Setenv("OPENAI_API_KEY", tt.openai)
			_, source := llmConfig(cfg, &rolloutFlags{apiKey: tt.flag, set: map[string]bool{}})
			if source != tt.want {
				t.Errorf("key from %q, want %q", source, tt.want)
			}
		})
	}
}

func TestRolloutBaseURLPrecedence(t *testing.T) {
	tests := []struct {
		name, flag, config, env, want string
	}{
		{"flag", "http://flag/v1", "http://config/v1", "http://env/v1", "http://flag/v1"},
		{"config", "", "http://config/v1", "http://env/v1", "http://config/v1"},
		{"env", "", "", "http://env/v1", "http://env/v1"},
		{"default", "", "", "", policy.DefaultBaseURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OPENAI_BASE_URL", tt.env)
			f := &rolloutFlags{baseURL: tt.flag, set: map[string]bool{"llm-base-url": tt.flag != ""}}
			pc, _ := llmConfig(config.LLM{BaseURL: tt.config}, f)
			if pc.BaseURL != tt.want {
				t.Errorf("base URL %q, want %q", pc.BaseURL, tt.want)
			}
		})
	}
}

// dockerLoader loads the environments on a Docker provider whose sandboxes
// run the test-built static executor, and checks on close that none of its
// containers is left.
func dockerLoader(t *testing.T) registryLoader {
	return func(ctx context.Context, cfg *config.Config, logger *slog.Logger, opts loadOptions) (*gym.Registry, func(context.Context) error, error) {
		p, _ := dockertest.NewWith(t, docker.Options{Logger: logger, WarmPool: opts.WarmPool, OrphanAfter: opts.OrphanAfter})
		reg, err := envs.NewRegistry(ctx, cfg, envs.Options{Provider: p, Logger: logger})
		if err != nil {
			return nil, nil, err
		}
		return reg, p.Close, nil
	}
}

func TestRolloutOracleSolvesCalculator(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	for _, v := range apiKeyVars {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "X.json")
	code, stdout, stderr := runCmd(t, dockerLoader(t), calculatorConfig, "--policy", "oracle", "--output", out, "--episodes", "2",
		"--results-format", "seed")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout is not empty: %q", stdout)
	}
	for _, want := range []string{"results: " + out, "calculator_api", "TOTAL"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	checkOracleOutputs(t, out, 2)
	// A seed user's script reads each episode's steps and its test
	// commands' results from the results file.
	report := seedUser(t, out)
	tests := regexp.MustCompile(`success=True score=1 reason=completed actions=\d+ steps=[1-9]\d* tests=([1-9]\d*) tests_passed=([1-9]\d*)`).FindAllStringSubmatch(report, -1)
	if len(tests) != 2 || tests[0][1] != tests[0][2] {
		t.Errorf("the seed user's script printed:\n%s", report)
	}
}

// checkOracleOutputs checks the outputs of an oracle run of calculator_api.
func checkOracleOutputs(t *testing.T, out string, episodes int) {
	t.Helper()
	var stats rollout.Stats
	readFile(t, rollout.StatsPath(out), &stats)
	if o := stats.Overall; o.Episodes != episodes || o.SuccessRate != 1 || o.MeanReward != 1 || o.TestPassRate != 1 || o.Masked != 0 {
		t.Errorf("overall stats = %+v", o)
	}
	if e := stats.Environments["calculator_api"]; e.Episodes != episodes || e.SuccessRate != 1 {
		t.Errorf("calculator_api stats = %+v", e)
	}
	var recs []rollout.Record
	readFile(t, out, &recs)
	if len(recs) != episodes {
		t.Fatalf("%d results, want %d", len(recs), episodes)
	}
	for i, r := range recs {
		if r.Episode != i || r.TrajectoryFile != filepath.Join("trajectories", rollout.TrajectoryName("calculator_api", "calculator_api", i)) {
			t.Errorf("result %d = %+v", i, r)
		}
		var tr gym.Trajectory
		readFile(t, filepath.Join(filepath.Dir(out), r.TrajectoryFile), &tr)
		er := tr.EpisodeResult
		if !er.Success || er.FinalScore != 1 || er.TerminatedReason != gym.ReasonCompleted || tr.Policy != "oracle" ||
			len(tr.Steps) == 0 || tr.Evaluation == nil || len(tr.Evaluation.Tests) != er.TestsTotal {
			t.Errorf("trajectory %d: result %+v, %d steps", i, er, len(tr.Steps))
		}
	}
}

func readFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestRolloutBinary runs the real, statically built gymserver binary, whose
// Docker sandboxes use the binary itself as executor.
func TestRolloutBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	dir := t.TempDir()
	bin := validateBinary(t)
	out := filepath.Join(dir, "results.json")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "rollout", calculatorConfig, "--policy", "oracle", "--output", out, "--quiet")
	cmd.Env = append(os.Environ(), "OPENROUTER_API_KEY=", "OPENAI_API_KEY=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout is not empty: %q", stdout.String())
	}
	checkOracleOutputs(t, out, 1)
}

// runPooledRollout runs the binary on calculator_api with the oracle,
// three episodes one at a time, with extra flags and DEBUG logs; it checks
// the outputs and that no container of the run is left, and returns the
// log.
func runPooledRollout(t *testing.T, extra ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker")
	}
	out := filepath.Join(t.TempDir(), "results.json")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	args := append([]string{"rollout", calculatorConfig, "--policy", "oracle", "--output", out, "--quiet",
		"--episodes", "3", "--parallel", "1", "--log-level", "DEBUG"}, extra...)
	cmd := exec.CommandContext(ctx, validateBinary(t), args...)
	cmd.Env = append(os.Environ(), "OPENROUTER_API_KEY=", "OPENAI_API_KEY=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	checkOracleOutputs(t, out, 3)
	host, _ := os.Hostname()
	owners, err := ownersWithPrefix(t.Context(), dockerClient(t), fmt.Sprintf("%s:%d:", host, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 0 {
		t.Errorf("containers of the run are left: owners %q", owners)
	}
	return stderr.String()
}

// TestRolloutCreatedPool runs the binary with --created-pool: a later
// episode's sandbox comes from a container created ahead (three episodes
// one at a time: the pool refills while each runs), and the containers
// created and never started are gone when the run ends.
func TestRolloutCreatedPool(t *testing.T) {
	log := runPooledRollout(t, "--created-pool", "1")
	if !strings.Contains(log, "sandbox from the created pool") {
		t.Errorf("no sandbox came from the created pool; stderr:\n%s", log)
	}
}

// TestRolloutReuse runs the binary with --reuse: the later episodes, one at
// a time, run in the first one's container, recycled, and score as the
// first did; the container is gone when the run ends.
func TestRolloutReuse(t *testing.T) {
	log := runPooledRollout(t, "--reuse", "1")
	if !strings.Contains(log, "sandbox recycled") {
		t.Errorf("no sandbox was recycled; stderr:\n%s", log)
	}
	if strings.Contains(log, "not recycled") {
		t.Errorf("a sandbox could not be recycled; stderr:\n%s", log)
	}
}

func TestRolloutAgainstRemoteServer(t *testing.T) {
	noDockerNoKeys(t)
	env := gymtest.NewEnv("e", gymtest.Task{ID: "e", Prompt: "Write hello to out.txt.", Expect: map[string]string{"out.txt": "hello"}})
	reg, err := gym.NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Registry: reg, Token: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := server.Listen("127.0.0.1:0", "secret")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "remote.json")
	if err := os.WriteFile(cfgPath, []byte(`{
		"environments": [{"id": "e", "docker_image": "unused", "prompt": "p", "unit_tests": ["true"]}],
		"episode_control_config": {"max_episodes": 2},
		"plugins": ["trajectory_analysis"]
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	recording := filepath.Join(dir, "recording.json")
	rec := gym.Trajectory{Messages: []gym.Message{
		{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("w", gym.ToolWriteFile, `{"filepath": "out.txt", "content": "hello"}`)}},
		{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("d", gym.ToolMarkDone, `{}`)}},
	}}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(recording, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "results.json")
	url := "ws://" + ln.Addr().String() + "/v1/ws"
	code, _, stderr := runCmd(t, noLoader(t), cfgPath, "--server", url, "--token", "secret", "--policy", "replay:"+recording, "--output", out, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	var stats rollout.Stats
	readFile(t, rollout.StatsPath(out), &stats)
	if o := stats.Overall; o.Episodes != 2 || o.SuccessRate != 1 {
		t.Errorf("overall = %+v", o)
	}
	if env.Resets() != 2 || len(env.OpenSessions()) != 0 {
		t.Errorf("server env: %d resets, open sessions %v", env.Resets(), env.OpenSessions())
	}
	var tr gym.Trajectory
	readFile(t, filepath.Join(dir, "trajectories", "e-1.json"), &tr)
	if tr.Policy != "replay:"+recording || len(tr.Steps) != 2 || tr.Plugins["trajectory_analysis"] == nil {
		t.Errorf("trajectory = %+v", tr)
	}

	// A wrong token is a connection error, not a crash.
	code, _, stderr = runCmd(t, noLoader(t), cfgPath, "--server", url, "--token", "wrong", "--policy", "replay:"+recording, "--output", out, "--quiet")
	if code != 1 || !strings.Contains(stderr, "connect") {
		t.Errorf("wrong token: exit %d, stderr:\n%s", code, stderr)
	}
}

// writeManyTasks writes a config of one environment with the given tasks
// (functions f(x) to implement, each with its hidden test and reference;
// a task named "noref*" has no reference) and returns its path.
func writeManyTasks(t *testing.T, ids ...string) string {
	t.Helper()
	var tasks []string
	for i, id := range ids {
		k := i + 2
		ref := fmt.Sprintf(`, "reference_solution": {"contents": {"f.py": "def f(x):\n    return %d * x\n"}}`, k)
		if strings.HasPrefix(id, "noref") {
			ref = ""
		}
		tasks = append(tasks, fmt.Sprintf(`{
			"id": %q, "prompt": "Implement f(x) = %d * x in f.py.",
			"files": {"f.py": "def f(x):\n    raise NotImplementedError\n"},
			"hidden_files": {"tests/test_f.py": "from f import f\n\ndef test_one():\n    assert f(1) == %d\n\ndef test_two():\n    assert f(3) == %d\n"}%s
		}`, id, k, k, 3*k, ref))
	}
	path := filepath.Join(t.TempDir(), "many.json")
	cfg := `{"environments": [{
		"id": "funcs", "docker_image": "` + baseimage.Python + `",
		"unit_tests": ["python3 -m pytest -q tests/"],
		"timeout_config": {"test_timeout": 60},
		"tasks": [` + strings.Join(tasks, ",") + `]}],
		"rollout_config": {"max_parallel_rollouts": 2}}`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRolloutDryRunManyTasks(t *testing.T) {
	noDockerNoKeys(t)
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("t%d", i))
	}
	cfg := writeManyTasks(t, append(ids, "noref")...)
	tests := []struct {
		name string
		args []string
		code int
		// want are substrings of stdout (code 0) or stderr.
		want []string
	}{
		{"every task once", []string{"--episodes-per-task", "1", "--tasks", "/t"}, 0, []string{
			"funcs: up to 8 episode(s) over 8 of 9 tasks",
			"tasks: t0, t1, t2, t3, t4, ... 3 more",
			`tasks: those matching "/t"; episodes: 1 per task`,
			"at most 8 in total",
		}},
		{"sample", []string{"--episodes-per-task", "2", "--tasks", "^funcs/t", "--tasks-per-env", "3", "--sample-seed", "5"}, 0, []string{
			"funcs: up to 6 episode(s) over 3 of 9 tasks",
			"a sample of 3 per environment (sample_seed 5)",
		}},
		{"max_episodes does not cover every task", []string{"--tasks", "/t", "--episodes", "2"}, 0, []string{
			"funcs: up to 2 episode(s) over 8 of 9 tasks",
			"warning: funcs: 2 episode(s) cover 2 of its 8 tasks",
		}},
		{"a task without reference is named", []string{"--episodes-per-task", "1"}, 1, []string{
			"environment funcs: task noref: policy oracle", "no reference_solution",
		}},
		{"filter matching nothing", []string{"--tasks", "^other/"}, 1, []string{`task_filter "^other/" matches no task`}},
		{"bad filter", []string{"--tasks", "("}, 2, []string{"--tasks: error parsing regexp"}},
		{"bad episodes per task", []string{"--episodes-per-task", "0"}, 2, []string{"--episodes-per-task must be at least 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{cfg, "--dry-run", "--policy", "oracle"}, tt.args...)
			code, stdout, stderr := runCmd(t, noLoader(t), args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			out := stdout
			if code != 0 {
				out = stderr
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestRolloutOracleManyTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	for _, v := range apiKeyVars {
		t.Setenv(v, "")
	}
	cfg := writeManyTasks(t, "double", "triple", "quadruple")
	out := filepath.Join(t.TempDir(), "results.json")
	code, _, stderr := runCmd(t, dockerLoader(t), cfg, "--policy", "oracle", "--episodes-per-task", "1", "--output", out)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"TASKS SOLVED", "3/3"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, stderr)
		}
	}
	var stats rollout.Stats
	readFile(t, rollout.StatsPath(out), &stats)
	if o := stats.Overall; o.Episodes != 3 || o.SuccessRate != 1 || o.MeanReward != 1 || o.Tasks != 3 || o.TasksSolved != 3 {
		t.Errorf("overall = %+v", o)
	}
	if e := stats.Environments["funcs"]; e.Episodes != 3 || e.TasksSolved != 3 {
		t.Errorf("funcs = %+v", e)
	}
	if len(stats.Tasks) != 3 {
		t.Errorf("task stats = %+v", stats.Tasks)
	}
	for _, id := range []string{"double", "triple", "quadruple"} {
		ts, ok := stats.Tasks["funcs/"+id]
		if !ok || ts.Episodes != 1 || ts.Successes != 1 || ts.MeanReward != 1 || ts.TestsPassed != 2 || ts.TestPassRate != 1 || ts.Errors != 0 {
			t.Errorf("task %s stats = %+v", id, ts)
		}
		var tr gym.Trajectory
		readFile(t, filepath.Join(filepath.Dir(out), "trajectories", rollout.TrajectoryName("funcs", id, 0)), &tr)
		if tr.TaskID != id || tr.EpisodeResult.FinalScore != 1 || !tr.EpisodeResult.Success || !strings.Contains(tr.Messages[1].Content, "f(x)") {
			t.Errorf("trajectory of %s: task %q, result %+v", id, tr.TaskID, tr.EpisodeResult)
		}
	}
}

// TestRolloutLoadsTheConfigOnce: the environments are made from the config
// the command loaded (flags applied), not from a second read of the file,
// which could differ if the file changed and would print the warnings
// twice.
func TestRolloutLoadsTheConfigOnce(t *testing.T) {
	noDockerNoKeys(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	// A deprecated root key gives a warning.
	conf := `{"max_parallel_rollouts": 2, "environments": [{"id": "mem", "docker_image": "img", "unit_tests": ["true"], "prompt": "x"}]}`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var got *config.Config
	load := func(_ context.Context, cfg *config.Config, _ *slog.Logger, _ loadOptions) (*gym.Registry, func(context.Context) error, error) {
		got = cfg
		// An edit now must not reach the run.
		if err := os.WriteFile(path, []byte(`{"environments": []}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return nil, nil, errors.New("stop here")
	}
	code, _, stderr := runCmd(t, load, path, "--parallel", "3", "--llm-api-key", "k", "--output", filepath.Join(dir, "out.json"))
	if code != 1 || !strings.Contains(stderr, "stop here") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if got == nil || got.Rollout.MaxParallelRollouts != 3 || len(got.Environments) != 1 || got.Environments[0].ID != "mem" {
		t.Fatalf("the loader got %+v, want the command's config with --parallel 3 applied", got)
	}
	if n := strings.Count(stderr, "max_parallel_rollouts at the root is deprecated"); n != 1 {
		t.Errorf("the warning was printed %d times, want once:\n%s", n, stderr)
	}
}
