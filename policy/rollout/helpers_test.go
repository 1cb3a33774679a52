package rollout_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/policy/plugin"
	"github.com/gymserver/gymserver/policy/rollout"
)

// policyFunc adapts a function to gym.Policy.
type policyFunc func(ctx context.Context, msgs []gym.Message, tools []gym.Tool) (gym.Turn, error)

func (f policyFunc) Act(ctx context.Context, msgs []gym.Message, tools []gym.Tool) (gym.Turn, error) {
	return f(ctx, msgs, tools)
}

// turnsPolicy answers the n-th turn of an episode (n counted from the
// assistant messages so far) with calls[n]; nil answers with text only.
func turnsPolicy(turns ...[]gym.ToolCall) gym.Policy {
	return policyFunc(func(ctx context.Context, msgs []gym.Message, _ []gym.Tool) (gym.Turn, error) {
		n := 0
		for _, m := range msgs {
			if m.Role == gym.RoleAssistant {
				n++
			}
		}
		msg := gym.Message{Role: gym.RoleAssistant, Content: "thinking"}
		if n < len(turns) {
			msg.ToolCalls = turns[n]
		}
		return gym.Turn{Message: msg, Usage: gym.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, Calls: 1}}, nil
	})
}

func call(id, name string, args any) gym.ToolCall {
	b, _ := json.Marshal(args)
	return gym.NewToolCall(id, name, string(b))
}

func write(id, path, content string) gym.ToolCall {
	return call(id, gym.ToolWriteFile, gym.WriteFileArgs{Filepath: path, Content: content})
}

func execute(id, cmd string) gym.ToolCall {
	return call(id, gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: cmd})
}

func done(id string) gym.ToolCall {
	return call(id, gym.ToolMarkDone, gym.MarkDoneArgs{Message: "finished"})
}

// memEnv returns an in-memory environment whose one task expects out.txt
// to hold "hello".
func memEnv(id string) *gymtest.Env {
	return gymtest.NewEnv(id, gymtest.Task{ID: id, Prompt: "Write hello to out.txt.", Expect: map[string]string{"out.txt": "hello"}})
}

// testConfig returns a config with the loader's defaults for the rollout
// sections, changed by mod.
func testConfig(mod func(*config.Config)) *config.Config {
	cfg := &config.Config{
		Rollout: config.Rollout{MaxParallelRollouts: 2, TrajectoryOutputPath: "trajectories", EnablePlugins: true,
			SaveTrajectoryInterval: 1},
		EpisodeControl: config.EpisodeControl{MaxEpisodes: 1, SafetyLimit: 100},
		Timeouts:       config.Timeouts{Global: time.Minute, Command: time.Minute, Test: time.Second},
	}
	if mod != nil {
		mod(cfg)
	}
	return cfg
}

// runSpec is one run of the runner in a test.
type runSpec struct {
	cfg     *config.Config
	envs    []gym.Env
	policy  gym.Policy
	factory rollout.PolicyFactory
	plugins []config.Plugin
	// dir is the output directory; empty makes a new one.
	dir    string
	grace  time.Duration
	budget rollout.Budget
	cost   func(gym.Usage) float64
	// format is the results format.
	format string
}

// run runs a rollout and returns its summary and error.
func run(t *testing.T, ctx context.Context, s runSpec) (*rollout.Summary, error) {
	t.Helper()
	if s.dir == "" {
		s.dir = t.TempDir()
	}
	if s.cfg == nil {
		s.cfg = testConfig(nil)
	}
	factory := s.factory
	if factory == nil {
		factory = func(gym.EnvSpec, gym.TaskSpec) (gym.Policy, error) { return s.policy, nil }
	}
	set, err := plugin.Load(s.plugins, s.dir, nil)
	if err != nil {
		t.Fatalf("load plugins: %v", err)
	}
	r, err := rollout.New(rollout.Options{
		Config:        s.cfg,
		Envs:          s.envs,
		Policy:        factory,
		PolicyName:    "test",
		Plugins:       set,
		ResultsPath:   filepath.Join(s.dir, "results.json"),
		Grace:         s.grace,
		Budget:        s.budget,
		Cost:          s.cost,
		ResultsFormat: s.format,
	})
	if err != nil {
		t.Fatalf("new runner: %v", err)
	}
	return r.Run(ctx)
}

// mustRun runs a rollout that must succeed.
func mustRun(t *testing.T, s runSpec) *rollout.Summary {
	t.Helper()
	sum, err := run(t, t.Context(), s)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return sum
}

// readJSON decodes the JSON file at path into a new T.
func readJSON[T any](t *testing.T, path string) T {
	t.Helper()
	var v T
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// trajectory reads the trajectory of episode i of the one-task env in a
// run.
func trajectory(t *testing.T, sum *rollout.Summary, env string, i int) gym.Trajectory {
	t.Helper()
	return taskTrajectory(t, sum, env, env, i)
}

// taskTrajectory reads the trajectory of episode i of a task of env.
func taskTrajectory(t *testing.T, sum *rollout.Summary, env, task string, i int) gym.Trajectory {
	t.Helper()
	return readJSON[gym.Trajectory](t, filepath.Join(sum.TrajectoryDir, rollout.TrajectoryName(env, task, i)))
}

// toolMessages returns the tool messages of a transcript.
func toolMessages(msgs []gym.Message) []gym.Message {
	var out []gym.Message
	for _, m := range msgs {
		if m.Role == gym.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

// counter is a concurrency-safe call counter.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) next() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n - 1
}

// python3 returns the Python interpreter for external plugins written in
// Python: $GYMSERVER_TEST_PYTHON when set, else the system's
// /usr/bin/python3 when there is one, else python3 from PATH; without any
// the test is skipped. The system's comes before PATH's because a version
// manager's shim there (pyenv) can take longer to start than the plugin
// timeouts these tests use.
func python3(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GYMSERVER_TEST_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	path, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	return path
}
