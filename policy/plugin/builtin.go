package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/gymserver/gymserver/gym"
)

// Names of the built-in plugins.
const (
	SafetyFilterName       = "safety_filter"
	PerformanceRolloutName = "performance_based_rollout"
	TrajectoryAnalysisName = "trajectory_analysis"
)

// decodeConfig strictly decodes a plugin's config object into v; an empty
// config leaves v as it is.
func decodeConfig(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return nil
}

// Rule is one safety_filter rule: a regular expression (RE2 syntax) matched
// against the command of execute_command calls.
type Rule struct {
	Name    string `json:"name"`
	Pattern string `json:"pattern"`
	// Reason is told to the agent when the rule blocks a call.
	Reason string `json:"reason"`
	re     *regexp.Regexp
}

// DefaultRules are the safety_filter's built-in rules. They are anchored
// on word and command boundaries: `reboot` is refused but `./reboot_test.sh`
// and `echo reboot` are not; `rm -rf /` is refused but `rm -rf ./build` is
// not.
var DefaultRules = []Rule{
	{Name: "delete_root", Pattern: `\brm\s+(-\S+\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-\S+\s+)*(/\*?|~/?|\$HOME/?|/(bin|boot|dev|etc|lib|proc|sys|usr|var)/?)(\s|[;&|)]|$)`,
		Reason: "recursive deletion of the root, home or a system directory"},
	{Name: "mkfs", Pattern: `\bmkfs(\.\w+)?\b`, Reason: "formatting a filesystem"},
	{Name: "raw_disk_write", Pattern: `(\bdd\b[^;&|]*\bof=/dev/(sd|hd|vd|xvd|nvme|mmcblk)|>\s*/dev/(sd|hd|vd|xvd|nvme|mmcblk))`,
		Reason: "writing to a raw disk device"},
	{Name: "power", Pattern: `(^|[;&|(]\s*|\bsudo\s+)(shutdown|reboot|halt|poweroff)\b`, Reason: "shutting down or rebooting the machine"},
	{Name: "fork_bomb", Pattern: `:\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:`, Reason: "a fork bomb"},
	{Name: "chmod_root", Pattern: `\bchmod\s+(-\S+\s+)*-?[0-7]?777\s+/(\s|$)|\bchmod\s+-R\s+\S+\s+/(\s|$)`,
		Reason: "changing the permissions of the whole filesystem"},
	{Name: "pipe_to_shell", Pattern: `\b(curl|wget)\b[^;&|]*\|\s*(sudo\s+)?(ba|z|da)?sh\b`, Reason: "running a downloaded script"},
}

// safetyFilter blocks execute_command calls whose command matches a rule.
type safetyFilter struct {
	rules []Rule
}

var (
	_ Plugin = (*safetyFilter)(nil)
	_ Plugin = (*performanceRollout)(nil)
	_ Plugin = trajectoryAnalysis{}
)

// safetyConfig is the config of safety_filter.
type safetyConfig struct {
	// Patterns are extra rules: {"name", "pattern", "reason"} objects or
	// bare pattern strings.
	Patterns []json.RawMessage `json:"patterns"`
	// UseDefaults keeps DefaultRules (default true).
	UseDefaults *bool `json:"use_defaults"`
}

func newSafetyFilter(raw []byte) (Plugin, error) {
	var c safetyConfig
	if err := decodeConfig(raw, &c); err != nil {
		return nil, err
	}
	var rules []Rule
	if c.UseDefaults == nil || *c.UseDefaults {
		rules = append(rules, DefaultRules...)
	}
	var errs []error
	for i, p := range c.Patterns {
		var r Rule
		var s string
		if json.Unmarshal(p, &s) == nil {
			r = Rule{Pattern: s}
		} else {
			dec := json.NewDecoder(bytes.NewReader(p))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&r); err != nil {
				errs = append(errs, fmt.Errorf("patterns[%d]: want a string or {name, pattern, reason}: %w", i, err))
				continue
			}
		}
		if r.Name == "" {
			r.Name = fmt.Sprintf("pattern_%d", i)
		}
		if r.Reason == "" {
			r.Reason = "the command matches a forbidden pattern"
		}
		rules = append(rules, r)
	}
	for i := range rules {
		re, err := regexp.Compile(rules[i].Pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %s: %w", rules[i].Name, err))
			continue
		}
		rules[i].re = re
	}
	if len(rules) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no rules: use_defaults is false and patterns is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &safetyFilter{rules: rules}, nil
}

func (f *safetyFilter) Name() string  { return SafetyFilterName }
func (f *safetyFilter) Hooks() []Hook { return []Hook{PreAction} }

// Handle blocks a command that matches a rule. Arguments that do not decode
// are let through: the environment answers them with an agent_error.
func (f *safetyFilter) Handle(_ context.Context, ev *Event) (Response, error) {
	if ev.ToolCall == nil || ev.ToolCall.Function.Name != gym.ToolExecuteCommand {
		return Response{}, nil
	}
	var args gym.ExecuteCommandArgs
	if json.Unmarshal([]byte(ev.ToolCall.Function.Arguments), &args) != nil {
		return Response{}, nil
	}
	for _, r := range f.rules {
		if r.re.MatchString(args.Command) {
			return Response{
				Block:  true,
				Reason: fmt.Sprintf("the command was refused by safety rule %q: %s", r.Name, r.Reason),
				Data:   map[string]any{"last_blocked_rule": r.Name},
			}, nil
		}
	}
	return Response{}, nil
}

// performanceRollout stops an environment once the mean of its last Window
// scored rewards reaches Threshold.
type performanceRollout struct {
	window    int
	threshold float64

	// mu guards the field below.
	mu      sync.Mutex
	rewards map[string][]float64
}

// performanceConfig is the config of performance_based_rollout.
type performanceConfig struct {
	Window    int      `json:"window"`
	Threshold *float64 `json:"threshold"`
}

func newPerformanceRollout(raw []byte) (Plugin, error) {
	c := performanceConfig{Window: 5}
	if err := decodeConfig(raw, &c); err != nil {
		return nil, err
	}
	threshold := 0.9
	if c.Threshold != nil {
		threshold = *c.Threshold
	}
	var errs []error
	if c.Window < 1 {
		errs = append(errs, fmt.Errorf("window must be at least 1, got %d", c.Window))
	}
	if threshold < 0 || threshold > 1 {
		errs = append(errs, fmt.Errorf("threshold must be in [0, 1], got %v", threshold))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &performanceRollout{window: c.Window, threshold: threshold, rewards: map[string][]float64{}}, nil
}

func (p *performanceRollout) Name() string  { return PerformanceRolloutName }
func (p *performanceRollout) Hooks() []Hook { return []Hook{PostEpisode} }

// Handle records the episode's reward; masked episodes say nothing about
// the agent and are left out.
func (p *performanceRollout) Handle(_ context.Context, ev *Event) (Response, error) {
	if ev.Trajectory == nil || ev.Trajectory.EpisodeResult.Mask {
		return Response{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := append(p.rewards[ev.Env], ev.Trajectory.EpisodeResult.FinalScore)
	if len(rs) > p.window {
		rs = rs[len(rs)-p.window:]
	}
	p.rewards[ev.Env] = rs
	if len(rs) < p.window {
		return Response{}, nil
	}
	var sum float64
	for _, r := range rs {
		sum += r
	}
	mean := sum / float64(len(rs))
	data := map[string]any{"window_mean_reward": mean, "window": p.window, "threshold": p.threshold}
	return Response{Data: data, Stop: mean >= p.threshold}, nil
}

// trajectoryAnalysis computes per-episode statistics of the agent's
// behaviour.
type trajectoryAnalysis struct{}

func newTrajectoryAnalysis(raw []byte) (Plugin, error) {
	var c struct{}
	if err := decodeConfig(raw, &c); err != nil {
		return nil, err
	}
	return trajectoryAnalysis{}, nil
}

func (trajectoryAnalysis) Name() string  { return TrajectoryAnalysisName }
func (trajectoryAnalysis) Hooks() []Hook { return []Hook{PostEpisode} }

// Handle analyses the finished trajectory.
func (trajectoryAnalysis) Handle(_ context.Context, ev *Event) (Response, error) {
	if ev.Trajectory == nil {
		return Response{}, nil
	}
	return Response{Data: Analyze(ev.Trajectory)}, nil
}

// Analyze returns statistics of a trajectory: actions by tool, error rate
// and errors by class, blocked calls, commands run more than once, and time
// per step and per policy turn.
func Analyze(t *gym.Trajectory) map[string]any {
	byTool := map[string]int{}
	byClass := map[string]int{}
	commands := map[string]int{}
	var order []string
	errs, blocked := 0, 0
	var total, longest float64
	for _, st := range t.Steps {
		byTool[st.Action.ToolCall.Function.Name]++
		if st.Result.ErrorClass != "" {
			errs++
			byClass[string(st.Result.ErrorClass)]++
		}
		if st.Result.Blocked {
			blocked++
		}
		if st.Action.ToolCall.Function.Name == gym.ToolExecuteCommand {
			c := strings.TrimSpace(st.Action.Content)
			if commands[c] == 0 {
				order = append(order, c)
			}
			commands[c]++
		}
		d := st.Result.Duration.Seconds()
		total += d
		longest = max(longest, d)
	}
	repeated := map[string]int{}
	extra := 0
	for _, c := range order {
		if n := commands[c]; n > 1 {
			repeated[c] = n
			extra += n - 1
		}
	}
	n := len(t.Steps)
	out := map[string]any{
		"actions":               n,
		"actions_by_tool":       byTool,
		"action_errors":         errs,
		"errors_by_class":       byClass,
		"error_rate":            ratio(errs, n),
		"blocked":               blocked,
		"distinct_commands":     len(order),
		"repeated_commands":     repeated,
		"repeated_command_runs": extra,
		"tool_seconds":          total,
		"mean_step_seconds":     ratioF(total, n),
		"max_step_seconds":      longest,
	}
	var policy float64
	noCall := 0
	for _, tr := range t.Turns {
		policy += tr.Duration.Seconds()
		if tr.ToolCalls == 0 {
			noCall++
		}
	}
	out["turns"] = len(t.Turns)
	out["turns_without_tool_call"] = noCall
	out["policy_seconds"] = policy
	out["mean_turn_seconds"] = ratioF(policy, len(t.Turns))
	if n > 0 {
		tools := make([]string, 0, len(byTool))
		for k := range byTool {
			tools = append(tools, k)
		}
		sort.Slice(tools, func(i, j int) bool {
			return byTool[tools[i]] > byTool[tools[j]] || (byTool[tools[i]] == byTool[tools[j]] && tools[i] < tools[j])
		})
		out["most_used_tool"] = tools[0]
	}
	return out
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ratioF(a float64, b int) float64 {
	if b == 0 {
		return 0
	}
	return a / float64(b)
}
