package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	units "github.com/docker/go-units"
)

// Load reads, strictly decodes and validates the config file at path. It
// reports every problem at once, each naming its JSON path, joined with
// errors.Join; it starts nothing and needs no Docker.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg.Path = abs
	return cfg, nil
}

// Parse decodes and validates a config whose relative paths resolve
// against dir.
func Parse(data []byte, dir string) (*Config, error) {
	d := &decoder{dir: dir}
	root, ok := d.object("", data)
	if !ok {
		return nil, errors.Join(d.errs...)
	}
	cfg := &Config{Dir: dir}
	d.config(root, cfg)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	cfg.Warnings = d.warnings
	return cfg, nil
}

// decoder walks the JSON by hand so that every unknown key and every wrong
// type is reported with its path, all at once.
type decoder struct {
	dir      string
	errs     []error
	warnings []string
	// failed holds the paths that already have an error, so a value of
	// the wrong type is not also reported as missing.
	failed map[string]bool
	// envCopies are the copy_folders of the environment being decoded,
	// checked against the hidden files of each of its tasks.
	envCopies []copyEntry
}

func (d *decoder) fail(path, format string, args ...any) {
	if path == "" {
		path = "(root)"
	}
	if d.failed == nil {
		d.failed = map[string]bool{}
	}
	d.failed[path] = true
	d.errs = append(d.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

func (d *decoder) warn(format string, args ...any) {
	d.warnings = append(d.warnings, fmt.Sprintf(format, args...))
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// fields maps each known key of an object to its decoder.
type fields map[string]func(path string, raw json.RawMessage)

// object decodes raw as a JSON object (null counts as empty).
func (d *decoder) object(path string, raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if isNull(raw) {
		return map[string]json.RawMessage{}, true
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil || m == nil {
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &syn):
			d.fail(path, "invalid JSON at byte %d: %v", syn.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			d.fail(path, "invalid JSON: it ends early")
		default:
			d.fail(path, "want an object, got %s", kind(raw))
		}
		return nil, false
	}
	if dec.More() {
		d.fail(path, "trailing data after the JSON value")
		return nil, false
	}
	return m, true
}

// apply runs the decoder of each key of obj in sorted key order and reports
// unknown keys.
func (d *decoder) apply(path string, obj map[string]json.RawMessage, f fields) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fn, ok := f[k]
		if !ok {
			d.fail(join(path, k), "unknown key%s", suggest(k, f))
			continue
		}
		fn(join(path, k), obj[k])
	}
}

// suggest names a known key close to k, if any.
func suggest(k string, f fields) string {
	best, bestDist := "", 3
	for known := range f {
		if dist := editDistance(k, known); dist < bestDist || (dist == bestDist && known < best) {
			best, bestDist = known, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// kind names the JSON type of raw for error messages.
func kind(raw json.RawMessage) string {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func (d *decoder) str(dst *string) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			return
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			d.fail(path, "want a string, got %s", kind(raw))
		}
	}
}

func (d *decoder) boolean(dst *bool) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			return
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			d.fail(path, "want true or false, got %s", kind(raw))
		}
	}
}

func (d *decoder) number(path string, raw json.RawMessage) (float64, bool) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		d.fail(path, "want a number, got %s", kind(raw))
		return 0, false
	}
	return f, true
}

func (d *decoder) integer(dst *int) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			return
		}
		f, ok := d.number(path, raw)
		if !ok {
			return
		}
		if f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
			d.fail(path, "want an integer, got %v", f)
			return
		}
		*dst = int(f)
	}
}

func (d *decoder) int64(dst *int64) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			return
		}
		var v int64
		if err := json.Unmarshal(raw, &v); err != nil {
			if _, ok := d.number(path, raw); ok {
				d.fail(path, "want an integer (64-bit), got %s", bytes.TrimSpace(raw))
			}
			return
		}
		*dst = v
	}
}

func (d *decoder) optInt(dst **int) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			*dst = nil
			return
		}
		var v int
		before := len(d.errs)
		d.integer(&v)(path, raw)
		if len(d.errs) == before {
			*dst = &v
		}
	}
}

// size decodes a byte count: a number, or a string like "512m" or "4g".
func (d *decoder) size(dst *int64) func(string, json.RawMessage) {
	return func(p string, raw json.RawMessage) {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			n, err := units.RAMInBytes(s)
			if err != nil {
				d.fail(p, "want bytes or a size like \"1g\", got %q", s)
				return
			}
			*dst = n
			return
		}
		if f, ok := d.number(p, raw); ok {
			*dst = int64(f)
		}
	}
}

func (d *decoder) float(dst *float64) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			return
		}
		if f, ok := d.number(path, raw); ok {
			*dst = f
		}
	}
}

func (d *decoder) optFloat(dst **float64) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			*dst = nil
			return
		}
		if f, ok := d.number(path, raw); ok {
			*dst = &f
		}
	}
}

// duration reads seconds (a number) or a Go duration string.
func (d *decoder) duration(dst *time.Duration) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			return
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			v, err := time.ParseDuration(s)
			if err != nil {
				d.fail(path, "want seconds or a duration like \"90s\", got %q", s)
				return
			}
			*dst = v
			return
		}
		if f, ok := d.number(path, raw); ok {
			*dst = time.Duration(f * float64(time.Second))
		}
	}
}

func (d *decoder) strings(dst *[]string) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			return
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			d.fail(path, "want an array of strings, got %s", kind(raw))
			return
		}
		out := make([]string, 0, len(items))
		for i, it := range items {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				d.fail(index(path, i), "want a string, got %s", kind(it))
				continue
			}
			out = append(out, s)
		}
		*dst = out
	}
}

func (d *decoder) array(path string, raw json.RawMessage) []json.RawMessage {
	if isNull(raw) {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		d.fail(path, "want an array, got %s", kind(raw))
		return nil
	}
	return items
}

// deprecatedRoot are the seed's root-level fields and where they moved.
var deprecatedRoot = map[string]string{
	"llm_model":             "llm_config.model",
	"max_episodes":          "episode_control_config.max_episodes",
	"stop_on_success":       "episode_control_config.stop_on_success",
	"max_parallel_rollouts": "rollout_config.max_parallel_rollouts",
	"global_timeout":        "timeout_config.global_timeout",
	"output_path":           "rollout_config.trajectory_output_path",
	"plugins_enabled":       "rollout_config.enable_plugins",
}

func (d *decoder) config(root map[string]json.RawMessage, cfg *Config) {
	cfg.TemplatePrompt = DefaultTemplatePrompt
	cfg.Rollout = Rollout{MaxParallelRollouts: DefaultMaxParallel, TrajectoryOutputPath: DefaultTrajectoryPath,
		EnablePlugins: true, SaveTrajectoryInterval: defaultSaveTrajectoryEach}
	cfg.EpisodeControl = EpisodeControl{MaxEpisodes: DefaultMaxEpisodes, SafetyLimit: DefaultSafetyLimit}
	cfg.Timeouts = Timeouts{Global: DefaultGlobalTimeout, Command: DefaultCommandTimeout, Test: DefaultTestTimeout}

	// Root-level sections first, so environments inherit timeout_config.
	envsRaw, hasEnvs := root["environments"]
	f := fields{
		"environments":           func(string, json.RawMessage) {},
		"llm_config":             func(p string, r json.RawMessage) { d.llm(p, r, &cfg.LLM) },
		"rollout_config":         func(p string, r json.RawMessage) { d.rollout(p, r, &cfg.Rollout) },
		"episode_control_config": func(p string, r json.RawMessage) { d.episodeControl(p, r, &cfg.EpisodeControl) },
		"timeout_config":         func(p string, r json.RawMessage) { d.timeouts(p, r, &cfg.Timeouts) },
		"template_prompt":        d.str(&cfg.TemplatePrompt),
		"plugins":                func(p string, r json.RawMessage) { cfg.Plugins = d.plugins(p, r) },
	}
	// Deprecated root fields are honoured unless the section sets them.
	var old struct {
		model                             string
		maxEpisodes, maxParallel          int
		stop, pluginsOn                   bool
		global                            time.Duration
		output                            string
		hasStop, hasPlugins, hasEpisodes  bool
		hasParallel, hasGlobal, hasOutput bool
	}
	f["llm_model"] = d.str(&old.model)
	f["max_episodes"] = func(p string, r json.RawMessage) { old.hasEpisodes = true; d.integer(&old.maxEpisodes)(p, r) }
	f["stop_on_success"] = func(p string, r json.RawMessage) { old.hasStop = true; d.boolean(&old.stop)(p, r) }
	f["max_parallel_rollouts"] = func(p string, r json.RawMessage) { old.hasParallel = true; d.integer(&old.maxParallel)(p, r) }
	f["global_timeout"] = func(p string, r json.RawMessage) { old.hasGlobal = true; d.duration(&old.global)(p, r) }
	f["output_path"] = func(p string, r json.RawMessage) { old.hasOutput = true; d.str(&old.output)(p, r) }
	f["plugins_enabled"] = func(p string, r json.RawMessage) { old.hasPlugins = true; d.boolean(&old.pluginsOn)(p, r) }
	d.apply("", root, f)

	section := func(name, key string) bool {
		raw, ok := root[name]
		if !ok {
			return false
		}
		m := map[string]json.RawMessage{}
		_ = json.Unmarshal(raw, &m)
		_, ok = m[key]
		return ok
	}
	keys := make([]string, 0, len(deprecatedRoot))
	for k := range deprecatedRoot {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := root[k]; ok {
			d.warn("%s at the root is deprecated; use %s", k, deprecatedRoot[k])
		}
	}
	if old.model != "" && !section("llm_config", "model") {
		cfg.LLM.Model = old.model
	}
	if old.hasEpisodes && !section("episode_control_config", "max_episodes") {
		cfg.EpisodeControl.MaxEpisodes = old.maxEpisodes
	}
	if old.hasStop && !section("episode_control_config", "stop_on_success") {
		cfg.EpisodeControl.StopOnSuccess = old.stop
	}
	if old.hasParallel && !section("rollout_config", "max_parallel_rollouts") {
		cfg.Rollout.MaxParallelRollouts = old.maxParallel
	}
	if old.hasGlobal && !section("timeout_config", "global_timeout") {
		cfg.Timeouts.Global = old.global
	}
	if old.hasOutput && !section("rollout_config", "trajectory_output_path") {
		cfg.Rollout.TrajectoryOutputPath = old.output
	}
	if old.hasPlugins && !section("rollout_config", "enable_plugins") {
		cfg.Rollout.EnablePlugins = old.pluginsOn
	}
	d.checkGlobal(cfg)

	if !hasEnvs {
		d.fail("environments", "missing: a config needs at least one environment")
		return
	}
	items := d.array("environments", envsRaw)
	if items != nil && len(items) == 0 {
		d.fail("environments", "empty: a config needs at least one environment")
	}
	seen := map[string]int{}
	for i, raw := range items {
		p := index("environments", i)
		e, ok := d.environment(p, raw, cfg.Timeouts)
		if !ok {
			continue
		}
		if j, dup := seen[e.ID]; dup && e.ID != "" {
			d.fail(join(p, "id"), "duplicate id %q (also environments[%d])", e.ID, j)
		}
		seen[e.ID] = i
		cfg.Environments = append(cfg.Environments, e)
	}
}

func (d *decoder) checkGlobal(cfg *Config) {
	if cfg.Rollout.MaxParallelRollouts < 1 {
		d.fail("rollout_config.max_parallel_rollouts", "must be at least 1, got %d", cfg.Rollout.MaxParallelRollouts)
	}
	if cfg.Rollout.SaveTrajectoryInterval < 1 {
		d.fail("rollout_config.save_trajectory_interval", "must be at least 1, got %d", cfg.Rollout.SaveTrajectoryInterval)
	}
	if cfg.Rollout.TaskFilter != "" {
		if _, err := regexp.Compile(cfg.Rollout.TaskFilter); err != nil {
			d.fail("rollout_config.task_filter", "not a regular expression: %v", err)
		}
	}
	if cfg.Rollout.TasksPerEnv < 0 {
		d.fail("rollout_config.tasks_per_env", "must be at least 1, or 0 for every task, got %d", cfg.Rollout.TasksPerEnv)
	}
	ec := cfg.EpisodeControl
	if ec.EpisodesPerTask < 0 {
		d.fail("episode_control_config.episodes_per_task", "must be at least 1, or 0 to spread max_episodes over the tasks, got %d", ec.EpisodesPerTask)
	}
	if ec.MaxEpisodes < 1 {
		d.fail("episode_control_config.max_episodes", "must be at least 1, got %d", ec.MaxEpisodes)
	}
	if ec.MaxEpisodesPerEnv != nil && *ec.MaxEpisodesPerEnv < 1 {
		d.fail("episode_control_config.max_episodes_per_env", "must be at least 1 or null, got %d", *ec.MaxEpisodesPerEnv)
	}
	if ec.MinSuccessRate != nil && (*ec.MinSuccessRate < 0 || *ec.MinSuccessRate > 1) {
		d.fail("episode_control_config.min_success_rate", "must be in [0, 1] or null, got %v", *ec.MinSuccessRate)
	}
	if ec.SafetyLimit < 1 {
		d.fail("episode_control_config.safety_limit", "must be at least 1, got %d", ec.SafetyLimit)
	}
	l := cfg.LLM
	if l.Mode != "" && l.Mode != "tools" && l.Mode != "react" {
		d.fail("llm_config.mode", "must be \"tools\" or \"react\", got %q", l.Mode)
	}
	if l.Temperature != nil && (*l.Temperature < 0 || *l.Temperature > 2) {
		d.fail("llm_config.temperature", "must be in [0, 2], got %v", *l.Temperature)
	}
	if l.MaxTokens < 0 {
		d.fail("llm_config.max_tokens", "must be positive, got %d", l.MaxTokens)
	}
	if l.Timeout < 0 {
		d.fail("llm_config.timeout", "must be positive")
	}
	if l.MaxRetries != nil && *l.MaxRetries < 0 {
		d.fail("llm_config.max_retries", "must not be negative")
	}
	if l.MaxContextMessages < 0 || l.MaxOutputLength < 0 {
		d.fail("llm_config", "max_context_messages and max_output_length must not be negative")
	}
	if l.CacheSize < 0 {
		d.fail("llm_config.cache_size", "must not be negative, got %d", l.CacheSize)
	}
	if l.MaxCostPerEpisode != nil && *l.MaxCostPerEpisode <= 0 {
		d.fail("llm_config.max_cost_per_episode", "must be positive (USD) or null, got %v", *l.MaxCostPerEpisode)
	}
	if l.MaxTokensPerEpisode < 0 {
		d.fail("llm_config.max_tokens_per_episode", "must be positive, or 0 for no cap, got %d", l.MaxTokensPerEpisode)
	}
	for _, p := range []struct {
		key string
		v   *float64
	}{{"input_cost_per_1k_tokens", l.InputCostPer1K}, {"output_cost_per_1k_tokens", l.OutputCostPer1K}} {
		if p.v != nil && *p.v < 0 {
			d.fail("llm_config."+p.key, "must not be negative, got %v", *p.v)
		}
	}
	d.checkTimeouts("timeout_config", cfg.Timeouts)
}

func (d *decoder) checkTimeouts(path string, t Timeouts) {
	if t.Global <= 0 {
		d.fail(join(path, "global_timeout"), "must be positive")
	}
	if t.Command <= 0 {
		d.fail(join(path, "command_timeout"), "must be positive")
	}
	if t.Test <= 0 {
		d.fail(join(path, "test_timeout"), "must be positive")
	}
}

func (d *decoder) llm(path string, raw json.RawMessage, l *LLM) {
	obj, ok := d.object(path, raw)
	if !ok {
		return
	}
	d.apply(path, obj, fields{
		"model":                d.str(&l.Model),
		"api_key":              d.str(&l.APIKey),
		"base_url":             d.str(&l.BaseURL),
		"temperature":          d.optFloat(&l.Temperature),
		"max_tokens":           d.integer(&l.MaxTokens),
		"timeout":              d.duration(&l.Timeout),
		"max_context_messages": d.integer(&l.MaxContextMessages),
		"max_output_length":    d.integer(&l.MaxOutputLength),
		"max_retries":          d.optInt(&l.MaxRetries),
		"mode":                 d.str(&l.Mode),
		// The seed's caching and usage keys, and upstream's cost cap.
		"enable_caching":            d.optBool(&l.EnableCaching),
		"cache_size":                d.integer(&l.CacheSize),
		"track_token_usage":         d.optBool(&l.TrackTokenUsage),
		"warn_high_usage":           d.optBool(&l.WarnHighUsage),
		"max_cost_per_episode":      d.optFloat(&l.MaxCostPerEpisode),
		"max_tokens_per_episode":    d.integer(&l.MaxTokensPerEpisode),
		"input_cost_per_1k_tokens":  d.optFloat(&l.InputCostPer1K),
		"output_cost_per_1k_tokens": d.optFloat(&l.OutputCostPer1K),
	})
	if l.TrackTokenUsage != nil && !*l.TrackTokenUsage {
		d.warn("llm_config.track_token_usage false: the seed stopped counting tokens; token usage is still recorded here (the endpoint reports it at no cost), only the high-usage warnings are off")
	}
}

func (d *decoder) optBool(dst **bool) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if isNull(raw) {
			*dst = nil
			return
		}
		var v bool
		before := len(d.errs)
		d.boolean(&v)(path, raw)
		if len(d.errs) == before {
			*dst = &v
		}
	}
}

func (d *decoder) rollout(path string, raw json.RawMessage, r *Rollout) {
	obj, ok := d.object(path, raw)
	if !ok {
		return
	}
	d.apply(path, obj, fields{
		"max_parallel_rollouts":     d.integer(&r.MaxParallelRollouts),
		"trajectory_output_path":    d.str(&r.TrajectoryOutputPath),
		"enable_plugins":            d.boolean(&r.EnablePlugins),
		"save_trajectory_interval":  d.integer(&r.SaveTrajectoryInterval),
		"state_persistence_enabled": d.boolean(&r.StatePersistenceEnabled),
		"task_filter":               d.str(&r.TaskFilter),
		"tasks_per_env":             d.integer(&r.TasksPerEnv),
		"sample_seed":               d.int64(&r.SampleSeed),
	})
}

func (d *decoder) episodeControl(path string, raw json.RawMessage, e *EpisodeControl) {
	obj, ok := d.object(path, raw)
	if !ok {
		return
	}
	d.apply(path, obj, fields{
		"max_episodes":         d.integer(&e.MaxEpisodes),
		"episodes_per_task":    d.integer(&e.EpisodesPerTask),
		"max_episodes_per_env": d.optInt(&e.MaxEpisodesPerEnv),
		"stop_on_success":      d.boolean(&e.StopOnSuccess),
		"min_success_rate":     d.optFloat(&e.MinSuccessRate),
		"safety_limit":         d.integer(&e.SafetyLimit),
	})
}

func (d *decoder) timeouts(path string, raw json.RawMessage, t *Timeouts) {
	obj, ok := d.object(path, raw)
	if !ok {
		return
	}
	d.apply(path, obj, fields{
		"global_timeout":  d.duration(&t.Global),
		"command_timeout": d.duration(&t.Command),
		"test_timeout":    d.duration(&t.Test),
	})
}

func (d *decoder) plugins(path string, raw json.RawMessage) []Plugin {
	var out []Plugin
	for i, it := range d.array(path, raw) {
		p := index(path, i)
		pl := Plugin{Enabled: true, Timeout: DefaultPluginTimeout}
		var name string
		if json.Unmarshal(it, &name) == nil {
			pl.Name = name
		} else {
			obj, ok := d.object(p, it)
			if !ok {
				continue
			}
			d.apply(p, obj, fields{
				"name":    d.str(&pl.Name),
				"enabled": d.boolean(&pl.Enabled),
				"config": func(cp string, r json.RawMessage) {
					if _, ok := d.object(cp, r); ok && !isNull(r) {
						pl.Config = append(json.RawMessage(nil), r...)
					}
				},
				"command": func(cp string, r json.RawMessage) {
					var s string
					if json.Unmarshal(r, &s) == nil {
						pl.Command = strings.Fields(s)
						return
					}
					d.strings(&pl.Command)(cp, r)
				},
				"hooks":   d.strings(&pl.Hooks),
				"timeout": d.duration(&pl.Timeout),
			})
		}
		if pl.Name == "" {
			d.fail(p, "a plugin needs a name")
		}
		if pl.Timeout <= 0 {
			d.fail(join(p, "timeout"), "must be positive")
		}
		out = append(out, pl)
	}
	return out
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func (d *decoder) environment(path string, raw json.RawMessage, global Timeouts) (Environment, bool) {
	obj, ok := d.object(path, raw)
	if !ok {
		return Environment{}, false
	}
	e := Environment{
		WorkingDirectory: DefaultWorkingDirectory,
		Timeouts:         global,
		Reward:           Reward{Mode: DefaultRewardMode, SuccessThreshold: DefaultSuccessThreshold},
		Network:          DefaultNetwork,
		MaxActions:       DefaultMaxActions,
		MaxOutput:        DefaultMaxOutput,
		MaxRetries:       DefaultMaxRetries,
	}
	var copies, hidden, tasks, services []json.RawMessage
	var copiesPath, hiddenPath, tasksPath, servicesPath string
	// refFiles finishes the reference solution once the working directory,
	// which its files default to, is known.
	var refFiles func(workdir string) []copyEntry
	d.apply(path, obj, fields{
		"id":                d.str(&e.ID),
		"description":       d.str(&e.Description),
		"docker_image":      d.str(&e.DockerImage),
		"init_commands":     d.strings(&e.InitCommands),
		"unit_tests":        d.strings(&e.UnitTests),
		"prompt":            d.str(&e.Prompt),
		"working_directory": d.str(&e.WorkingDirectory),
		"environment_variables": func(p string, r json.RawMessage) {
			m, ok := d.object(p, r)
			if !ok {
				return
			}
			e.EnvironmentVariables = map[string]string{}
			for k, v := range m {
				var s string
				if err := json.Unmarshal(v, &s); err != nil {
					d.fail(join(p, k), "want a string, got %s", kind(v))
					continue
				}
				if k == "" || strings.ContainsAny(k, "=\x00") {
					d.fail(join(p, k), "not a valid variable name")
					continue
				}
				e.EnvironmentVariables[k] = s
			}
		},
		"copy_folders":   func(p string, r json.RawMessage) { copiesPath, copies = p, d.array(p, r) },
		"max_retries":    d.integer(&e.MaxRetries),
		"timeout_config": func(p string, r json.RawMessage) { d.timeouts(p, r, &e.Timeouts) },
		"hidden_tests":   func(p string, r json.RawMessage) { hiddenPath, hidden = p, d.array(p, r) },
		"reference_solution": func(p string, r json.RawMessage) {
			ro, ok := d.object(p, r)
			if !ok || isNull(r) {
				return
			}
			ref := &Reference{}
			var files []json.RawMessage
			var filesPath string
			d.apply(p, ro, fields{
				"files":    func(fp string, fr json.RawMessage) { filesPath, files = fp, d.array(fp, fr) },
				"commands": d.strings(&ref.Commands),
			})
			e.Reference = ref
			refFiles = func(workdir string) []copyEntry {
				var entries []copyEntry
				for i, fr := range files {
					if c, ok := d.copySpec(index(filesPath, i), fr, workdir); ok {
						ref.Files = append(ref.Files, c.spec)
						entries = append(entries, c)
					}
				}
				// A file that failed has its own error already.
				if len(files) == 0 && len(ref.Commands) == 0 {
					d.fail(p, "a reference solution needs files or commands")
				}
				return entries
			}
		},
		"reward": func(p string, r json.RawMessage) {
			ro, ok := d.object(p, r)
			if !ok {
				return
			}
			d.apply(p, ro, fields{
				"mode":              d.str(&e.Reward.Mode),
				"success_threshold": d.float(&e.Reward.SuccessThreshold),
			})
		},
		"resources": func(p string, r json.RawMessage) {
			ro, ok := d.object(p, r)
			if !ok {
				return
			}
			d.apply(p, ro, fields{
				"memory": d.size(&e.Resources.MemoryBytes),
				"disk":   d.size(&e.Resources.DiskBytes),
				"cpus":   d.float(&e.Resources.CPUs),
				"pids": func(pp string, pr json.RawMessage) {
					var n int
					d.integer(&n)(pp, pr)
					e.Resources.PIDs = int64(n)
				},
			})
		},
		"network":          d.str(&e.Network),
		"max_actions":      d.integer(&e.MaxActions),
		"max_output":       d.integer(&e.MaxOutput),
		"persistent_shell": d.boolean(&e.PersistentShell),
		"verifier_zygote":  d.optBool(&e.VerifierZygote),
		"shared_usr":       d.optBool(&e.SharedUsr),
		"tools":            func(p string, r json.RawMessage) { e.Tools = d.tools(p, r, nil) },
		"tasks": func(p string, r json.RawMessage) {
			tasksPath, tasks = p, d.array(p, r)
			if tasks == nil {
				tasks = []json.RawMessage{}
			}
		},
		"tasks_file": d.str(&e.TasksFile),
		"tasks_dir":  d.str(&e.TasksDir),
		"services":   func(p string, r json.RawMessage) { servicesPath, services = p, d.array(p, r) },
	})
	e.Services = d.services(servicesPath, services)
	_, ownTimeouts := obj["timeout_config"]
	many := tasks != nil || e.TasksFile != "" || e.TasksDir != ""
	d.checkEnvironment(path, &e, ownTimeouts, many)
	var copyEntries, hiddenEntries, refEntries []copyEntry
	for i, c := range copies {
		if ce, ok := d.copySpec(index(copiesPath, i), c, e.WorkingDirectory); ok {
			e.CopyFolders = append(e.CopyFolders, ce.spec)
			copyEntries = append(copyEntries, ce)
		}
	}
	for i, c := range hidden {
		if ce, ok := d.copySpec(index(hiddenPath, i), c, e.WorkingDirectory); ok {
			e.HiddenTests = append(e.HiddenTests, ce.spec)
			hiddenEntries = append(hiddenEntries, ce)
		}
	}
	if refFiles != nil {
		refEntries = refFiles(e.WorkingDirectory)
	}
	d.checkDestinations(e.WorkingDirectory, copyEntries, hiddenEntries, refEntries)
	if many && (len(hidden) > 0 || refFiles != nil || e.Prompt != "") {
		d.fail(path, "prompt, hidden_tests and reference_solution belong to the tasks when an environment has tasks, tasks_file or tasks_dir")
	}
	d.envCopies = copyEntries
	d.taskSources(path, &e, tasks, tasksPath)
	d.envCopies = nil
	if len(e.Services) > 0 {
		d.checkServiceTasks(servicesPath, &e)
	}
	return e, true
}

// agentWritable are folders where the agent can make directories of its
// own (besides the working directory).
var agentWritable = []string{"/tmp", "/var/tmp", "/dev/shm", "/run", "/home"}

// checkServiceTasks checks the tasks of an environment with services.
// A service is the agent's code running while pytest collects the hidden
// tests, so nothing of the agent's may be able to rename them: a hidden
// root below a directory the agent owns could be swapped for one of its
// own before collection (the guard also checks this at run time).
func (d *decoder) checkServiceTasks(path string, e *Environment) {
	for _, t := range e.Tasks {
		if t.HarborTask != nil {
			d.fail(path, "task %s is a Harbor task: its tests/test.sh starts what it needs, services do not apply", t.ID)
			return
		}
		for _, r := range t.HiddenRoots() {
			bad := ""
			for _, w := range append([]string{e.WorkingDirectory}, agentWritable...) {
				if r == w || strings.HasPrefix(r, strings.TrimSuffix(w, "/")+"/") {
					bad = w
					break
				}
			}
			if bad != "" {
				d.fail(path, "task %s: hidden tests at %s are below %s, where the agent can rename them; with services the agent's code runs while the tests are collected, so install them elsewhere (e.g. /tests) and name that path in unit_tests", t.ID, r, bad)
			}
		}
	}
}

// services decodes an environment's `services`.
func (d *decoder) services(path string, items []json.RawMessage) []Service {
	var out []Service
	names, ports := map[string]int{}, map[int]int{}
	for i, raw := range items {
		p := index(path, i)
		obj, ok := d.object(p, raw)
		if !ok {
			continue
		}
		s := Service{StartupTimeout: DefaultServiceStartup}
		d.apply(p, obj, fields{
			"name":            d.str(&s.Name),
			"command":         d.str(&s.Command),
			"port":            d.integer(&s.Port),
			"startup_timeout": d.duration(&s.StartupTimeout),
		})
		switch {
		case d.failed[join(p, "name")]:
		case s.Name == "":
			d.fail(join(p, "name"), "missing")
		case !idPattern.MatchString(s.Name):
			d.fail(join(p, "name"), "%q: use letters, digits, '_', '.', '-' (at most 128)", s.Name)
		default:
			if j, dup := names[s.Name]; dup {
				d.fail(join(p, "name"), "duplicate name %q (also %s)", s.Name, index(path, j))
			}
			names[s.Name] = i
		}
		if strings.TrimSpace(s.Command) == "" && !d.failed[join(p, "command")] {
			d.fail(join(p, "command"), "missing: the shell command that starts the service")
		}
		switch {
		case d.failed[join(p, "port")]:
		case s.Port < 0 || s.Port > 65535:
			d.fail(join(p, "port"), "must be a TCP port (1-65535), or 0 for none, got %d", s.Port)
		case s.Port > 0:
			if j, dup := ports[s.Port]; dup {
				d.fail(join(p, "port"), "port %d is also %s's", s.Port, index(path, j))
			}
			ports[s.Port] = i
		}
		if s.StartupTimeout <= 0 && !d.failed[join(p, "startup_timeout")] {
			d.fail(join(p, "startup_timeout"), "must be positive")
		}
		out = append(out, s)
	}
	return out
}

// checkEnvironment checks the environment's own fields; many says its
// tasks come from task sources, which check the per-task fields.
func (d *decoder) checkEnvironment(path string, e *Environment, ownTimeouts, many bool) {
	switch {
	case d.failed[join(path, "id")]:
	case e.ID == "":
		d.fail(join(path, "id"), "missing")
	case !idPattern.MatchString(e.ID):
		d.fail(join(path, "id"), "%q: use letters, digits, '_', '.', '-' (at most 128)", e.ID)
	}
	if e.DockerImage == "" && !d.failed[join(path, "docker_image")] && !many {
		d.fail(join(path, "docker_image"), "missing")
	}
	if len(e.UnitTests) == 0 && !d.failed[join(path, "unit_tests")] && !many {
		d.fail(join(path, "unit_tests"), "missing: the reward comes from the unit tests")
	}
	for i, t := range e.UnitTests {
		if strings.TrimSpace(t) == "" {
			d.fail(index(join(path, "unit_tests"), i), "empty command")
		}
	}
	if strings.TrimSpace(e.Prompt) == "" && !d.failed[join(path, "prompt")] && !many {
		d.fail(join(path, "prompt"), "missing")
	}
	if !strings.HasPrefix(e.WorkingDirectory, "/") {
		d.fail(join(path, "working_directory"), "must be an absolute path, got %q", e.WorkingDirectory)
	}
	if e.MaxRetries < 0 {
		d.fail(join(path, "max_retries"), "must not be negative")
	}
	if ownTimeouts {
		// Inherited timeouts were checked at the root.
		d.checkTimeouts(join(path, "timeout_config"), e.Timeouts)
	}
	d.checkReward(path, e.Reward)
	if e.Resources.MemoryBytes < 0 || (e.Resources.MemoryBytes > 0 && e.Resources.MemoryBytes < 6<<20) {
		d.fail(join(path, "resources.memory"), "must be at least 6MiB, got %d bytes", e.Resources.MemoryBytes)
	}
	if e.Resources.CPUs < 0 {
		d.fail(join(path, "resources.cpus"), "must not be negative")
	}
	if e.Resources.PIDs < 0 {
		d.fail(join(path, "resources.pids"), "must not be negative")
	}
	if e.Resources.DiskBytes < 0 || (e.Resources.DiskBytes > 0 && e.Resources.DiskBytes < 1<<20) {
		d.fail(join(path, "resources.disk"), "must be at least 1MiB, got %d bytes", e.Resources.DiskBytes)
	}
	if e.Network == "" || e.Network == "host" {
		d.fail(join(path, "network"), "must be \"none\" or a Docker network name (not %q)", e.Network)
	}
	if e.MaxActions < 1 {
		d.fail(join(path, "max_actions"), "must be at least 1, got %d", e.MaxActions)
	}
	if e.MaxOutput < 256 {
		d.fail(join(path, "max_output"), "must be at least 256 bytes, got %d", e.MaxOutput)
	}
}
