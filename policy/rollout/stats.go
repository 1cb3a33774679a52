package rollout

import (
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/plugin"
)

// Record is one finished episode in the results file.
type Record struct {
	TrajectoryID  string `json:"trajectory_id"`
	EnvironmentID string `json:"environment_id"`
	TaskID        string `json:"task_id"`
	// Episode is the 0-based index of the episode among its task's
	// episodes (for a one-task environment, among its environment's).
	Episode   int    `json:"episode"`
	SessionID string `json:"session_id,omitempty"`
	// TrajectoryFile is the trajectory's path, relative to the results
	// file's directory when it is inside it.
	TrajectoryFile string   `json:"trajectory_file"`
	StartTime      gym.Time `json:"start_time"`
	EndTime        gym.Time `json:"end_time"`
	// Turns is the number of policy calls.
	Turns         int               `json:"turns"`
	Usage         gym.Usage         `json:"usage"`
	EpisodeResult gym.EpisodeResult `json:"episode_result"`
	// Resumed is true when the episode was read back from an earlier run
	// (state persistence) rather than run now.
	Resumed bool `json:"resumed,omitempty"`
}

// Stats is the stats file: aggregates over the whole run, per environment
// and per task. It also carries the Real Work seed's names for its
// aggregates (SeedTotals at the root, SeedAggregate in each environment),
// so a seed user's scripts read it unchanged.
type Stats struct {
	SeedTotals
	Overall      Aggregate            `json:"overall"`
	Environments map[string]Aggregate `json:"environments"`
	// Tasks has an entry for every task the run covered, by "ENV/TASK".
	Tasks map[string]TaskStats `json:"tasks"`
	// Plugins has each enabled plugin's call counts and rollout-level data.
	Plugins map[string]PluginStats `json:"plugins,omitempty"`
	Run     RunInfo                `json:"run"`
}

// SeedTotals are the seed's root-level stats: its stats file's counters
// and the success rate and mean duration its summary printed. They are
// copies of Overall's numbers under the seed's names.
type SeedTotals struct {
	TotalEpisodes      int `json:"total_episodes"`
	SuccessfulEpisodes int `json:"successful_episodes"`
	// FailedEpisodes counts every episode that was not a success, masked
	// ones included, as the seed did.
	FailedEpisodes int `json:"failed_episodes"`
	// TotalDuration sums the episodes' durations, in seconds.
	TotalDuration float64 `json:"total_duration"`
	// SuccessRate is Overall.SuccessRate: over scored episodes.
	SuccessRate float64 `json:"success_rate"`
	AvgDuration float64 `json:"avg_duration"`
	// TokenUsage is the run's token usage in the seed's names, with its
	// estimated cost; set by the runner.
	TokenUsage *SeedTokenUsage `json:"token_usage,omitempty"`
}

// SeedAggregate are the seed's per-environment stats, under its names:
// copies of the Aggregate's numbers.
type SeedAggregate struct {
	Successful int `json:"successful"`
	// Failed counts every episode that was not a success.
	Failed int `json:"failed"`
	// TotalDuration sums the episodes' durations, in seconds.
	TotalDuration float64 `json:"total_duration"`
	// AvgScore is MeanReward: the mean final score of scored episodes.
	AvgScore    float64 `json:"avg_score"`
	AvgDuration float64 `json:"avg_duration"`
}

// RunInfo describes the run that produced the stats.
type RunInfo struct {
	Policy    string   `json:"policy,omitempty"`
	Model     string   `json:"model,omitempty"`
	StartTime gym.Time `json:"start_time"`
	EndTime   gym.Time `json:"end_time"`
	// DurationSeconds is the wall-clock time of the run.
	DurationSeconds float64 `json:"duration_seconds"`
	// Interrupted is true when the run was stopped before it finished.
	Interrupted bool `json:"interrupted"`
	// Stopped counts the episodes that were running when the run was
	// interrupted; they are not recorded.
	Stopped int `json:"stopped"`
	// Resumed counts the episodes read back from an earlier run.
	Resumed int `json:"resumed"`
	// StopReasons says why environments (or the run) stopped early, by
	// environment id ("*" for the whole run). An environment whose tasks
	// all stopped (stop_on_success, min_success_rate) is listed with their
	// reason; each task's own reason is in its TaskStats.
	StopReasons map[string]string `json:"stop_reasons,omitempty"`
}

// PluginStats are one plugin's counters plus the data it attached to the
// run in rollout hooks.
type PluginStats struct {
	plugin.Stats
	Data map[string]any `json:"data,omitempty"`
}

// Aggregate summarises a set of episodes. Rates over rewards and tests are
// taken over scored episodes: those not masked as infrastructure failures.
type Aggregate struct {
	// Tasks counts the tasks the run covered; TasksSolved those with at
	// least one success.
	Tasks       int `json:"tasks"`
	TasksSolved int `json:"tasks_solved"`
	Episodes    int `json:"episodes"`
	// Scored counts the episodes that are not masked.
	Scored    int `json:"scored"`
	Successes int `json:"successes"`
	// SuccessRate is Successes / Scored.
	SuccessRate float64 `json:"success_rate"`
	// MeanReward is the mean final score of the scored episodes.
	MeanReward float64 `json:"mean_reward"`
	// TestsPassed and TestsTotal sum the test cases of scored episodes;
	// TestPassRate is their ratio.
	TestsPassed  int     `json:"tests_passed"`
	TestsTotal   int     `json:"tests_total"`
	TestPassRate float64 `json:"test_pass_rate"`
	// MeanDuration is the mean episode wall-clock time, in seconds, over
	// all episodes.
	MeanDuration float64 `json:"mean_duration"`
	// Actions counts tool calls (blocked ones included); ActionErrorRate is
	// ActionErrors / Actions.
	Actions         int     `json:"actions"`
	ActionErrors    int     `json:"action_errors"`
	ActionErrorRate float64 `json:"action_error_rate"`
	// PolicyErrors counts episodes ended by a policy failure; Masked
	// counts every masked episode (policy errors included).
	PolicyErrors int `json:"policy_errors"`
	Masked       int `json:"masked"`
	// Tampered counts episodes whose test run was found forged (scored
	// 0, not masked).
	Tampered int `json:"tampered"`
	// ErrorClasses counts episodes by error class.
	ErrorClasses map[gym.ErrorClass]int `json:"error_classes,omitempty"`
	// TerminationReasons counts episodes by how they ended.
	TerminationReasons map[gym.TerminationReason]int `json:"termination_reasons"`
	// AgentDone counts episodes in which the agent called mark_done.
	AgentDone int       `json:"agent_done"`
	Usage     gym.Usage `json:"usage"`
	SeedAggregate
}

// add counts one episode in a.
func (a *Aggregate) add(r Record) {
	er := r.EpisodeResult
	a.Episodes++
	if a.TerminationReasons == nil {
		a.TerminationReasons = map[gym.TerminationReason]int{}
	}
	a.TerminationReasons[er.TerminatedReason]++
	if er.ErrorClass != "" {
		if a.ErrorClasses == nil {
			a.ErrorClasses = map[gym.ErrorClass]int{}
		}
		a.ErrorClasses[er.ErrorClass]++
	}
	if er.ErrorClass == gym.ClassPolicy {
		a.PolicyErrors++
	}
	if er.AgentDone {
		a.AgentDone++
	}
	if er.Tampered {
		a.Tampered++
	}
	a.Actions += er.Actions
	a.ActionErrors += er.ActionErrors
	a.Usage.Add(r.Usage)
	// MeanDuration and MeanReward hold sums until finish.
	a.MeanDuration += er.DurationSeconds
	if er.Mask {
		a.Masked++
		return
	}
	a.Scored++
	a.MeanReward += er.FinalScore
	if er.Success {
		a.Successes++
	}
	a.TestsPassed += er.TestsPassed
	a.TestsTotal += er.TestsTotal
}

// finish turns the sums into means and rates.
func (a *Aggregate) finish() {
	a.TotalDuration = a.MeanDuration
	a.MeanDuration = div(a.MeanDuration, a.Episodes)
	a.MeanReward = div(a.MeanReward, a.Scored)
	a.SuccessRate = div(float64(a.Successes), a.Scored)
	a.TestPassRate = div(float64(a.TestsPassed), a.TestsTotal)
	a.ActionErrorRate = div(float64(a.ActionErrors), a.Actions)
	if a.TerminationReasons == nil {
		a.TerminationReasons = map[gym.TerminationReason]int{}
	}
	a.Successful, a.Failed = a.Successes, a.Episodes-a.Successes
	a.AvgScore, a.AvgDuration = a.MeanReward, a.MeanDuration
}

func div(a float64, b int) float64 {
	if b == 0 {
		return 0
	}
	return a / float64(b)
}

// TaskStats summarise the episodes of one task.
type TaskStats struct {
	EnvironmentID string `json:"environment_id"`
	TaskID        string `json:"task_id"`
	Episodes      int    `json:"episodes"`
	Scored        int    `json:"scored"`
	Successes     int    `json:"successes"`
	// SuccessRate, MeanReward and TestPassRate are over scored episodes,
	// as in Aggregate.
	SuccessRate  float64 `json:"success_rate"`
	MeanReward   float64 `json:"mean_reward"`
	TestsPassed  int     `json:"tests_passed"`
	TestsTotal   int     `json:"tests_total"`
	TestPassRate float64 `json:"test_pass_rate"`
	// Errors counts episodes with an error class; Masked those masked as
	// infrastructure failures; Tampered those whose test run was forged.
	Errors   int `json:"errors"`
	Masked   int `json:"masked"`
	Tampered int `json:"tampered"`
	// StopReason says why the task stopped early, if it did.
	StopReason string `json:"stop_reason,omitempty"`
}

// taskStatsOf projects the aggregate of one task's episodes.
func taskStatsOf(env, task string, a Aggregate) TaskStats {
	errs := 0
	for _, n := range a.ErrorClasses {
		errs += n
	}
	return TaskStats{
		EnvironmentID: env, TaskID: task,
		Episodes: a.Episodes, Scored: a.Scored, Successes: a.Successes,
		SuccessRate: a.SuccessRate, MeanReward: a.MeanReward,
		TestsPassed: a.TestsPassed, TestsTotal: a.TestsTotal, TestPassRate: a.TestPassRate,
		Errors: errs, Masked: a.Masked, Tampered: a.Tampered,
	}
}

// taskKey is the key of a task in Stats.Tasks.
func taskKey(env, task string) string { return env + "/" + task }

// Compute aggregates records overall, per environment and per task of the
// planned environments. Every planned environment and task gets an entry,
// even with no episodes; a record of a task not in the plans counts
// towards its environment and the whole run only.
func Compute(records []Record, envs []EnvPlan) Stats {
	s := Stats{Environments: make(map[string]Aggregate, len(envs)), Tasks: map[string]TaskStats{}}
	tasks := map[string]*Aggregate{}
	for _, e := range envs {
		s.Environments[e.ID] = Aggregate{Tasks: len(e.Tasks)}
		s.Overall.Tasks += len(e.Tasks)
		for _, t := range e.Tasks {
			tasks[taskKey(e.ID, t)] = &Aggregate{}
		}
	}
	for _, r := range records {
		s.Overall.add(r)
		a := s.Environments[r.EnvironmentID]
		a.add(r)
		s.Environments[r.EnvironmentID] = a
		if ta, ok := tasks[taskKey(r.EnvironmentID, r.TaskID)]; ok {
			ta.add(r)
		}
	}
	for _, e := range envs {
		a := s.Environments[e.ID]
		for _, t := range e.Tasks {
			ta := tasks[taskKey(e.ID, t)]
			ta.finish()
			if ta.Successes > 0 {
				a.TasksSolved++
				s.Overall.TasksSolved++
			}
			s.Tasks[taskKey(e.ID, t)] = taskStatsOf(e.ID, t, *ta)
		}
		s.Environments[e.ID] = a
	}
	s.Overall.finish()
	for id, a := range s.Environments {
		a.finish()
		s.Environments[id] = a
	}
	o := s.Overall
	s.SeedTotals = SeedTotals{
		TotalEpisodes: o.Episodes, SuccessfulEpisodes: o.Successful, FailedEpisodes: o.Failed,
		TotalDuration: o.TotalDuration, SuccessRate: o.SuccessRate, AvgDuration: o.AvgDuration,
	}
	return s
}
