package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/plugin"
)

// PolicyFactory returns the policy for the episodes of one task of an
// environment. New calls it once for every task the run covers, before
// anything runs; an error stops the run before it starts. A factory that
// serves every task alike may return one shared policy.
type PolicyFactory func(env gym.EnvSpec, task gym.TaskSpec) (gym.Policy, error)

// Defaults of Options.
const (
	// DefaultMaxNoActionTurns is the number of turns in a row without a
	// tool call after which an episode ends as no_action.
	DefaultMaxNoActionTurns = 3
	// DefaultGrace is added to the hard deadline of an episode beyond its
	// global timeout and its test commands' time: the rest of an
	// evaluation (stopping processes, copying the hidden tests in) and
	// slack for the environment to answer.
	DefaultGrace = time.Minute
)

// maxFactoryErrors bounds the policy errors New reports: a dataset of
// 10,000 tasks without references gets the first ones and a count.
const maxFactoryErrors = 10

// Options configure a Runner.
type Options struct {
	// Config is the loaded config: episode control, task selection,
	// rollout settings, timeouts and plugins. Required. Its environments
	// give each task's test budget; a task the config does not list uses
	// its environment's, or the config's defaults.
	Config *config.Config
	// Envs are the environments to run, in order. Required. An env that
	// implements gym.TaskLister is asked for all its tasks; any other is
	// run over the tasks its Spec lists.
	Envs []gym.Env
	// Policy makes each task's policy. Required.
	Policy PolicyFactory
	// PolicyName and Model are recorded in trajectories and stats.
	PolicyName string
	Model      string
	// Plugins are the loaded plugins; they fire only when
	// Config.Rollout.EnablePlugins is true. Nil means none.
	Plugins *plugin.Set
	// ResultsPath is the results file; the stats file and the trajectory
	// directory are placed relative to it. Required.
	ResultsPath string
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Progress, when set, shows a progress bar there.
	Progress io.Writer
	// Budget caps what the policy may spend on one episode; zero means no
	// cap.
	Budget Budget
	// Cost estimates what usage cost, in USD, for the budget and the
	// seed-format results; nil means no estimate.
	Cost func(gym.Usage) float64
	// ResultsFormat is ResultsSummary (the default when empty) or
	// ResultsSeed.
	ResultsFormat string
	// MaxNoActionTurns defaults to DefaultMaxNoActionTurns.
	MaxNoActionTurns int
	// Grace defaults to DefaultGrace.
	Grace time.Duration
}

// Budget is a per-episode cap on the policy's spending. Before each policy
// call the runner checks the episode's usage so far; once it reached a cap,
// the episode is evaluated as it stands and ends as truncated with
// termination reason gym.ReasonBudget. The turn that crossed the cap has
// already been paid for, so its tool calls still run.
type Budget struct {
	// MaxTokens caps the tokens of an episode (gym.Usage.Tokens); 0 means
	// no cap.
	MaxTokens int
	// MaxCost caps the estimated cost of an episode, in USD, as
	// Options.Cost computes it; 0 means no cap.
	MaxCost float64
}

// spent returns why u exhausts b, or "" when it does not.
func (b Budget) spent(u gym.Usage, cost func(gym.Usage) float64) string {
	if b.MaxTokens > 0 && u.Tokens() >= b.MaxTokens {
		return fmt.Sprintf("token budget spent: %d of %d tokens", u.Tokens(), b.MaxTokens)
	}
	if b.MaxCost > 0 && cost != nil {
		if c := cost(u); c >= b.MaxCost {
			return fmt.Sprintf("cost budget spent: estimated $%.4f of $%g", c, b.MaxCost)
		}
	}
	return ""
}

// Runner runs the episodes of a rollout. Make one with New and call Run
// once.
type Runner struct {
	opts     Options
	cfg      *config.Config
	envs     []*envEntry
	plugins  *plugin.Set
	log      *slog.Logger
	results  string
	statsOut string
	trajDir  string

	// mu guards the fields below, and the state of every envEntry and
	// taskEntry.
	mu sync.Mutex
	// parallel is the most episodes that run at once; plugins may change
	// it.
	parallel int
	// queue holds the episodes not started yet, in the order they start.
	queue       []job
	records     []finishedRecord
	started     int
	runStop     string
	stopped     int
	resumed     int
	unsaved     int
	writeErr    error
	stopReasons map[string]string
	progress    *progress

	// saveMu serialises writes of the results file.
	saveMu sync.Mutex
}

// envEntry is one environment of the run.
type envEntry struct {
	env   gym.Env
	spec  gym.EnvSpec
	id    string
	order int
	plan  EnvPlan
	// tasks are the tasks of the plan, in its order.
	tasks []*taskEntry

	// Episode control state, guarded by Runner.mu.
	started     int
	stopped     bool
	tasksActive int
}

// taskEntry is one task of an environment in the run.
type taskEntry struct {
	id     string
	order  int
	policy gym.Policy
	// evalBudget is the most the evaluation may take.
	evalBudget time.Duration

	// Episode control state, guarded by Runner.mu.
	started    int
	finished   int
	scored     int
	successes  int
	stopReason string
}

// finishedRecord is a finished episode with its place in the schedule.
type finishedRecord struct {
	rec Record
	// seed is the record in the ResultsSeed format, when that is asked.
	seed *SeedRecord
	env  int
	// seq is the episode's position in its environment's schedule.
	seq int
}

// Summary is the outcome of a run.
type Summary struct {
	// Records are the finished episodes, by environment then by their
	// place in its schedule (round by round over its tasks).
	Records []Record
	Stats   Stats
	// ResultsPath, StatsPath and TrajectoryDir are where they were written.
	ResultsPath   string
	StatsPath     string
	TrajectoryDir string
	// EnvIDs are the environments of the run, in order.
	EnvIDs []string
}

// New checks opts, lists each environment's tasks, plans the run and
// makes each task's policy. It starts nothing.
func New(opts Options) (*Runner, error) {
	var errs []error
	if opts.Config == nil {
		errs = append(errs, errors.New("no config"))
	}
	if len(opts.Envs) == 0 {
		errs = append(errs, errors.New("no environments"))
	}
	if opts.Policy == nil {
		errs = append(errs, errors.New("no policy factory"))
	}
	if opts.ResultsPath == "" {
		errs = append(errs, errors.New("no results path"))
	}
	if opts.Budget.MaxTokens < 0 || opts.Budget.MaxCost < 0 {
		errs = append(errs, errors.New("negative budget"))
	}
	if opts.Budget.MaxCost > 0 && opts.Cost == nil {
		errs = append(errs, errors.New("a cost budget needs a cost function"))
	}
	if err := checkResultsFormat(opts.ResultsFormat); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	if opts.MaxNoActionTurns <= 0 {
		opts.MaxNoActionTurns = DefaultMaxNoActionTurns
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := opts.Config
	r := &Runner{
		opts:        opts,
		cfg:         cfg,
		log:         log,
		results:     opts.ResultsPath,
		statsOut:    StatsPath(opts.ResultsPath),
		trajDir:     TrajectoryDir(opts.ResultsPath, cfg.Rollout.TrajectoryOutputPath),
		parallel:    max(1, cfg.Rollout.MaxParallelRollouts),
		stopReasons: map[string]string{},
	}
	if cfg.Rollout.EnablePlugins {
		r.plugins = opts.Plugins
	}
	seen := map[string]bool{}
	var plans []EnvPlan
	policyErrs := 0
	for _, env := range opts.Envs {
		spec := env.Spec()
		if seen[spec.ID] {
			errs = append(errs, fmt.Errorf("environment %s: listed twice", spec.ID))
			continue
		}
		seen[spec.ID] = true
		tasks := r.listTasks(env, spec)
		ids := make([]string, len(tasks))
		byID := make(map[string]gym.TaskSpec, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
			byID[t.ID] = t
		}
		plan, err := PlanEnv(cfg, spec.ID, ids)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plans = append(plans, plan)
		e := &envEntry{env: env, spec: spec, id: spec.ID, order: len(r.envs), plan: plan, tasksActive: len(plan.Tasks)}
		budgets := budgetsOf(cfg, spec.ID)
		for i, id := range plan.Tasks {
			t := &taskEntry{id: id, order: i, evalBudget: budgets(id)}
			pol, err := opts.Policy(spec, byID[id])
			if err != nil {
				if policyErrs++; policyErrs <= maxFactoryErrors {
					errs = append(errs, fmt.Errorf("environment %s: task %s: policy: %w", spec.ID, id, err))
				}
				continue
			}
			t.policy = pol
			e.tasks = append(e.tasks, t)
		}
		if n := len(plan.Tasks); n > 1 && cfg.EpisodeControl.EpisodesPerTask == 0 && plan.Episodes < n {
			log.Warn("max_episodes does not cover every task; set episodes_per_task to run each of them",
				"env", spec.ID, "episodes", plan.Episodes, "tasks", n)
		}
		r.envs = append(r.envs, e)
	}
	if policyErrs > maxFactoryErrors {
		errs = append(errs, fmt.Errorf("... and %d more tasks whose policy failed", policyErrs-maxFactoryErrors))
	}
	if len(errs) == 0 {
		errs = append(errs, checkPlans(cfg, plans))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	return r, nil
}

// listTasks returns the tasks of env: all of them from a gym.TaskLister,
// else those its spec lists. An environment that lists no task is run
// with the empty task id, which resets to its first task.
func (r *Runner) listTasks(env gym.Env, spec gym.EnvSpec) []gym.TaskSpec {
	tasks := spec.Tasks
	if l, ok := env.(gym.TaskLister); ok {
		tasks, _ = l.Tasks(0, -1)
	} else if spec.TaskCount > len(tasks) {
		r.log.Warn("the environment lists only some of its tasks; the run covers those",
			"env", spec.ID, "listed", len(tasks), "tasks", spec.TaskCount)
	}
	if len(tasks) == 0 {
		return []gym.TaskSpec{{}}
	}
	return tasks
}

// budgetsOf returns a function giving the evaluation budget of a task of
// env: its test timeout for each of its test commands (at least one).
func budgetsOf(cfg *config.Config, env string) func(task string) time.Duration {
	ec, ok := cfg.Environment(env)
	if !ok {
		return func(string) time.Duration { return cfg.Timeouts.Test }
	}
	tasks := make(map[string]config.Task, len(ec.Tasks))
	for _, t := range ec.Tasks {
		tasks[t.ID] = t
	}
	return func(id string) time.Duration {
		test, n := ec.Timeouts.Test, len(ec.UnitTests)
		if t, ok := tasks[id]; ok {
			test, n = t.Timeouts.Test, len(t.UnitTests)
		}
		return time.Duration(max(1, n)) * test
	}
}

// job is one episode to run: the index-th episode of a task.
type job struct {
	env   *envEntry
	task  *taskEntry
	index int
	// seq is the job's position in its environment's schedule.
	seq int
}

// Run runs the episodes and writes the outputs. Cancelling ctx stops the
// run cleanly: running episodes are closed and dropped, and what finished
// is written; Run then returns the summary and ctx's error. Any other error
// is a failure to write the outputs.
func (r *Runner) Run(ctx context.Context) (*Summary, error) {
	start := time.Now()
	plan := PlanFor(r.cfg, r.plans(), r.opts.PolicyName)
	runData := map[string]map[string]any{}
	r.mu.Lock()
	r.queue = r.jobs()
	r.mu.Unlock()
	if r.plugins.Wants(plugin.PreRollout) {
		out := r.plugins.Fire(ctx, plugin.Event{Hook: plugin.PreRollout, Plan: &plan})
		runData = mergeOutcome(runData, out)
		if out.Stop {
			r.stopRun("plugin " + out.StoppedBy)
		}
		for _, e := range r.envs {
			r.moreEpisodes(e, out.MoreEpisodes, strings.Join(out.ScheduledBy, ", "))
		}
		r.setParallel(out.Parallel, out.ParallelBy)
	}
	if r.opts.Progress != nil {
		tasks := 0
		for _, e := range r.envs {
			tasks += len(e.tasks)
		}
		r.mu.Lock()
		r.progress = newProgress(r.opts.Progress, Total(PlanFor(r.cfg, r.plans(), r.opts.PolicyName)), tasks, tasks > len(r.envs))
		r.mu.Unlock()
	}
	r.log.Info("rollout started", "environments", len(r.envs), "episodes", Total(plan), "parallel", r.limit(),
		"policy", r.opts.PolicyName, "trajectories", r.trajDir)

	r.schedule(ctx)

	sum := r.summary(ctx, start, runData)
	if r.progress != nil {
		r.progress.finish()
	}
	if err := r.save(); err != nil {
		return sum, err
	}
	if err := WriteJSON(r.statsOut, sum.Stats); err != nil {
		return sum, err
	}
	r.mu.Lock()
	werr := r.writeErr
	r.mu.Unlock()
	if werr != nil {
		return sum, werr
	}
	return sum, ctx.Err()
}

// schedule runs the queued episodes, at most r.parallel at a time, until
// the queue is empty or the run stops, and waits for them. Plugins may
// add episodes to the queue and change r.parallel while it runs, which
// errgroup's fixed limit cannot follow.
func (r *Runner) schedule(ctx context.Context) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	running := 0
	for {
		for ctx.Err() == nil && running < r.limit() {
			j, ok := r.nextJob()
			if !ok {
				break
			}
			running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.runJob(ctx, j)
				done <- struct{}{}
			}()
		}
		if running == 0 {
			break
		}
		<-done
		running--
	}
	wg.Wait()
}

// limit returns the most episodes that may run at once.
func (r *Runner) limit() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.parallel
}

// nextJob takes the next episode to start off the queue, skipping those
// whose environment or task stopped; false when none is left or the run
// stopped.
func (r *Runner) nextJob() (job, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.queue) > 0 && r.runStop == "" {
		j := r.queue[0]
		r.queue = r.queue[1:]
		if !j.env.stopped && j.task.stopReason == "" {
			return j, true
		}
	}
	return job{}, false
}

// moreEpisodes adds n episodes to e's schedule, continuing its
// round-robin over its tasks, at the end of the queue.
func (r *Runner) moreEpisodes(e *envEntry, n int, by string) {
	if n <= 0 || len(e.tasks) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	byOrder := make(map[int]*taskEntry, len(e.tasks))
	for _, t := range e.tasks {
		byOrder[t.order] = t
	}
	m := len(e.plan.Tasks)
	for i := e.plan.Episodes; i < e.plan.Episodes+n; i++ {
		if t := byOrder[i%m]; t != nil {
			r.queue = append(r.queue, job{env: e, task: t, index: i / m, seq: i})
		}
	}
	e.plan.Episodes += n
	if r.progress != nil {
		r.progress.grow(n)
	}
	r.log.Info("plugin scheduled more episodes", "env", e.id, "episodes", n, "plugin", by)
}

// setParallel changes the most episodes that run at once; n <= 0 keeps
// it.
func (r *Runner) setParallel(n int, by string) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n != r.parallel {
		r.log.Info("plugin changed parallelism", "parallel", n, "was", r.parallel, "plugin", by)
		r.parallel = n
	}
}

// plans returns the plan of every environment, in order.
func (r *Runner) plans() []EnvPlan {
	ps := make([]EnvPlan, len(r.envs))
	for i, e := range r.envs {
		ps[i] = e.plan
	}
	return ps
}

// jobs lists the episodes round-robin over the environments: each
// environment's n-th episode comes before any environment's (n+1)-th, and
// within an environment, round by round over its tasks.
func (r *Runner) jobs() []job {
	per := make([][]job, len(r.envs))
	longest := 0
	for i, e := range r.envs {
		byOrder := make(map[int]*taskEntry, len(e.tasks))
		for _, t := range e.tasks {
			byOrder[t.order] = t
		}
		for seq, s := range e.plan.slots() {
			per[i] = append(per[i], job{env: e, task: byOrder[s.task], index: s.index, seq: seq})
		}
		longest = max(longest, len(per[i]))
	}
	var js []job
	for n := 0; n < longest; n++ {
		for _, p := range per {
			if n < len(p) {
				js = append(js, p[n])
			}
		}
	}
	return js
}

func (r *Runner) envIDs() []string {
	ids := make([]string, len(r.envs))
	for i, e := range r.envs {
		ids[i] = e.id
	}
	return ids
}

// runJob runs (or resumes) one episode once it has a slot.
func (r *Runner) runJob(ctx context.Context, j job) {
	if ctx.Err() != nil {
		// The slot came free after the run was stopped.
		return
	}
	name := TrajectoryName(j.env.id, j.task.id, j.index)
	path := filepath.Join(r.trajDir, name)
	log := r.log.With("env", j.env.id, "task_id", j.task.id, "episode", j.index)
	if r.cfg.Rollout.StatePersistenceEnabled {
		t, ok, err := readTrajectory(path)
		if err != nil {
			log.Warn("existing trajectory unreadable; running the episode again", "err", err)
		}
		if ok {
			rec := RecordOf(t, r.relative(path))
			rec.Resumed = true
			r.mu.Lock()
			r.started++
			j.env.started++
			j.task.started++
			r.resumed++
			r.mu.Unlock()
			r.finished(j, rec, t)
			return
		}
	}
	if !r.begin(j) {
		return
	}
	var pre plugin.Outcome
	if r.plugins.Wants(plugin.PreEpisode) {
		settings := r.settings(j)
		pre = r.plugins.Fire(ctx, plugin.Event{Hook: plugin.PreEpisode, Env: j.env.id, Task: j.task.id, Episode: j.index, Environment: &settings})
		r.moreEpisodes(j.env, pre.MoreEpisodes, strings.Join(pre.ScheduledBy, ", "))
		r.setParallel(pre.Parallel, pre.ParallelBy)
		if pre.Stop {
			r.stopEnv(j.env, "plugin "+pre.StoppedBy)
			r.unbegin(j)
			return
		}
	}
	t, err := r.runEpisode(ctx, j, pre)
	if err != nil {
		r.mu.Lock()
		r.stopped++
		r.mu.Unlock()
		log.Info("episode stopped")
		return
	}
	if err := WriteJSON(path, t); err != nil {
		log.Error("write trajectory", "err", err)
		r.mu.Lock()
		r.writeErr = errors.Join(r.writeErr, err)
		r.mu.Unlock()
	}
	er := t.EpisodeResult
	log.Info("episode finished", "reward", er.FinalScore, "success", er.Success,
		"reason", er.TerminatedReason, "error_class", er.ErrorClass, "actions", er.Actions, "duration", time.Duration(er.DurationSeconds*float64(time.Second)).Round(time.Millisecond))
	r.finished(j, RecordOf(t, r.relative(path)), t)
}

// settings returns what the config says of episode j's settings, for
// pre_episode.
func (r *Runner) settings(j job) plugin.EpisodeSettings {
	ec, ok := r.cfg.Environment(j.env.id)
	if !ok {
		return plugin.EpisodeSettings{}
	}
	if tc, ok := ec.Task(j.task.id); ok {
		ec.Prompt, ec.UnitTests, ec.DockerImage, ec.Timeouts, ec.MaxActions = tc.Prompt, tc.UnitTests, tc.DockerImage, tc.Timeouts, tc.MaxActions
	} else if len(ec.Tasks) > 0 || ec.TasksFile != "" || ec.TasksDir != "" {
		// A dataset's task: its prompt is known once it is reset.
		ec.Prompt, ec.UnitTests = "", nil
	}
	return plugin.EpisodeSettings{
		DockerImage:          ec.DockerImage,
		WorkingDirectory:     ec.WorkingDirectory,
		Prompt:               ec.Prompt,
		EnvironmentVariables: ec.EnvironmentVariables,
		UnitTests:            ec.UnitTests,
		MaxActions:           ec.MaxActions,
		GlobalTimeout:        ec.Timeouts.Global.Seconds(),
		CommandTimeout:       ec.Timeouts.Command.Seconds(),
		TestTimeout:          ec.Timeouts.Test.Seconds(),
	}
}

// relative returns path relative to the results file's directory when it
// lies inside it.
func (r *Runner) relative(path string) string {
	rel, err := filepath.Rel(filepath.Dir(r.results), path)
	if err != nil || !filepath.IsLocal(rel) {
		return path
	}
	return rel
}

// begin decides whether episode j may start, and counts it when it does.
func (r *Runner) begin(j job) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runStop != "" || j.env.stopped || j.task.stopReason != "" {
		return false
	}
	if limit := r.cfg.EpisodeControl.SafetyLimit; limit > 0 && r.started >= limit {
		r.runStop = fmt.Sprintf("safety_limit %d reached", limit)
		r.stopReasons["*"] = r.runStop
		r.log.Warn("safety limit reached; no more episodes start", "safety_limit", limit)
		return false
	}
	r.started++
	j.env.started++
	j.task.started++
	return true
}

// unbegin takes back an episode that begin counted but that did not run.
func (r *Runner) unbegin(j job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started--
	j.env.started--
	j.task.started--
}

// finished records a finished episode, applies episode control to its
// task, and rewrites the results file every save_trajectory_interval
// episodes.
func (r *Runner) finished(j job, rec Record, traj *gym.Trajectory) {
	fr := finishedRecord{rec: rec, env: j.env.order, seq: j.seq}
	if r.opts.ResultsFormat == ResultsSeed {
		fr.seed = seedRecordOf(rec, traj, r.opts.Cost)
	}
	r.mu.Lock()
	r.records = append(r.records, fr)
	t := j.task
	t.finished++
	er := rec.EpisodeResult
	if !er.Mask {
		t.scored++
		if er.Success {
			t.successes++
		}
	}
	ec := r.cfg.EpisodeControl
	var stop string
	switch {
	case ec.StopOnSuccess && er.Success:
		stop = "stop_on_success"
	case ec.MinSuccessRate != nil && t.finished >= 2 && t.scored > 0 &&
		float64(t.successes)/float64(t.scored) >= *ec.MinSuccessRate:
		stop = fmt.Sprintf("min_success_rate %.2f reached", *ec.MinSuccessRate)
	}
	if stop != "" {
		r.stopTaskLocked(j.env, t, stop)
	}
	r.unsaved++
	save := r.unsaved >= r.cfg.Rollout.SaveTrajectoryInterval
	if save {
		r.unsaved = 0
	}
	if r.progress != nil {
		r.progress.add(rec, taskKey(j.env.id, t.id))
	}
	r.mu.Unlock()
	if save {
		if err := r.save(); err != nil {
			r.log.Error("write results", "err", err)
		}
	}
}

// stopTaskLocked stops scheduling episodes of task t of e; the first
// reason is kept. Once every task of e stopped, e stops too, with their
// reason when they share one. r.mu must be held.
func (r *Runner) stopTaskLocked(e *envEntry, t *taskEntry, reason string) {
	if t.stopReason != "" {
		return
	}
	t.stopReason = reason
	e.tasksActive--
	r.log.Debug("task stopped", "env", e.id, "task_id", t.id, "reason", reason)
	if e.tasksActive > 0 || e.stopped {
		return
	}
	envReason := reason
	for _, o := range e.tasks {
		if o.stopReason != reason {
			envReason = "every task stopped early"
			break
		}
	}
	r.stopEnvLocked(e, envReason)
}

// stopEnv stops scheduling episodes of env; the first reason is kept.
func (r *Runner) stopEnv(e *envEntry, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopEnvLocked(e, reason)
}

func (r *Runner) stopEnvLocked(e *envEntry, reason string) {
	if e.stopped {
		return
	}
	e.stopped = true
	r.stopReasons[e.id] = reason
	r.log.Info("environment stopped", "env", e.id, "reason", reason)
}

// stopRun stops scheduling episodes altogether.
func (r *Runner) stopRun(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runStop == "" {
		r.runStop = reason
		r.stopReasons["*"] = reason
		r.log.Info("run stopped", "reason", reason)
	}
}

func (r *Runner) runStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runStop != ""
}

// jobStopped reports whether j's environment or task stopped.
func (r *Runner) jobStopped(j job) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return j.env.stopped || j.task.stopReason != ""
}

// sortedFinished returns the finished episodes by environment order, then
// by their place in the environment's schedule.
func (r *Runner) sortedFinished() []finishedRecord {
	r.mu.Lock()
	fs := slices.Clone(r.records)
	r.mu.Unlock()
	slices.SortStableFunc(fs, func(a, b finishedRecord) int {
		if d := a.env - b.env; d != 0 {
			return d
		}
		return a.seq - b.seq
	})
	return fs
}

// sortedRecords returns the records in the order of sortedFinished.
func (r *Runner) sortedRecords() []Record {
	fs := r.sortedFinished()
	recs := make([]Record, len(fs))
	for i, f := range fs {
		recs[i] = f.rec
	}
	return recs
}

// save rewrites the results file in the asked format.
func (r *Runner) save() error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	if r.opts.ResultsFormat != ResultsSeed {
		return WriteJSON(r.results, r.sortedRecords())
	}
	fs := r.sortedFinished()
	recs := make([]*SeedRecord, len(fs))
	for i, f := range fs {
		recs[i] = f.seed
	}
	return WriteJSON(r.results, recs)
}

// summary computes the stats and fires post_rollout.
func (r *Runner) summary(ctx context.Context, start time.Time, runData map[string]map[string]any) *Summary {
	recs := r.sortedRecords()
	stats := Compute(recs, r.plans())
	usage := seedUsage(stats.Overall.Usage, r.opts.Cost)
	stats.TokenUsage = &usage
	r.mu.Lock()
	for _, e := range r.envs {
		for _, t := range e.tasks {
			if t.stopReason == "" {
				continue
			}
			k := taskKey(e.id, t.id)
			ts := stats.Tasks[k]
			ts.StopReason = t.stopReason
			stats.Tasks[k] = ts
		}
	}
	stats.Run = RunInfo{
		Policy:          r.opts.PolicyName,
		Model:           r.opts.Model,
		StartTime:       gym.TimeOf(start),
		EndTime:         gym.TimeOf(time.Now()),
		DurationSeconds: time.Since(start).Seconds(),
		Interrupted:     ctx.Err() != nil,
		Stopped:         r.stopped,
		Resumed:         r.resumed,
	}
	if len(r.stopReasons) > 0 {
		stats.Run.StopReasons = make(map[string]string, len(r.stopReasons))
		for k, v := range r.stopReasons {
			stats.Run.StopReasons[k] = v
		}
	}
	r.mu.Unlock()
	if r.plugins.Wants(plugin.PostRollout) {
		// Plugins get the stats as written, without their own entries.
		out := r.plugins.Fire(context.WithoutCancel(ctx), plugin.Event{Hook: plugin.PostRollout, Stats: stats})
		runData = mergeOutcome(runData, out)
	}
	if ps := r.plugins.Stats(); len(ps) > 0 {
		stats.Plugins = make(map[string]PluginStats, len(ps))
		for name, st := range ps {
			stats.Plugins[name] = PluginStats{Stats: st, Data: runData[name]}
		}
	}
	return &Summary{
		Records:       recs,
		Stats:         stats,
		ResultsPath:   r.results,
		StatsPath:     r.statsOut,
		TrajectoryDir: r.trajDir,
		EnvIDs:        r.envIDs(),
	}
}
