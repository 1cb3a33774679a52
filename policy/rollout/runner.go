package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/plugin"
)

// PolicyFactory returns the policy for the episodes of one environment. It
// is called once per environment, before anything runs; an error stops the
// run before it starts.
type PolicyFactory func(spec gym.EnvSpec) (gym.Policy, error)

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

// Options configure a Runner.
type Options struct {
	// Config is the loaded config: episode control, rollout settings,
	// timeouts and plugins. Required. Its environments give each env's test
	// budget; an env the config does not list uses the config's defaults.
	Config *config.Config
	// Envs are the environments to run, in order. Required.
	Envs []gym.Env
	// Policy makes each environment's policy. Required.
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
	// MaxNoActionTurns defaults to DefaultMaxNoActionTurns.
	MaxNoActionTurns int
	// Grace defaults to DefaultGrace.
	Grace time.Duration
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
	parallel int

	// mu guards the fields below.
	mu          sync.Mutex
	records     []Record
	started     int
	envState    map[string]*envState
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
	env    gym.Env
	id     string
	task   string
	policy gym.Policy
	// evalBudget is the most the evaluation may take.
	evalBudget time.Duration
}

// envState is the episode control state of one environment.
type envState struct {
	started   int
	finished  int
	scored    int
	successes int
	stopped   bool
}

// Summary is the outcome of a run.
type Summary struct {
	// Records are the finished episodes, by environment then episode.
	Records []Record
	Stats   Stats
	// ResultsPath, StatsPath and TrajectoryDir are where they were written.
	ResultsPath   string
	StatsPath     string
	TrajectoryDir string
	// EnvIDs are the environments of the run, in order.
	EnvIDs []string
}

// New checks opts and makes each environment's policy. It starts nothing.
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
		envState:    map[string]*envState{},
		stopReasons: map[string]string{},
	}
	if cfg.Rollout.EnablePlugins {
		r.plugins = opts.Plugins
	}
	seen := map[string]bool{}
	for _, env := range opts.Envs {
		spec := env.Spec()
		if seen[spec.ID] {
			errs = append(errs, fmt.Errorf("environment %s: listed twice", spec.ID))
			continue
		}
		seen[spec.ID] = true
		e := &envEntry{env: env, id: spec.ID}
		if len(spec.Tasks) > 0 {
			e.task = spec.Tasks[0].ID
		}
		test, n := cfg.Timeouts.Test, 1
		if ec, ok := cfg.Environment(spec.ID); ok {
			test, n = ec.Timeouts.Test, max(1, len(ec.UnitTests))
		}
		e.evalBudget = time.Duration(n) * test
		pol, err := opts.Policy(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("environment %s: policy: %w", spec.ID, err))
			continue
		}
		e.policy = pol
		r.envs = append(r.envs, e)
		r.envState[spec.ID] = &envState{}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	return r, nil
}

// PlanFor returns the plan of a run of cfg over the given environments.
func PlanFor(cfg *config.Config, envIDs []string, policyName string) plugin.Plan {
	p := plugin.Plan{SafetyLimit: cfg.EpisodeControl.SafetyLimit, Parallel: cfg.Rollout.MaxParallelRollouts, Policy: policyName}
	for _, id := range envIDs {
		p.Environments = append(p.Environments, plugin.PlannedEnv{ID: id, Episodes: cfg.EpisodeControl.EpisodesFor()})
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

// job is one episode to run.
type job struct {
	env   *envEntry
	index int
}

// Run runs the episodes and writes the outputs. Cancelling ctx stops the
// run cleanly: running episodes are closed and dropped, and what finished
// is written; Run then returns the summary and ctx's error. Any other error
// is a failure to write the outputs.
func (r *Runner) Run(ctx context.Context) (*Summary, error) {
	start := time.Now()
	ids := r.envIDs()
	plan := PlanFor(r.cfg, ids, r.opts.PolicyName)
	runData := map[string]map[string]any{}
	if r.plugins.Wants(plugin.PreRollout) {
		out := r.plugins.Fire(ctx, plugin.Event{Hook: plugin.PreRollout, Plan: &plan})
		runData = mergeOutcome(runData, out)
		if out.Stop {
			r.stopRun("plugin " + out.StoppedBy)
		}
	}
	if r.opts.Progress != nil {
		r.progress = newProgress(r.opts.Progress, Total(plan))
	}
	r.log.Info("rollout started", "environments", len(ids), "episodes", Total(plan), "parallel", r.parallel,
		"policy", r.opts.PolicyName, "trajectories", r.trajDir)

	g := new(errgroup.Group)
	g.SetLimit(r.parallel)
	for _, j := range r.jobs() {
		if ctx.Err() != nil || r.runStopped() {
			break
		}
		if r.envStopped(j.env.id) {
			continue
		}
		g.Go(func() error {
			r.runJob(ctx, j)
			return nil
		})
	}
	g.Wait()

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

// jobs lists the episodes round-robin over the environments.
func (r *Runner) jobs() []job {
	n := r.cfg.EpisodeControl.EpisodesFor()
	var js []job
	for i := 0; i < n; i++ {
		for _, e := range r.envs {
			js = append(js, job{env: e, index: i})
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
	name := TrajectoryName(j.env.id, j.index)
	path := filepath.Join(r.trajDir, name)
	if r.cfg.Rollout.StatePersistenceEnabled {
		t, ok, err := readTrajectory(path)
		if err != nil {
			r.log.Warn("existing trajectory unreadable; running the episode again", "env", j.env.id, "episode", j.index, "err", err)
		}
		if ok {
			rec := recordOf(t, r.relative(path))
			rec.Resumed = true
			r.mu.Lock()
			r.started++
			r.envState[j.env.id].started++
			r.resumed++
			r.mu.Unlock()
			r.finished(rec)
			return
		}
	}
	if !r.begin(j) {
		return
	}
	var preData map[string]map[string]any
	if r.plugins.Wants(plugin.PreEpisode) {
		out := r.plugins.Fire(ctx, plugin.Event{Hook: plugin.PreEpisode, Env: j.env.id, Task: j.env.task, Episode: j.index})
		preData = mergeOutcome(nil, out)
		if out.Stop {
			r.stopEnv(j.env.id, "plugin "+out.StoppedBy)
			r.unbegin(j)
			return
		}
	}
	t, err := r.runEpisode(ctx, j.env, j.index, preData)
	if err != nil {
		r.mu.Lock()
		r.stopped++
		r.mu.Unlock()
		r.log.Info("episode stopped", "env", j.env.id, "episode", j.index)
		return
	}
	if err := WriteJSON(path, t); err != nil {
		r.log.Error("write trajectory", "env", j.env.id, "episode", j.index, "err", err)
		r.mu.Lock()
		r.writeErr = errors.Join(r.writeErr, err)
		r.mu.Unlock()
	}
	er := t.EpisodeResult
	r.log.Info("episode finished", "env", j.env.id, "episode", j.index, "reward", er.FinalScore, "success", er.Success,
		"reason", er.TerminatedReason, "error_class", er.ErrorClass, "actions", er.Actions, "duration", time.Duration(er.DurationSeconds*float64(time.Second)).Round(time.Millisecond))
	r.finished(recordOf(t, r.relative(path)))
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
	st := r.envState[j.env.id]
	if r.runStop != "" || st.stopped {
		return false
	}
	if limit := r.cfg.EpisodeControl.SafetyLimit; limit > 0 && r.started >= limit {
		r.runStop = fmt.Sprintf("safety_limit %d reached", limit)
		r.stopReasons["*"] = r.runStop
		r.log.Warn("safety limit reached; no more episodes start", "safety_limit", limit)
		return false
	}
	r.started++
	st.started++
	return true
}

// unbegin takes back an episode that begin counted but that did not run.
func (r *Runner) unbegin(j job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started--
	r.envState[j.env.id].started--
}

// finished records a finished episode, applies episode control, and
// rewrites the results file every save_trajectory_interval episodes.
func (r *Runner) finished(rec Record) {
	r.mu.Lock()
	r.records = append(r.records, rec)
	st := r.envState[rec.EnvironmentID]
	st.finished++
	er := rec.EpisodeResult
	if !er.Mask {
		st.scored++
		if er.Success {
			st.successes++
		}
	}
	ec := r.cfg.EpisodeControl
	var stop string
	switch {
	case ec.StopOnSuccess && er.Success:
		stop = "stop_on_success"
	case ec.MinSuccessRate != nil && st.finished >= 2 && st.scored > 0 &&
		float64(st.successes)/float64(st.scored) >= *ec.MinSuccessRate:
		stop = fmt.Sprintf("min_success_rate %.2f reached", *ec.MinSuccessRate)
	}
	r.unsaved++
	save := r.unsaved >= r.cfg.Rollout.SaveTrajectoryInterval
	if save {
		r.unsaved = 0
	}
	if r.progress != nil {
		r.progress.add(rec)
	}
	r.mu.Unlock()
	if stop != "" {
		r.stopEnv(rec.EnvironmentID, stop)
	}
	if save {
		if err := r.save(); err != nil {
			r.log.Error("write results", "err", err)
		}
	}
}

// stopEnv stops scheduling episodes of env; the first reason is kept.
func (r *Runner) stopEnv(env, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.envState[env]
	if !ok || st.stopped {
		return
	}
	st.stopped = true
	r.stopReasons[env] = reason
	r.log.Info("environment stopped", "env", env, "reason", reason)
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

func (r *Runner) envStopped(env string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.envState[env].stopped
}

// sortedRecords returns the records by environment order, then episode.
func (r *Runner) sortedRecords() []Record {
	r.mu.Lock()
	recs := slices.Clone(r.records)
	r.mu.Unlock()
	order := map[string]int{}
	for i, e := range r.envs {
		order[e.id] = i
	}
	slices.SortStableFunc(recs, func(a, b Record) int {
		if d := order[a.EnvironmentID] - order[b.EnvironmentID]; d != 0 {
			return d
		}
		return a.Episode - b.Episode
	})
	if recs == nil {
		recs = []Record{}
	}
	return recs
}

// save rewrites the results file.
func (r *Runner) save() error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	return WriteJSON(r.results, r.sortedRecords())
}

// summary computes the stats and fires post_rollout.
func (r *Runner) summary(ctx context.Context, start time.Time, runData map[string]map[string]any) *Summary {
	recs := r.sortedRecords()
	ids := r.envIDs()
	overall, perEnv := Compute(recs, ids)
	r.mu.Lock()
	stats := Stats{
		Overall:      overall,
		Environments: perEnv,
		Run: RunInfo{
			Policy:          r.opts.PolicyName,
			Model:           r.opts.Model,
			StartTime:       start,
			EndTime:         time.Now(),
			DurationSeconds: time.Since(start).Seconds(),
			Interrupted:     ctx.Err() != nil,
			Stopped:         r.stopped,
			Resumed:         r.resumed,
		},
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
		EnvIDs:        ids,
	}
}
