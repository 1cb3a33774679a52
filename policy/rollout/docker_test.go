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

	"github.com/gymserver/gymserver/envs/docker/dockertest"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/openaitest"
)

// shared is the Docker provider of this package's tests.
var shared dockertest.Shared

// testProvider returns the shared Docker provider.
func testProvider(t *testing.T) *docker.Provider { return shared.Provider(t) }

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// calculator returns the calculator_api example's config and its
// environment on real Docker.
func calculator(t *testing.T) (*config.Config, gym.Env) {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "calculator_api", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, e
}

func TestLLMSolvesCalculatorInDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	cfg, env := calculator(t)
	solution, err := os.ReadFile(filepath.Join("..", "..", "examples", "calculator_api", "solution", "app.py"))
	if err != nil {
		t.Fatal(err)
	}
	writeArgs, _ := json.Marshal(gym.WriteFileArgs{Filepath: "app.py", Content: string(solution)})
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.Calls(
			openaitest.Call("read", "read_file", `{"filepath": "app.py"}`),
			openaitest.Call("ls", "execute_command", `{"command": "ls /workspace"}`),
			openaitest.Call("py", "execute_command", `{"command": "python3 -c 'print(6*7)'"}`),
		),
		openaitest.Calls(
			openaitest.Call("bad", "execute_command", `{"command": "ls`),
			openaitest.Call("fly", "teleport", `{"where": "moon"}`),
		),
		openaitest.Calls(
			openaitest.Call("rm", "execute_command", `{"command": "rm -rf / --no-preserve-root"}`),
			openaitest.Call("write", "write_file", string(writeArgs)),
		),
		openaitest.Calls(openaitest.Call("done", "mark_done", `{"message": "calculator implemented"}`)),
	))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hooks.py"), []byte(hookPlugin), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	sum, err := run(t, ctx, runSpec{
		cfg:    cfg,
		dir:    dir,
		envs:   []gym.Env{env},
		policy: llmPolicy(t, srv),
		plugins: []config.Plugin{
			{Name: "safety_filter", Enabled: true, Timeout: time.Second},
			{Name: "trajectory_analysis", Enabled: true, Timeout: time.Second},
			{Name: "ext", Enabled: true, Timeout: 10 * time.Second, Command: []string{python3(t), "hooks.py"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	tools := toolReplies(reqs[1])
	if len(tools) != 3 || !strings.Contains(tools[0].Content, "def ") || !strings.Contains(tools[1].Content, "app.py") ||
		!strings.Contains(tools[2].Content, "42") {
		t.Errorf("results of the 3-call turn = %+v", tools)
	}
	tools = toolReplies(reqs[2])[3:]
	if len(tools) != 2 || !strings.Contains(tools[0].Content, "not a valid JSON") || !strings.Contains(tools[1].Content, "unknown tool") {
		t.Errorf("results of the bad calls = %+v", tools)
	}
	tools = toolReplies(reqs[3])[5:]
	if len(tools) != 2 || tools[0].ToolCallID != "rm" || !strings.HasPrefix(tools[0].Content, "Blocked by safety_filter") ||
		!strings.Contains(tools[1].Content, "Wrote") {
		t.Errorf("results after the blocked call = %+v", tools)
	}

	tr := trajectory(t, sum, "calculator_api", 0)
	er := tr.EpisodeResult
	if !er.Success || er.FinalScore != 1 || er.Mask || er.TerminatedReason != gym.ReasonCompleted || !er.AgentDone ||
		er.TestsTotal < 5 || er.TestsPassed != er.TestsTotal || er.Actions != 8 || er.ActionErrors != 3 {
		t.Errorf("episode result = %+v", er)
	}
	if len(tr.Messages) != 2+4+8 || tr.Messages[0].Role != gym.RoleSystem || tr.Messages[1].Role != gym.RoleUser {
		t.Errorf("transcript has %d messages", len(tr.Messages))
	}
	if tr.Evaluation == nil || len(tr.Evaluation.Tests) != er.TestsTotal || len(tr.TestResults) != 1 || !tr.TestResults[0].Success {
		t.Errorf("evaluation = %+v, test results = %+v", tr.Evaluation, tr.TestResults)
	}
	analysis, _ := tr.Plugins["trajectory_analysis"].(map[string]any)
	if analysis["actions"] != 8.0 || analysis["blocked"] != 1.0 {
		t.Errorf("analysis = %v", analysis)
	}
	if s := sum.Stats.Overall; s.SuccessRate != 1 || s.MeanReward != 1 || s.TestPassRate != 1 {
		t.Errorf("stats = %+v", s)
	}
	hooks := map[string]bool{}
	f, err := os.Open(filepath.Join(dir, "hooks.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct{ Hook string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		hooks[l.Hook] = true
	}
	for _, h := range []string{"pre_rollout", "pre_episode", "pre_action", "post_action", "pre_test", "post_test", "post_episode", "post_rollout"} {
		if !hooks[h] {
			t.Errorf("the external plugin never saw %s", h)
		}
	}
}
