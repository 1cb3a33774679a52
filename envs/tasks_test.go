package envs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// manyTasks is an environment of three inline tasks on one image: each
// has its own starter file, hidden test and reference.
func manyTasks(t *testing.T) (*config.Config, config.Environment) {
	t.Helper()
	var tasks []string
	for i, name := range []string{"double", "triple", "square"} {
		tasks = append(tasks, fmt.Sprintf(`{
			"id": %q, "prompt": "Implement f(x) = %s.",
			"files": {"f.py": "# task %s\ndef f(x):\n    raise NotImplementedError\n"},
			"hidden_files": {"tests/test_f.py": "from f import f\n\ndef test_one():\n    assert f(1) == %d\n\ndef test_two():\n    assert f(2) == %d\n"},
			"reference_solution": {"contents": {"f.py": "def f(x):\n    return %s\n"}},
			"metadata": {"index": %d}
		}`, name, name, name, []int{2, 3, 1}[i], []int{4, 6, 4}[i], []string{"2 * x", "3 * x", "x * x"}[i], i))
	}
	cfg, err := config.Parse([]byte(`{"environments": [{
		"id": "funcs", "docker_image": "`+baseimage.Python+`",
		"unit_tests": ["python3 -m pytest -q tests/"],
		"timeout_config": {"test_timeout": 60},
		"tasks": [`+strings.Join(tasks, ",")+`]}]}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cfg.Environments[0]
}

func TestManyTasksResetPicksTheTask(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{WarmPool: 1})
	cfg, ec := manyTasks(t)
	e, err := envs.New(cfg, ec, envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	if spec := e.Spec(); spec.TaskCount != 3 || len(spec.Tasks) != 3 || spec.Tasks[2].ID != "square" || spec.Tasks[2].Metadata["index"] != float64(2) {
		t.Fatalf("spec %+v", spec)
	}
	if page, n := e.Tasks(1, 1); n != 3 || len(page) != 1 || page[0].ID != "triple" {
		t.Fatalf("page (1, 1): %+v of %d", page, n)
	}
	if page, n := e.Tasks(5, 10); n != 3 || len(page) != 0 {
		t.Fatalf("page past the end: %+v of %d", page, n)
	}
	if _, _, err := e.Reset(t.Context(), gym.ResetRequest{Task: "cube"}); !errors.Is(err, gym.ErrNotFound) {
		t.Fatalf("unknown task: %v, want not found", err)
	}

	images := map[string]bool{}
	pooled := 0
	for _, name := range []string{"double", "triple", "square", "double"} {
		before := time.Now()
		s, r, err := e.Reset(t.Context(), gym.ResetRequest{Task: name})
		if err != nil {
			t.Fatalf("reset %s: %v", name, err)
		}
		if r.TaskID != name || !strings.Contains(r.Prompt, name) {
			t.Errorf("reset %s: task %q, prompt %q", name, r.TaskID, r.Prompt)
		}
		// The starter file is the task's, and the agent may change it.
		res := step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "head -1 f.py; stat -c %u f.py; ls; echo more >> f.py"}))
		out := res.Observation.Text
		if !strings.Contains(out, "# task "+name) || !strings.Contains(out, "1000") || strings.Contains(out, "tests") {
			t.Errorf("reset %s: sandbox shows %q", name, out)
		}
		list, err := cli.ContainerList(t.Context(), container.ListOptions{
			Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+s.ID()))})
		if err != nil || len(list) != 1 {
			t.Fatalf("containers of session %s: %d (%v)", s.ID(), len(list), err)
		}
		images[list[0].Image] = true
		if info, err := cli.ContainerInspect(t.Context(), list[0].ID); err != nil {
			t.Fatal(err)
		} else if created, err := time.Parse(time.RFC3339Nano, info.Created); err == nil && created.Before(before) {
			pooled++
		}
		// The reference scores 1 with this task's hidden tests.
		ref, _ := ec.Task(name)
		calls, err := envs.ReferenceCalls(ref)
		if err != nil {
			t.Fatal(err)
		}
		var last gym.StepResult
		for _, c := range calls {
			last = step(t, s, c)
		}
		if ev := last.Info.Evaluation; ev == nil || ev.Reward != 1 || ev.Total != 2 {
			t.Errorf("reset %s: reference evaluation %+v", name, ev)
		}
		if _, err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if name == "double" && len(images) == 1 {
			// Let the pool fill, so the next resets are served from it.
			waitPooled(t, p, e)
		}
	}
	if pooled < 2 {
		t.Errorf("%d of 4 resets came from the warm pool, want the 3 after it filled (at least 2)", pooled)
	}
	if len(images) != 1 {
		t.Errorf("the tasks ran in %d images %v; one prepared image should serve them all", len(images), images)
	}
}

// waitPooled waits until the pool holds a sandbox for the environment.
func waitPooled(t *testing.T, p *docker.Provider, e *envs.TaskEnv) {
	t.Helper()
	image, err := e.Prepare(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ec := e.Config()
	spec := sandbox.Spec{Image: image, WorkDir: ec.WorkingDirectory, Env: ec.EnvironmentVariables,
		Labels:    map[string]string{},
		Resources: sandbox.Resources{MemoryBytes: ec.Resources.MemoryBytes, CPUs: ec.Resources.CPUs, PIDs: ec.Resources.PIDs},
		Network:   ec.Network, ShareUsr: ec.SharedUsrOn()}
	waittest.For(t, "the pool to fill", time.Minute, func() bool { return p.Pooled(spec) >= 1 })
}

func TestManyTasksSeedPicksReproducibly(t *testing.T) {
	cfg, ec := manyTasks(t)
	e, err := envs.New(cfg, ec, envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(7)
	var ids []string
	for range 2 {
		s, r, err := e.Reset(t.Context(), gym.ResetRequest{Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.TaskID)
		if _, err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	want := ec.Tasks[envs.SeedIndex(seed, 3)].ID
	if ids[0] != want || ids[1] != want {
		t.Errorf("seed %d picked %v, want %s twice", seed, ids, want)
	}
}

// TestSeedIndexSpreads checks that seeds 0..n-1 reach every task of a
// small dataset and land evenly on a large one, and that the mapping is
// the documented one (it must never change between releases).
func TestSeedIndexSpreads(t *testing.T) {
	counts := make([]int, 10)
	for s := range int64(10000) {
		counts[envs.SeedIndex(s, 10)]++
	}
	for i, c := range counts {
		if c < 900 || c > 1100 {
			t.Errorf("task %d picked %d times of 10000", i, c)
		}
	}
	// Pinned values: a change here breaks every recorded seed.
	for _, c := range []struct {
		seed int64
		n    int
		want int
	}{{0, 1000, 535}, {42, 7, 5}, {123456789, 10000, 5897}} {
		if got := envs.SeedIndex(c.seed, c.n); got != c.want {
			t.Errorf("SeedIndex(%d, %d) = %d, want %d", c.seed, c.n, got, c.want)
		}
	}
	if got := envs.SeedIndex(-1, 1); got != 0 {
		t.Errorf("SeedIndex(-1, 1) = %d", got)
	}
}
