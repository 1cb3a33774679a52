package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/policy/rollout"
)

// tasksEnv returns an in-memory environment with one task per id; task x
// expects out.txt to hold "x".
func tasksEnv(env string, ids ...string) *gymtest.Env {
	var tasks []gymtest.Task
	for _, id := range ids {
		tasks = append(tasks, gymtest.Task{ID: id, Prompt: "Write " + id + " to out.txt.", Expect: map[string]string{"out.txt": id}})
	}
	return gymtest.NewEnv(env, tasks...)
}

// promptPolicy writes what the task's prompt ("Write X to out.txt.") asks
// for when solve says so for X, else something wrong, then marks done.
func promptPolicy(solve func(task string) bool) gym.Policy {
	return policyFunc(func(ctx context.Context, msgs []gym.Message, _ []gym.Tool) (gym.Turn, error) {
		if len(msgs) > 2 {
			return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{done("d")}}}, nil
		}
		task := strings.TrimSuffix(strings.TrimPrefix(msgs[1].Content, "Write "), " to out.txt.")
		content := "wrong"
		if solve(task) {
			content = task
		}
		return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{write("w", "out.txt", content)}}}, nil
	})
}

func solveAll(string) bool { return true }

// episodesOf returns the episodes of a run as "env/task#index", in the
// results file's order.
func episodesOf(t *testing.T, sum *rollout.Summary) []string {
	t.Helper()
	var got []string
	for _, r := range readJSON[[]rollout.Record](t, sum.ResultsPath) {
		got = append(got, fmt.Sprintf("%s/%s#%d", r.EnvironmentID, r.TaskID, r.Episode))
	}
	return got
}

func TestTaskScheduling(t *testing.T) {
	two, three := 2, 3
	tests := []struct {
		name string
		mod  func(*config.Config)
		envs []gym.Env
		// want are the episodes run, in the results file's order.
		want []string
	}{
		{name: "max_episodes_spread_over_tasks", mod: func(c *config.Config) { c.EpisodeControl.MaxEpisodes = 4 },
			envs: []gym.Env{tasksEnv("m", "a", "b", "c")},
			want: []string{"m/a#0", "m/b#0", "m/c#0", "m/a#1"}},
		{name: "episodes_per_task", mod: func(c *config.Config) { c.EpisodeControl.EpisodesPerTask = 2 },
			envs: []gym.Env{tasksEnv("m", "a", "b", "c")},
			want: []string{"m/a#0", "m/b#0", "m/c#0", "m/a#1", "m/b#1", "m/c#1"}},
		{name: "episodes_per_task_capped_per_env", mod: func(c *config.Config) {
			c.EpisodeControl.EpisodesPerTask = 2
			c.EpisodeControl.MaxEpisodesPerEnv = &three
		}, envs: []gym.Env{tasksEnv("m", "a", "b", "c")},
			want: []string{"m/a#0", "m/b#0", "m/c#0"}},
		{name: "task_filter", mod: func(c *config.Config) {
			c.EpisodeControl.EpisodesPerTask = 1
			c.Rollout.TaskFilter = `^(m/(a|c)|n/.*)$`
		}, envs: []gym.Env{tasksEnv("m", "a", "b", "c"), tasksEnv("n", "x", "y")},
			want: []string{"m/a#0", "m/c#0", "n/x#0", "n/y#0"}},
		{name: "one_task_env_as_before", mod: func(c *config.Config) {
			c.EpisodeControl.MaxEpisodes = 3
			c.EpisodeControl.MaxEpisodesPerEnv = &two
		}, envs: []gym.Env{memEnv("solo")},
			want: []string{"solo/solo#0", "solo/solo#1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(func(c *config.Config) {
				c.Rollout.MaxParallelRollouts = 1
				tt.mod(c)
			})
			sum := mustRun(t, runSpec{cfg: cfg, envs: tt.envs, policy: promptPolicy(solveAll)})
			if diff := cmp.Diff(tt.want, episodesOf(t, sum)); diff != "" {
				t.Errorf("episodes (-want +got):\n%s", diff)
			}
			var keys []string
			for k, ts := range sum.Stats.Tasks {
				keys = append(keys, k)
				if ts.Successes != ts.Episodes || ts.EnvironmentID+"/"+ts.TaskID != k {
					t.Errorf("task %s: %+v", k, ts)
				}
			}
			// Every task that ran, and only those, has stats.
			wantKeys := map[string]bool{}
			for _, e := range tt.want {
				wantKeys[e[:strings.Index(e, "#")]] = true
			}
			if diff := cmp.Diff(wantKeys, toSet(keys)); diff != "" {
				t.Errorf("task stats keys (-want +got):\n%s", diff)
			}
			// Each episode's trajectory is where its name says, and records
			// its task.
			for _, r := range sum.Records {
				tr := taskTrajectory(t, sum, r.EnvironmentID, r.TaskID, r.Episode)
				if tr.TaskID != r.TaskID || tr.Episode != r.Episode || !tr.EpisodeResult.Success {
					t.Errorf("trajectory of %s/%s#%d: task %q episode %d result %+v", r.EnvironmentID, r.TaskID, r.Episode, tr.TaskID, tr.Episode, tr.EpisodeResult)
				}
			}
		})
	}
}

func toSet(keys []string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func TestTrajectoryNames(t *testing.T) {
	for _, tt := range []struct {
		env, task string
		want      string
	}{
		{"calc", "calc", "calc-3.json"},
		{"calc", "", "calc-3.json"},
		{"funcs", "double", filepath.Join("funcs", "double-3.json")},
		// A task id ending like an index stays apart from the index.
		{"funcs", "t-1", filepath.Join("funcs", "t-1-3.json")},
	} {
		if got := rollout.TrajectoryName(tt.env, tt.task, 3); got != tt.want {
			t.Errorf("TrajectoryName(%q, %q, 3) = %q, want %q", tt.env, tt.task, got, tt.want)
		}
	}
}

func TestSelectTasksSamplesReproducibly(t *testing.T) {
	var ids []string
	for i := range 50 {
		ids = append(ids, fmt.Sprintf("t%02d", i))
	}
	sel := func(seed int64, env string) []string {
		t.Helper()
		got, err := rollout.SelectTasks(config.Rollout{TasksPerEnv: 5, SampleSeed: seed}, env, ids)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := sel(7, "m")
	if len(first) != 5 {
		t.Fatalf("sample %v, want 5 tasks", first)
	}
	pos := map[string]int{}
	for i, id := range ids {
		pos[id] = i
	}
	for i := 1; i < len(first); i++ {
		if pos[first[i-1]] >= pos[first[i]] {
			t.Errorf("sample %v is not in the environment's order", first)
		}
	}
	if diff := cmp.Diff(first, sel(7, "m")); diff != "" {
		t.Errorf("same seed, another sample (-first +second):\n%s", diff)
	}
	// Other seeds and other environments draw other samples: among a few,
	// not all can be equal to the first by chance (C(50,5) samples).
	others := map[string]bool{}
	for _, s := range []int64{1, 2, 3} {
		others[strings.Join(sel(s, "m"), ",")] = true
	}
	others[strings.Join(sel(7, "n"), ",")] = true
	if len(others) < 2 || others[strings.Join(first, ",")] && len(others) == 1 {
		t.Errorf("samples do not depend on the seed or the environment: %v", others)
	}
	// The filter applies first; a sample larger than what is left is all
	// of it.
	got, err := rollout.SelectTasks(config.Rollout{TaskFilter: `/t0[0-2]$`, TasksPerEnv: 5}, "m", ids)
	if err != nil || !cmp.Equal(got, []string{"t00", "t01", "t02"}) {
		t.Errorf("filtered = %v, %v", got, err)
	}
	if _, err := rollout.SelectTasks(config.Rollout{TaskFilter: `(`}, "m", ids); err == nil || !strings.Contains(err.Error(), "task_filter") {
		t.Errorf("bad filter: %v", err)
	}
}

func TestTasksPerEnvRunsTheSample(t *testing.T) {
	env := tasksEnv("m", "a", "b", "c", "d", "e", "f")
	cfg := testConfig(func(c *config.Config) {
		c.EpisodeControl.EpisodesPerTask = 1
		c.Rollout.TasksPerEnv = 2
		c.Rollout.SampleSeed = 42
	})
	want, err := rollout.SelectTasks(cfg.Rollout, "m", []string{"a", "b", "c", "d", "e", "f"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		sum := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{env}, policy: promptPolicy(solveAll)})
		var got []string
		for _, r := range sum.Records {
			got = append(got, r.TaskID)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("tasks run (-sample +got):\n%s", diff)
		}
		if a := sum.Stats.Environments["m"]; a.Tasks != 2 || a.TasksSolved != 2 || len(sum.Stats.Tasks) != 2 {
			t.Errorf("env stats = %+v, tasks %v", a, sum.Stats.Tasks)
		}
	}
}

func TestTaskFilterMatchingNothingFails(t *testing.T) {
	cfg := testConfig(func(c *config.Config) { c.Rollout.TaskFilter = "^nothing/" })
	_, err := rollout.New(rollout.Options{
		Config:      cfg,
		Envs:        []gym.Env{tasksEnv("m", "a", "b")},
		Policy:      func(gym.EnvSpec, gym.TaskSpec) (gym.Policy, error) { return promptPolicy(solveAll), nil },
		ResultsPath: filepath.Join(t.TempDir(), "results.json"),
	})
	if err == nil || !strings.Contains(err.Error(), `task_filter "^nothing/" matches no task`) {
		t.Errorf("New: %v", err)
	}
}

func TestEpisodeControlPerTask(t *testing.T) {
	half := 0.5
	tests := []struct {
		name  string
		mod   func(*config.Config)
		solve func(string) bool
		// want is the number of episodes per task; stop the task stop
		// reasons; envStop the run's stop reasons.
		want    map[string]int
		stop    map[string]string
		envStop map[string]string
	}{
		{name: "stop_on_success_stops_the_solved_task", mod: func(c *config.Config) {
			c.EpisodeControl.EpisodesPerTask = 3
			c.EpisodeControl.StopOnSuccess = true
		}, solve: func(task string) bool { return task == "a" },
			want: map[string]int{"m/a": 1, "m/b": 3, "m/c": 3}, stop: map[string]string{"m/a": "stop_on_success"}},
		{name: "stop_on_success_every_task_stops_the_env", mod: func(c *config.Config) {
			c.EpisodeControl.EpisodesPerTask = 3
			c.EpisodeControl.StopOnSuccess = true
		}, solve: solveAll,
			want:    map[string]int{"m/a": 1, "m/b": 1, "m/c": 1},
			stop:    map[string]string{"m/a": "stop_on_success", "m/b": "stop_on_success", "m/c": "stop_on_success"},
			envStop: map[string]string{"m": "stop_on_success"}},
		{name: "min_success_rate_per_task", mod: func(c *config.Config) {
			c.EpisodeControl.EpisodesPerTask = 4
			c.EpisodeControl.MinSuccessRate = &half
		}, solve: func(task string) bool { return task != "c" },
			want: map[string]int{"m/a": 2, "m/b": 2, "m/c": 4},
			stop: map[string]string{"m/a": "min_success_rate 0.50 reached", "m/b": "min_success_rate 0.50 reached"}},
		{name: "safety_limit_caps_the_run", mod: func(c *config.Config) {
			c.EpisodeControl.EpisodesPerTask = 2
			c.EpisodeControl.SafetyLimit = 4
		}, solve: solveAll,
			want:    map[string]int{"m/a": 2, "m/b": 1, "m/c": 1},
			envStop: map[string]string{"*": "safety_limit 4 reached"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(func(c *config.Config) {
				c.Rollout.MaxParallelRollouts = 1
				tt.mod(c)
			})
			sum := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{tasksEnv("m", "a", "b", "c")}, policy: promptPolicy(tt.solve)})
			got, stops := map[string]int{}, map[string]string{}
			for k, ts := range sum.Stats.Tasks {
				got[k] = ts.Episodes
				if ts.StopReason != "" {
					stops[k] = ts.StopReason
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("episodes per task (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.stop, stops, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("task stop reasons (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.envStop, sum.Stats.Run.StopReasons, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("run stop reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolicyPerTask(t *testing.T) {
	env := tasksEnv("m", "a", "b")
	var seen []string
	factory := func(spec gym.EnvSpec, task gym.TaskSpec) (gym.Policy, error) {
		seen = append(seen, spec.ID+"/"+task.ID)
		// Each task's policy knows only its own answer.
		return turnsPolicy([]gym.ToolCall{write("w", "out.txt", task.ID)}, []gym.ToolCall{done("d")}), nil
	}
	cfg := testConfig(func(c *config.Config) { c.EpisodeControl.EpisodesPerTask = 2 })
	sum := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{env}, factory: factory})
	if diff := cmp.Diff([]string{"m/a", "m/b"}, seen); diff != "" {
		t.Errorf("factory calls (-want +got):\n%s", diff)
	}
	if o := sum.Stats.Overall; o.Episodes != 4 || o.Successes != 4 || o.Tasks != 2 || o.TasksSolved != 2 {
		t.Errorf("overall = %+v", o)
	}

	// A task whose policy cannot be made stops the run before it starts,
	// naming the task.
	_, err := rollout.New(rollout.Options{
		Config: cfg,
		Envs:   []gym.Env{env},
		Policy: func(_ gym.EnvSpec, task gym.TaskSpec) (gym.Policy, error) {
			if task.ID == "b" {
				return nil, errors.New("no reference_solution")
			}
			return promptPolicy(solveAll), nil
		},
		ResultsPath: filepath.Join(t.TempDir(), "results.json"),
	})
	if err == nil || !strings.Contains(err.Error(), "environment m: task b: policy: no reference_solution") {
		t.Errorf("New: %v", err)
	}
	if env.Resets() != 4 {
		t.Errorf("%d resets, want the first run's 4", env.Resets())
	}
}

// listerEnv is an environment whose Spec lists only its first task, as a
// remote environment's spec lists only the first ones; with lister set it
// pages through all of them (gym.TaskLister).
type listerEnv struct {
	*gymtest.Env
}

func (e listerEnv) Spec() gym.EnvSpec {
	spec := e.Env.Spec()
	spec.TaskCount = len(spec.Tasks)
	spec.Tasks = spec.Tasks[:1]
	return spec
}

type taskListerEnv struct{ listerEnv }

func (e taskListerEnv) Tasks(offset, limit int) ([]gym.TaskSpec, int) {
	all := e.Env.Spec().Tasks
	end := len(all)
	if limit >= 0 {
		end = min(end, offset+limit)
	}
	return all[offset:end], len(all)
}

var _ gym.TaskLister = taskListerEnv{}

func TestTasksOfEnvsThatListFewInTheirSpec(t *testing.T) {
	cfg := testConfig(func(c *config.Config) { c.EpisodeControl.EpisodesPerTask = 1 })
	for _, tt := range []struct {
		name string
		env  gym.Env
		want []string
	}{
		{"task_lister", taskListerEnv{listerEnv{tasksEnv("m", "a", "b", "c")}}, []string{"m/a#0", "m/b#0", "m/c#0"}},
		{"spec_only", listerEnv{tasksEnv("m", "a", "b", "c")}, []string{"m/a#0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sum := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{tt.env}, policy: promptPolicy(solveAll)})
			if diff := cmp.Diff(tt.want, episodesOf(t, sum)); diff != "" {
				t.Errorf("episodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatePersistenceKeysOnTheTask(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(func(c *config.Config) {
		c.EpisodeControl.EpisodesPerTask = 2
		c.Rollout.StatePersistenceEnabled = true
	})
	pol := promptPolicy(solveAll)
	first := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{tasksEnv("m", "a", "b")}, policy: pol, dir: dir})
	if first.Stats.Overall.Episodes != 4 {
		t.Fatalf("first run: %+v", first.Stats.Overall)
	}
	if err := os.Remove(filepath.Join(dir, "trajectories", "m", "b-1.json")); err != nil {
		t.Fatal(err)
	}
	env := tasksEnv("m", "a", "b")
	second := mustRun(t, runSpec{cfg: cfg, envs: []gym.Env{env}, policy: pol, dir: dir})
	if env.Resets() != 1 || second.Stats.Run.Resumed != 3 || second.Stats.Tasks["m/b"].Episodes != 2 {
		t.Errorf("resets %d, run %+v, task b %+v", env.Resets(), second.Stats.Run, second.Stats.Tasks["m/b"])
	}
	var got []string
	for _, r := range second.Records {
		got = append(got, fmt.Sprintf("%s#%d resumed=%t", r.TaskID, r.Episode, r.Resumed))
	}
	want := []string{"a#0 resumed=true", "b#0 resumed=true", "a#1 resumed=true", "b#1 resumed=false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestComputePerTask(t *testing.T) {
	rec := func(task string, reward float64, success, mask, tampered bool, class gym.ErrorClass, passed, total int) rollout.Record {
		return rollout.Record{EnvironmentID: "m", TaskID: task, EpisodeResult: gym.EpisodeResult{
			Success: success, FinalScore: reward, Mask: mask, Tampered: tampered, ErrorClass: class,
			TestsPassed: passed, TestsTotal: total, TerminatedReason: gym.ReasonCompleted,
		}}
	}
	recs := []rollout.Record{
		rec("a", 1, true, false, false, "", 2, 2),
		rec("a", 0.5, false, false, false, "", 1, 2),
		rec("b", 0, false, true, false, gym.ClassSandbox, 0, 0),
		rec("b", 0, false, false, true, gym.ClassAgent, 0, 2),
	}
	s := rollout.Compute(recs, []rollout.EnvPlan{{ID: "m", Tasks: []string{"a", "b", "c"}}})
	want := map[string]rollout.TaskStats{
		"m/a": {EnvironmentID: "m", TaskID: "a", Episodes: 2, Scored: 2, Successes: 1, SuccessRate: 0.5, MeanReward: 0.75,
			TestsPassed: 3, TestsTotal: 4, TestPassRate: 0.75},
		"m/b": {EnvironmentID: "m", TaskID: "b", Episodes: 2, Scored: 1, TestsTotal: 2, Errors: 2, Masked: 1, Tampered: 1},
		"m/c": {EnvironmentID: "m", TaskID: "c"},
	}
	if diff := cmp.Diff(want, s.Tasks); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	if e := s.Environments["m"]; e.Tasks != 3 || e.TasksSolved != 1 || e.Episodes != 4 {
		t.Errorf("env = %+v", e)
	}
	if o := s.Overall; o.Tasks != 3 || o.TasksSolved != 1 || o.Episodes != 4 || o.Tampered != 1 {
		t.Errorf("overall = %+v", o)
	}
}
