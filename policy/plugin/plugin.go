package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	} else {
		mk, ok := builtins[c.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown plugin %q: the built-ins are %s; give a command for an external plugin",
				c.Name, strings.Join(Builtins(), ", ")))
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
		// A built-in runs only its own hooks; hooks may narrow them.
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
		if len(resp.Data) > 0 {
			if out.Data == nil {
				out.Data = map[string]map[string]any{}
			}
			out.Data[name] = resp.Data
		}
		if resp.Stop && !out.Stop {
			out.Stop, out.StoppedBy = true, name
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

// checkResponse rejects answers that make no sense for the hook.
func checkResponse(h Hook, r Response) error {
	if h != PreAction && (r.Block || r.ToolCall != nil) {
		return fmt.Errorf("answered block or tool_call to %s; only pre_action may", h)
	}
	if r.ToolCall != nil && r.ToolCall.Function.Name == "" {
		return errors.New("answered a tool_call without a function name")
	}
	return nil
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
