package rollout

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/policy/plugin"
)

// EnvPlan is what a run does with one environment: which of its tasks run
// and how many episodes it starts.
type EnvPlan struct {
	ID string
	// TaskCount is the number of tasks the environment was listed with.
	TaskCount int
	// Tasks are the task ids that run, in the environment's order: those
	// rollout_config.task_filter keeps, sampled down to
	// rollout_config.tasks_per_env.
	Tasks []string
	// Episodes is the most episodes the run starts for the environment:
	// config.EpisodeControl.EpisodesFor(len(Tasks)). Episode i runs task
	// Tasks[i mod len(Tasks)] as that task's episode i / len(Tasks), so
	// every task's n-th episode starts before any task's (n+1)-th.
	Episodes int
}

// slot is one scheduled episode of an environment: its task (an index in
// EnvPlan.Tasks) and its index among that task's episodes.
type slot struct {
	task, index int
}

// slots lists the episodes of p in the order they start.
func (p EnvPlan) slots() []slot {
	m := len(p.Tasks)
	out := make([]slot, 0, p.Episodes)
	for i := 0; i < p.Episodes && m > 0; i++ {
		out = append(out, slot{task: i % m, index: i / m})
	}
	return out
}

// PlanEnv plans the run of one environment whose tasks are tasks (ids, in
// the environment's order), by cfg's task selection and episode control.
func PlanEnv(cfg *config.Config, env string, tasks []string) (EnvPlan, error) {
	sel, err := SelectTasks(cfg.Rollout, env, tasks)
	if err != nil {
		return EnvPlan{}, err
	}
	return EnvPlan{ID: env, TaskCount: len(tasks), Tasks: sel, Episodes: cfg.EpisodeControl.EpisodesFor(len(sel))}, nil
}

// SelectTasks returns the tasks of env that a run covers, in their order:
// those whose "ENV/TASK" matches r.TaskFilter (all when it is empty), then,
// when r.TasksPerEnv is positive and smaller, a sample of that many. The
// sample depends only on r.SampleSeed, env and the tasks, so a run is
// reproducible; environments with the same tasks get different samples.
func SelectTasks(r config.Rollout, env string, tasks []string) ([]string, error) {
	out := tasks
	if r.TaskFilter != "" {
		re, err := regexp.Compile(r.TaskFilter)
		if err != nil {
			return nil, fmt.Errorf("task_filter: %w", err)
		}
		out = nil
		for _, t := range tasks {
			if re.MatchString(env + "/" + t) {
				out = append(out, t)
			}
		}
	}
	k := r.TasksPerEnv
	if k <= 0 || k >= len(out) {
		return slices.Clone(out), nil
	}
	h := fnv.New64a()
	h.Write([]byte(env))
	rng := rand.New(rand.NewPCG(uint64(r.SampleSeed), h.Sum64()))
	picked := rng.Perm(len(out))[:k]
	slices.Sort(picked)
	sample := make([]string, k)
	for i, j := range picked {
		sample[i] = out[j]
	}
	return sample, nil
}

// ConfigPlans plans every environment of cfg from the tasks the config
// declares, as `rollout --dry-run` shows them. It contacts nothing.
func ConfigPlans(cfg *config.Config) ([]EnvPlan, error) {
	plans := make([]EnvPlan, 0, len(cfg.Environments))
	for _, ec := range cfg.Environments {
		ids := make([]string, len(ec.Tasks))
		for i, t := range ec.Tasks {
			ids[i] = t.ID
		}
		p, err := PlanEnv(cfg, ec.ID, ids)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	if err := checkPlans(cfg, plans); err != nil {
		return nil, err
	}
	return plans, nil
}

// checkPlans fails when a task filter leaves nothing to run.
func checkPlans(cfg *config.Config, plans []EnvPlan) error {
	for _, p := range plans {
		if len(p.Tasks) > 0 {
			return nil
		}
	}
	if f := cfg.Rollout.TaskFilter; f != "" {
		return fmt.Errorf("task_filter %q matches no task", f)
	}
	return fmt.Errorf("no task to run")
}

// PlanFor returns the plan of a run of cfg over the planned environments,
// as pre_rollout plugins see it.
func PlanFor(cfg *config.Config, envs []EnvPlan, policyName string) plugin.Plan {
	p := plugin.Plan{SafetyLimit: cfg.EpisodeControl.SafetyLimit, Parallel: cfg.Rollout.MaxParallelRollouts, Policy: policyName}
	for _, e := range envs {
		p.Environments = append(p.Environments, plugin.PlannedEnv{ID: e.ID, Episodes: e.Episodes, Tasks: len(e.Tasks)})
	}
	return p
}

// Total returns the most episodes a plan runs.
func Total(p plugin.Plan) int {
	n := 0
	for _, e := range p.Environments {
		n += e.Episodes
	}
	if p.SafetyLimit > 0 {
		n = min(n, p.SafetyLimit)
	}
	return n
}
