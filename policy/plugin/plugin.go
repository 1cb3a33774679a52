package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// Hook names a point of a run at which plugins are called.
type Hook string

// The hooks, in the order a run fires them.
const (
	PreRollout  Hook = "pre_rollout"
	PreEpisode  Hook = "pre_episode"
	PreAction   Hook = "pre_action"
	PostAction  Hook = "post_action"
	PreTest     Hook = "pre_test"
	PostTest    Hook = "post_test"
	PostEpisode Hook = "post_episode"
	PostRollout Hook = "post_rollout"
)

// AllHooks lists every hook in firing order.
var AllHooks = []Hook{PreRollout, PreEpisode, PreAction, PostAction, PreTest, PostTest, PostEpisode, PostRollout}

// Event is what a plugin sees at one hook. Fields that do not apply to the
// hook are empty; it is sent as JSON to external plugins.
type Event struct {
	Hook Hook `json:"hook"`
	// Env, Task and Episode (0-based, per environment) identify the
	// episode; they are empty in rollout hooks.
	Env       string `json:"env,omitempty"`
	Task      string `json:"task,omitempty"`
	Episode   int    `json:"episode"`
	SessionID string `json:"session_id,omitempty"`
	// Turn is the 1-based policy turn of an action hook.
	Turn int `json:"turn,omitempty"`
	// ToolCall is the call about to run (pre_action) or that ran
	// (post_action).
	ToolCall *gym.ToolCall `json:"tool_call,omitempty"`
	// Result is the outcome of the call (post_action).
	Result *ActionResult `json:"result,omitempty"`
	// Messages is the transcript so far (pre_test).
	Messages []gym.Message `json:"messages,omitempty"`
	// Reason is why the episode ends (pre_test, post_test, post_episode).
	Reason gym.TerminationReason `json:"termination_reason,omitempty"`
	// AfterEvaluation marks a pre_test fired after the environment had
	// already run the tests on its own.
	AfterEvaluation bool `json:"after_evaluation,omitempty"`
	// Evaluation is the hidden tests' verdict (post_test).
	Evaluation *gym.Evaluation `json:"evaluation,omitempty"`
	// Trajectory is the finished episode (post_episode).
	Trajectory *gym.Trajectory `json:"trajectory,omitempty"`
	// Plan is the run's plan (pre_rollout).
	Plan *Plan `json:"plan,omitempty"`
	// Stats is the run's statistics, as written to the stats file
	// (post_rollout).
	Stats any `json:"stats,omitempty"`
	// Score is the episode's reward so far (post_test): the tests' own,
	// or what an earlier plugin set it to.
	Score *float64 `json:"score,omitempty"`
	// Environment is what the runner knows of the episode's settings
	// before it starts (pre_episode), from the config.
	Environment *EpisodeSettings `json:"environment,omitempty"`
}

// EpisodeSettings are an episode's settings as the config gives them:
// the environment's, or its task's when the config lists the task. Times
// are seconds. A task the config does not list (a dataset's) has the
// environment's limits and an empty prompt.
type EpisodeSettings struct {
	DockerImage          string            `json:"docker_image,omitempty"`
	WorkingDirectory     string            `json:"working_directory,omitempty"`
	Prompt               string            `json:"prompt,omitempty"`
	EnvironmentVariables map[string]string `json:"environment_variables,omitempty"`
	UnitTests            []string          `json:"unit_tests,omitempty"`
	MaxActions           int               `json:"max_actions,omitempty"`
	GlobalTimeout        float64           `json:"global_timeout,omitempty"`
	CommandTimeout       float64           `json:"command_timeout,omitempty"`
	TestTimeout          float64           `json:"test_timeout,omitempty"`
}

// ActionResult is the outcome of one tool call.
type ActionResult struct {
	// Output is the tool message the agent receives.
	Output string       `json:"output"`
	Call   gym.CallInfo `json:"call"`
}

// Plan describes a run before it starts.
type Plan struct {
	Environments []PlannedEnv `json:"environments"`
	// SafetyLimit caps the episodes of the whole run.
	SafetyLimit int    `json:"safety_limit"`
	Parallel    int    `json:"parallel"`
	Policy      string `json:"policy"`
}

// PlannedEnv is one environment of a Plan.
type PlannedEnv struct {
	ID string `json:"id"`
	// Episodes is the most episodes the run will start for it.
	Episodes int `json:"episodes"`
	// Tasks is the number of its tasks the run covers; its episodes are
	// spread over them.
	Tasks int `json:"tasks"`
}

// Response is a plugin's answer to one Event. The zero Response changes
// nothing.
type Response struct {
	// Block refuses the call (pre_action only); Reason is shown to the
	// agent.
	Block  bool   `json:"block,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ToolCall replaces the call (pre_action only); its id is ignored and
	// the original id kept.
	ToolCall *gym.ToolCall `json:"tool_call,omitempty"`
	// Data is merged into the plugin's entry of the trajectory (episode
	// hooks) or of the statistics (rollout hooks).
	Data map[string]any `json:"data,omitempty"`
	// Stop ends the scheduling of episodes: of the event's environment, or
	// of the whole run for rollout hooks. Running episodes finish.
	Stop bool `json:"stop,omitempty"`
	// Score replaces the episode's reward (post_test only; a finite
	// number). The trajectory keeps the tests' own reward beside it and
	// names the plugins that changed it; statistics use the new one.
	// Success stays the tests' verdict.
	Score *float64 `json:"score,omitempty"`
	// Suggestions are appended to the "suggestions" list of the plugin's
	// data (any hook).
	Suggestions []string `json:"suggestions,omitempty"`
	// Episode changes the episode about to start (pre_episode only).
	Episode *EpisodeChange `json:"episode,omitempty"`
	// MoreEpisodes schedules that many more episodes of the event's
	// environment, or of every environment in pre_rollout (pre_rollout,
	// pre_episode and post_episode only). They continue the environment's
	// round-robin over its tasks and obey episode control and the
	// safety_limit like the planned ones.
	MoreEpisodes int `json:"more_episodes,omitempty"`
	// Parallel sets the most episodes that run at once from now on
	// (pre_rollout, pre_episode and post_episode only); running episodes
	// are never stopped to honour a lower value.
	Parallel int `json:"parallel,omitempty"`
}

// EpisodeChange is what a pre_episode answer changes in the episode about
// to start. Nil fields change nothing. Limits can only tighten what the
// environment allows: a larger value than the environment's is an error.
type EpisodeChange struct {
	// Prompt replaces the task's prompt (the first user message the
	// policy sees).
	Prompt *string `json:"prompt,omitempty"`
	// EnvironmentVariables are set in the episode's sandbox, over the
	// environment's own (reset option environment_variables).
	EnvironmentVariables map[string]string `json:"environment_variables,omitempty"`
	// MaxActions lowers the action limit.
	MaxActions *int `json:"max_actions,omitempty"`
	// GlobalTimeout lowers the episode's time budget, in seconds: the
	// runner evaluates the episode as timeout when it runs out.
	GlobalTimeout *float64 `json:"global_timeout,omitempty"`
	// CommandTimeout lowers the time of each execute_command call, in
	// seconds: calls without a timeout, or with a larger one, get this
	// one.
	CommandTimeout *float64 `json:"command_timeout,omitempty"`
}

// merge applies o's fields over c's.
func (c *EpisodeChange) merge(o *EpisodeChange) {
	if o.Prompt != nil {
		c.Prompt = o.Prompt
	}
	for k, v := range o.EnvironmentVariables {
		if c.EnvironmentVariables == nil {
			c.EnvironmentVariables = map[string]string{}
		}
		c.EnvironmentVariables[k] = v
	}
	if o.MaxActions != nil {
		c.MaxActions = o.MaxActions
	}
	if o.GlobalTimeout != nil {
		c.GlobalTimeout = o.GlobalTimeout
	}
	if o.CommandTimeout != nil {
		c.CommandTimeout = o.CommandTimeout
	}
}

// Plugin is one loaded plugin. Handle is called concurrently by many
// episodes and must be safe for that; it is called only for the hooks
// Hooks returns, with a context that carries the plugin's timeout. An
// error is logged and counted, and the run continues as if Handle had
// returned the zero Response.
type Plugin interface {
	// Name is the plugin's name in the config.
	Name() string
	// Hooks lists the hooks the plugin handles.
	Hooks() []Hook
	// Handle answers one event. It must not modify ev.
	Handle(ctx context.Context, ev *Event) (Response, error)
}

// Failure is one failed plugin call.
type Failure struct {
	Plugin string `json:"plugin"`
	Hook   Hook   `json:"hook"`
	Error  string `json:"error"`
}

// Outcome is the combined answer of every plugin to one event.
type Outcome struct {
	// Blocked is set when a plugin blocked the call; BlockedBy names it.
	Blocked   bool
	BlockedBy string
	Reason    string
	// ToolCall is the call after every replacement, nil when unchanged;
	// ModifiedBy names the plugins that replaced it.
	ToolCall   *gym.ToolCall
	ModifiedBy []string
	// Stop is set when a plugin asked to stop; StoppedBy names it.
	Stop      bool
	StoppedBy string
	// Score is the episode's new reward (post_test), nil when unchanged;
	// ScoredBy names the plugins that set it, in order (the last one's
	// stands).
	Score    *float64
	ScoredBy []string
	// Episode is every plugin's changes to the episode about to start
	// (pre_episode), later plugins' fields over earlier ones'; nil when
	// none. EpisodeChangedBy names the plugins that changed it.
	Episode          *EpisodeChange
	EpisodeChangedBy []string
	// MoreEpisodes is the sum of the episodes the plugins scheduled;
	// ScheduledBy names the plugins.
	MoreEpisodes int
	ScheduledBy  []string
	// Parallel is the parallelism the last plugin to set it asked for,
	// 0 when none did; ParallelBy names it.
	Parallel   int
	ParallelBy string
	// Data holds each answering plugin's data by plugin name.
	Data map[string]map[string]any
	// Failures lists the plugins that failed.
	Failures []Failure
}

// Stats counts the calls of one plugin over a run.
type Stats struct {
	Calls    int `json:"calls"`
	Failures int `json:"failures"`
	// Blocks and Stops count the answers that blocked a call or stopped
	// scheduling.
	Blocks int `json:"blocks,omitempty"`
	Stops  int `json:"stops,omitempty"`
	// Scores counts the answers that changed an episode's reward.
	Scores int `json:"scores,omitempty"`
	// TotalSeconds is the time spent in the plugin.
	TotalSeconds float64 `json:"total_seconds"`
	// LastError is the most recent failure.
	LastError string `json:"last_error,omitempty"`
}

// Set is the enabled plugins of a run, in config order. A nil *Set has no
// plugins. It is safe for concurrent use.
type Set struct {
	plugins  []entry
	log      *slog.Logger
	disabled []string

	// mu guards the field below.
	mu    sync.Mutex
	stats map[string]*Stats
}

type entry struct {
	p       Plugin
	hooks   map[Hook]bool
	timeout time.Duration
}

// builtins maps the name of each built-in plugin to its constructor, which
// decodes and checks the plugin's config strictly.
var builtins = map[string]func(raw []byte) (Plugin, error){
	SafetyFilterName:       newSafetyFilter,
	PerformanceRolloutName: newPerformanceRollout,
	TrajectoryAnalysisName: newTrajectoryAnalysis,
}

// SeedAliases maps the class names of Real Work's built-in plugins, as its
// users list them in "plugins", to the built-ins that do their job.
var SeedAliases = map[string]string{
	"SafetyFilterPlugin":            SafetyFilterName,
	"PerformanceBasedRolloutPlugin": PerformanceRolloutName,
	"TrajectoryAnalysisPlugin":      TrajectoryAnalysisName,
}

// Builtins returns the names of the built-in plugins, sorted.
func Builtins() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Load builds the plugins of cfgs, whose relative command paths resolve
// against dir (the config's directory). Every entry is checked, enabled or
// not, and every problem is reported at once; disabled entries are not
// part of the Set. It starts nothing.
func Load(cfgs []config.Plugin, dir string, logger *slog.Logger) (*Set, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Set{log: logger, stats: map[string]*Stats{}}
	var errs []error
	seen := map[string]int{}
	for i, c := range cfgs {
		where := fmt.Sprintf("plugins[%d] (%s)", i, c.Name)
		if canon, ok := SeedAliases[c.Name]; ok && len(c.Command) == 0 {
			// The plugin goes by its own name from here on: in the
			// trajectories' data, the stats and the hooks' messages.
			logger.Info("plugin: seed class name", "plugin", c.Name, "builtin", canon)
			c.Name = canon
		}
		if j, dup := seen[c.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicate name (also plugins[%d])", where, j))
		}
		seen[c.Name] = i
		p, hooks, err := build(c, dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if !c.Enabled {
			s.disabled = append(s.disabled, c.Name)
			continue
		}
		timeout := c.Timeout
		if timeout <= 0 {
			timeout = config.DefaultPluginTimeout
		}
		s.plugins = append(s.plugins, entry{p: p, hooks: hooks, timeout: timeout})
		s.stats[c.Name] = &Stats{}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	return s, nil
}

// build makes one plugin and the set of hooks it is called for.
func build(c config.Plugin, dir string) (Plugin, map[Hook]bool, error) {
	var errs []error
	hooks := map[Hook]bool{}
	for _, h := range c.Hooks {
		if !slices.Contains(AllHooks, Hook(h)) {
			errs = append(errs, fmt.Errorf("hooks: unknown hook %q (want one of %s)", h, hookList()))
			continue
		}
		hooks[Hook(h)] = true
	}
	var p Plugin
	if len(c.Command) > 0 {
		ext, err := newExternal(c, dir)
		if err != nil {
			errs = append(errs, err)
		}
		p = ext
	} else if IsModuleName(c.Name) {
		if !c.Enabled {
			// A disabled module is not imported: it may need what this
			// machine lacks.
			return nil, nil, errors.Join(errs...)
		}
		mod, err := newModule(c, dir, c.Timeout)
		if err != nil {
			errs = append(errs, err)
		} else {
			p = mod
		}
	} else {
		mk, ok := builtins[c.Name]
		if !ok {
			errs = append(errs, gym.Classify(fmt.Errorf("unknown plugin %q: the built-ins are %s; give a command for an external plugin, "+
				"or a Python module's dotted path (package.module) for a Real Work plugin module",
				c.Name, strings.Join(Builtins(), ", ")), gym.ClassInvalidArgument))
		} else {
			var err error
			if p, err = mk(c.Config); err != nil {
				errs = append(errs, fmt.Errorf("config: %w", err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	native := p.Hooks()
	if len(hooks) == 0 {
		for _, h := range native {
			hooks[h] = true
		}
	} else if len(c.Command) == 0 {
		// A built-in or a module runs only its own hooks; hooks may
		// narrow them.
		for h := range hooks {
			if !slices.Contains(native, h) {
				return nil, nil, fmt.Errorf("hooks: %s does not handle %s (it handles %s)", c.Name, h, joinHooks(native))
			}
		}
	}
	return p, hooks, nil
}

func hookList() string { return joinHooks(AllHooks) }

func joinHooks(hs []Hook) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = string(h)
	}
	return strings.Join(s, ", ")
}

// Close releases what the plugins hold between calls (a module plugin's
// state directory). Call it once the run is over; a nil *Set has nothing
// to close.
func (s *Set) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, e := range s.plugins {
		if c, ok := e.p.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("plugin %s: close: %w", e.p.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Names returns the names of the enabled plugins, in config order.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	names := make([]string, len(s.plugins))
	for i, e := range s.plugins {
		names[i] = e.p.Name()
	}
	return names
}

// Disabled returns the names of the configured plugins that are disabled.
func (s *Set) Disabled() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.disabled)
}

// HooksOf returns the hooks the named plugin is called for, in firing
// order.
func (s *Set) HooksOf(name string) []Hook {
	if s == nil {
		return nil
	}
	for _, e := range s.plugins {
		if e.p.Name() == name {
			var hs []Hook
			for _, h := range AllHooks {
				if e.hooks[h] {
					hs = append(hs, h)
				}
			}
			return hs
		}
	}
	return nil
}

// Wants reports whether any plugin handles hook h, so a caller can skip
// building an expensive event.
func (s *Set) Wants(h Hook) bool {
	if s == nil {
		return false
	}
	for _, e := range s.plugins {
		if e.hooks[h] {
			return true
		}
	}
	return false
}

// Fire calls every plugin that handles ev.Hook, in config order, and
// combines their answers. In pre_action each plugin sees the call as the
// plugins before it left it, and the first block ends the round. Failures
// are logged and returned in the Outcome, never as an error.
func (s *Set) Fire(ctx context.Context, ev Event) Outcome {
	var out Outcome
	if s == nil {
		return out
	}
	for _, e := range s.plugins {
		if !e.hooks[ev.Hook] {
			continue
		}
		if ctx.Err() != nil {
			return out
		}
		name := e.p.Name()
		cur := ev
		if out.ToolCall != nil {
			tc := *out.ToolCall
			cur.ToolCall = &tc
		}
		if out.Score != nil {
			sc := *out.Score
			cur.Score = &sc
		}
		cctx, cancel := context.WithTimeout(ctx, e.timeout)
		start := time.Now()
		resp, err := e.p.Handle(cctx, &cur)
		took := time.Since(start)
		cancel()
		if err == nil {
			err = checkResponse(ev.Hook, resp)
		}
		s.mu.Lock()
		st := s.stats[name]
		st.Calls++
		st.TotalSeconds += took.Seconds()
		if err != nil {
			st.Failures++
			st.LastError = err.Error()
		} else {
			if resp.Block {
				st.Blocks++
			}
			if resp.Stop {
				st.Stops++
			}
			if resp.Score != nil {
				st.Scores++
			}
		}
		s.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				// The run is stopping; the plugin did not fail.
				return out
			}
			s.log.Warn("plugin failed", "plugin", name, "hook", ev.Hook, "env", ev.Env, "episode", ev.Episode, "err", err)
			out.Failures = append(out.Failures, Failure{Plugin: name, Hook: ev.Hook, Error: err.Error()})
			continue
		}
		if data := dataOf(resp); len(data) > 0 {
			if out.Data == nil {
				out.Data = map[string]map[string]any{}
			}
			out.Data[name] = data
		}
		if resp.Stop && !out.Stop {
			out.Stop, out.StoppedBy = true, name
		}
		if resp.Score != nil {
			sc := *resp.Score
			out.Score = &sc
			out.ScoredBy = append(out.ScoredBy, name)
		}
		if resp.Episode != nil {
			if out.Episode == nil {
				out.Episode = &EpisodeChange{}
			}
			out.Episode.merge(resp.Episode)
			out.EpisodeChangedBy = append(out.EpisodeChangedBy, name)
		}
		if resp.MoreEpisodes > 0 {
			out.MoreEpisodes += resp.MoreEpisodes
			out.ScheduledBy = append(out.ScheduledBy, name)
		}
		if resp.Parallel > 0 {
			out.Parallel, out.ParallelBy = resp.Parallel, name
		}
		if ev.Hook != PreAction || ev.ToolCall == nil {
			continue
		}
		if resp.Block {
			out.Blocked, out.BlockedBy, out.Reason = true, name, resp.Reason
			if out.Reason == "" {
				out.Reason = "refused by plugin " + name
			}
			return out
		}
		if resp.ToolCall != nil {
			tc := *resp.ToolCall
			tc.ID = ev.ToolCall.ID
			if tc.Type == "" {
				tc.Type = "function"
			}
			out.ToolCall = &tc
			out.ModifiedBy = append(out.ModifiedBy, name)
		}
	}
	return out
}

// MaxMoreEpisodes bounds the more_episodes of one answer.
const MaxMoreEpisodes = 10000

// checkResponse rejects answers that make no sense for the hook.
func checkResponse(h Hook, r Response) error {
	var errs []error
	if h != PreAction && (r.Block || r.ToolCall != nil) {
		errs = append(errs, fmt.Errorf("answered block or tool_call to %s; only pre_action may", h))
	}
	if r.ToolCall != nil && r.ToolCall.Function.Name == "" {
		errs = append(errs, errors.New("answered a tool_call without a function name"))
	}
	if r.Score != nil {
		if h != PostTest {
			errs = append(errs, fmt.Errorf("answered score to %s; only post_test may", h))
		} else if math.IsNaN(*r.Score) || math.IsInf(*r.Score, 0) {
			errs = append(errs, fmt.Errorf("answered score %v; it must be a finite number", *r.Score))
		}
	}
	if r.Episode != nil {
		if h != PreEpisode {
			errs = append(errs, fmt.Errorf("answered episode to %s; only pre_episode may", h))
		} else {
			errs = append(errs, r.Episode.check())
		}
	}
	scheduling := h == PreRollout || h == PreEpisode || h == PostEpisode
	if (r.MoreEpisodes != 0 || r.Parallel != 0) && !scheduling {
		errs = append(errs, fmt.Errorf("answered more_episodes or parallel to %s; only pre_rollout, pre_episode and post_episode may", h))
	}
	if r.MoreEpisodes < 0 || r.MoreEpisodes > MaxMoreEpisodes {
		errs = append(errs, fmt.Errorf("answered more_episodes %d; it must be in [0, %d]", r.MoreEpisodes, MaxMoreEpisodes))
	}
	if r.Parallel < 0 {
		errs = append(errs, fmt.Errorf("answered parallel %d; it must be positive", r.Parallel))
	}
	return errors.Join(errs...)
}

// check rejects changes that cannot apply to any episode.
func (c *EpisodeChange) check() error {
	var errs []error
	if c.MaxActions != nil && *c.MaxActions < 1 {
		errs = append(errs, fmt.Errorf("episode.max_actions %d must be at least 1", *c.MaxActions))
	}
	for name, v := range map[string]*float64{"global_timeout": c.GlobalTimeout, "command_timeout": c.CommandTimeout} {
		if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0) || *v <= 0) {
			errs = append(errs, fmt.Errorf("episode.%s %v must be a positive number of seconds", name, *v))
		}
	}
	for k := range c.EnvironmentVariables {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			errs = append(errs, fmt.Errorf("episode.environment_variables: bad name %q", k))
		}
	}
	return errors.Join(errs...)
}

// dataOf returns the data an answer attaches: its data, with its
// suggestions under "suggestions".
func dataOf(r Response) map[string]any {
	if len(r.Suggestions) == 0 {
		return r.Data
	}
	data := make(map[string]any, len(r.Data)+1)
	for k, v := range r.Data {
		data[k] = v
	}
	data["suggestions"] = slices.Clone(r.Suggestions)
	return data
}

// Stats returns the call counts of every enabled plugin by name.
func (s *Set) Stats() map[string]Stats {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Stats, len(s.stats))
	for n, st := range s.stats {
		out[n] = *st
	}
	return out
}
