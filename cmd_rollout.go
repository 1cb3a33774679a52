package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy"
	"github.com/gymserver/gymserver/policy/plugin"
	"github.com/gymserver/gymserver/policy/rollout"
)

// API key environment variables, in the order they are consulted.
var apiKeyVars = []string{"OPENROUTER_API_KEY", "OPENAI_API_KEY"}

// rolloutFlags are the flags of `gymserver rollout`.
type rolloutFlags struct {
	model, apiKey, baseURL string
	temperature            float64
	maxTokens              int
	timeout                secondsFlag
	maxContext, maxOutput  int
	output                 string
	dryRun, quiet          bool
	logLevel               string
	parallel, episodes     int
	episodesPerTask        int
	tasksPerEnv            int
	sampleSeed             int64
	tasks                  string
	warmPool               int
	reuse                  int
	floatCPUs              bool
	createdPool            int
	orphanAfter            time.Duration
	noJanitor              bool
	janitorLog             string
	caches                 cacheCapFlags
	engines                engineFlags
	policy                 string
	server, token          string
	usage                  llmUsageFlags
	resultsFormat          string
	// set holds the names of the flags given on the command line.
	set map[string]bool
}

// llmUsageFlags are the seed's response-cache and token-usage flags, and
// the per-episode caps.
type llmUsageFlags struct {
	enableCaching, disableCaching         bool
	cacheSize                             int
	disableTokenTracking, disableWarnings bool
	maxCost                               float64
	maxEpisodeTokens                      int
}

// secondsFlag is a duration given as seconds ("60", "2.5") or as a Go
// duration ("1m30s").
type secondsFlag struct{ d time.Duration }

func (s *secondsFlag) String() string {
	if s == nil || s.d == 0 {
		return ""
	}
	return strconv.FormatFloat(s.d.Seconds(), 'f', -1, 64)
}

func (s *secondsFlag) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		s.d = time.Duration(f * float64(time.Second))
	} else if d, err := time.ParseDuration(v); err == nil {
		s.d = d
	} else {
		return fmt.Errorf("want seconds or a duration like 90s, got %q", v)
	}
	if s.d <= 0 {
		return errors.New("must be positive")
	}
	return nil
}

// registryLoader makes the environments of a loaded config and returns a
// function that releases them; configRegistry is the real one (Docker, this
// binary as the sandbox executor). The command loads the config once and
// hands it over, so the run and its environments see the same config.
type registryLoader func(ctx context.Context, cfg *config.Config, logger *slog.Logger, opts loadOptions) (*gym.Registry, func(context.Context) error, error)

// runRollout implements "gymserver rollout CONFIG": it runs episodes with an
// LLM, oracle or replay policy and writes trajectories, results and stats.
func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return rolloutWith(ctx, args, stdout, stderr, configRegistry)
}

// rolloutWith is runRollout with the environments' loader as a parameter.
func rolloutWith(ctx context.Context, args []string, stdout, stderr io.Writer, load registryLoader) int {
	var f rolloutFlags
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.model, "llm-model", "", "model id (default: llm_config.model, else "+policy.DefaultModel+")")
	fs.StringVar(&f.apiKey, "llm-api-key", "", "API key (default: $OPENROUTER_API_KEY, then $OPENAI_API_KEY, then llm_config.api_key)")
	fs.StringVar(&f.baseURL, "llm-base-url", "", "API base URL, used as given (default: llm_config.base_url, else $OPENAI_BASE_URL, else "+policy.DefaultBaseURL+")")
	fs.Float64Var(&f.temperature, "llm-temperature", 0, "sampling temperature (default: llm_config.temperature, else 0.7)")
	fs.IntVar(&f.maxTokens, "llm-max-tokens", 0, "maximum tokens per answer (default: llm_config.max_tokens, else 4096)")
	fs.Var(&f.timeout, "llm-timeout", "timeout of one API call, in seconds (default: llm_config.timeout, else 60)")
	fs.IntVar(&f.maxContext, "llm-max-context-messages", 0, "send at most this many messages, dropping the oldest turns (default: llm_config.max_context_messages; 0 sends all)")
	fs.IntVar(&f.maxOutput, "llm-max-output-length", 0, "cut tool results sent to the model to this many bytes (default: llm_config.max_output_length; 0 sends them whole)")
	fs.BoolVar(&f.usage.enableCaching, "llm-enable-caching", false, "answer a request identical to an earlier one from a cache, at temperature 0 only (default: llm_config.enable_caching, else off)")
	fs.BoolVar(&f.usage.disableCaching, "llm-disable-caching", false, "no response cache (wins over --llm-enable-caching)")
	fs.IntVar(&f.usage.cacheSize, "llm-cache-size", 0, fmt.Sprintf("answers the response cache keeps (default: llm_config.cache_size, else %d)", policy.DefaultCacheSize))
	fs.BoolVar(&f.usage.disableTokenTracking, "llm-disable-token-tracking", false, "the seed's switch for counting tokens; here usage is always recorded, and this turns off the high-usage warnings")
	fs.BoolVar(&f.usage.disableWarnings, "llm-disable-high-usage-warnings", false, fmt.Sprintf("no warning when the run's estimated cost passes $%g, then each doubling (default: llm_config.warn_high_usage)", policy.DefaultHighUsageCost))
	fs.Float64Var(&f.usage.maxCost, "llm-max-cost-per-episode", 0, "end an episode as truncated (reason budget, tests still run) once its estimated cost reaches this many USD (default: llm_config.max_cost_per_episode; 0: no cap)")
	fs.IntVar(&f.usage.maxEpisodeTokens, "llm-max-tokens-per-episode", 0, "end an episode as truncated (reason budget, tests still run) once it spent this many tokens (default: llm_config.max_tokens_per_episode; 0: no cap)")
	fs.StringVar(&f.output, "output", "results.json", "results file; the stats go beside it as NAME.stats.json")
	fs.StringVar(&f.resultsFormat, "results-format", rollout.ResultsSummary, "results file records: summary (one summary per episode, naming its trajectory file) or seed (each episode whole, with steps and test_results, as Real Work wrote it)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "check the config, plugins and flags and print the plan; starts nothing, needs no API key and no Docker")
	fs.StringVar(&f.logLevel, "log-level", "WARN", "log level: DEBUG, INFO, WARN (or WARNING), ERROR, CRITICAL")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar and no summary table")
	fs.IntVar(&f.parallel, "parallel", 0, "episodes run at once (default: rollout_config.max_parallel_rollouts)")
	fs.IntVar(&f.episodes, "episodes", 0, "episodes per environment, spread over its tasks (default: episode_control_config.max_episodes)")
	fs.IntVar(&f.episodesPerTask, "episodes-per-task", 0, "episodes of every task, instead of --episodes per environment (default: episode_control_config.episodes_per_task)")
	fs.IntVar(&f.tasksPerEnv, "tasks-per-env", 0, "run a reproducible sample of this many tasks per environment (default: rollout_config.tasks_per_env; 0: all)")
	fs.Int64Var(&f.sampleSeed, "sample-seed", 0, "seed of the --tasks-per-env sample (default: rollout_config.sample_seed)")
	fs.StringVar(&f.tasks, "tasks", "", "run only the tasks whose ENV/TASK id matches this regular expression (default: rollout_config.task_filter)")
	fs.IntVar(&f.warmPool, "warm-pool", 0, "started sandboxes kept ready per environment, so episodes start at once (in process only)")
	fs.IntVar(&f.reuse, "reuse", 0, "closed sandboxes kept, recycled, to serve later episodes of their environment without a container start; at most this many in all, each for at most a minute (in process only)")
	fs.BoolVar(&f.floatCPUs, "float-cpus", false, "let sandboxes run on any core instead of pinning each to the cores the fewest sandboxes use, which keeps a busy host fair between sessions (in process only)")
	fs.IntVar(&f.createdPool, "created-pool", 0, "containers created but not started kept per environment, so a start the warm pool does not serve skips the create (in process only)")
	f.caches.register(fs)
	f.engines.register(fs)
	fs.DurationVar(&f.orphanAfter, "orphan-after", docker.DefaultOrphanAfter, "an image-preparing container whose executor stream is gone (e.g. this process was killed) removes itself after this long (a sandbox goes at once); 0: never (in process only)")
	fs.BoolVar(&f.noJanitor, "no-janitor", false, "start no janitor process; without it, snapshot images of a killed run stay until the next start or gymserver reap (in process only)")
	fs.StringVar(&f.janitorLog, "janitor-log", "", "file the janitor appends what it removed to (default: none; in process only)")
	fs.StringVar(&f.policy, "policy", "llm", "llm, oracle (each environment's reference solution) or replay:FILE (a trajectory's calls)")
	fs.StringVar(&f.server, "server", "", "run against remote gymservers instead of in process: a ws:// URL, or several separated by commas (sessions are spread over them)")
	fs.StringVar(&f.token, "token", "", "bearer token for --server (default: $GYMSERVER_TOKEN)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver rollout CONFIG.json [flags]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, reorderArgs(fs, args), stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "gymserver rollout: "+format+"\n", a...)
		return code
	}
	if f.set["parallel"] && f.parallel < 1 {
		return fail(2, "--parallel must be at least 1")
	}
	if f.reuse < 0 {
		return fail(2, "--reuse must not be negative")
	}
	if f.warmPool < 0 {
		return fail(2, "--warm-pool must not be negative")
	}
	if f.createdPool < 0 {
		return fail(2, "--created-pool must not be negative")
	}
	if err := checkEngines(&f.engines); err != nil {
		return fail(2, "%v", err)
	}
	if f.set["episodes"] && f.episodes < 1 {
		return fail(2, "--episodes must be at least 1")
	}
	if f.set["episodes-per-task"] && f.episodesPerTask < 1 {
		return fail(2, "--episodes-per-task must be at least 1")
	}
	if f.set["tasks-per-env"] && f.tasksPerEnv < 1 {
		return fail(2, "--tasks-per-env must be at least 1")
	}
	if f.set["tasks"] {
		if _, err := regexp.Compile(f.tasks); err != nil {
			return fail(2, "--tasks: %v", err)
		}
	}
	if f.resultsFormat != rollout.ResultsSummary && f.resultsFormat != rollout.ResultsSeed {
		return fail(2, "--results-format %q: want %s or %s", f.resultsFormat, rollout.ResultsSummary, rollout.ResultsSeed)
	}
	if f.set["llm-cache-size"] && f.usage.cacheSize < 1 {
		return fail(2, "--llm-cache-size must be at least 1")
	}
	if f.set["llm-max-cost-per-episode"] && f.usage.maxCost <= 0 {
		return fail(2, "--llm-max-cost-per-episode must be positive (USD)")
	}
	if f.set["llm-max-tokens-per-episode"] && f.usage.maxEpisodeTokens < 1 {
		return fail(2, "--llm-max-tokens-per-episode must be at least 1")
	}
	logger, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return fail(2, "%v", err)
	}
	path := fs.Arg(0)
	cfg, err := config.Load(path)
	if err != nil {
		return fail(1, "%v", err)
	}
	if f.set["parallel"] {
		cfg.Rollout.MaxParallelRollouts = f.parallel
	}
	if f.set["episodes"] {
		cfg.EpisodeControl.MaxEpisodes = f.episodes
	}
	if f.set["episodes-per-task"] {
		cfg.EpisodeControl.EpisodesPerTask = f.episodesPerTask
	}
	if f.set["tasks-per-env"] {
		cfg.Rollout.TasksPerEnv = f.tasksPerEnv
	}
	if f.set["sample-seed"] {
		cfg.Rollout.SampleSeed = f.sampleSeed
	}
	if f.set["tasks"] {
		cfg.Rollout.TaskFilter = f.tasks
	}
	plugins, err := plugin.Load(cfg.Plugins, cfg.Dir, logger)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer plugins.Close()
	sel, err := selectPolicy(cfg, &f, logger)
	if err != nil {
		return fail(2, "%v", err)
	}
	plans, err := rollout.ConfigPlans(cfg)
	if err != nil {
		return fail(1, "%v", err)
	}
	// Check the policy of every task the run covers now: an oracle needs
	// each one's reference solution.
	if err := checkPolicies(plans, sel); err != nil {
		return fail(1, "%v", err)
	}
	output, err := filepath.Abs(f.output)
	if err != nil {
		return fail(2, "--output: %v", err)
	}
	if f.dryRun {
		printPlan(stdout, cfg, plans, &f, sel, plugins, output)
		return 0
	}
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	for _, w := range sel.warnings {
		logger.Warn(w)
	}
	if sel.name == "llm" && sel.llm.APIKey == "" {
		return fail(2, "no API key for --policy llm: pass --llm-api-key or set %s (or llm_config.api_key);\n"+
			"--policy oracle runs each environment's reference solution without one", strings.Join(apiKeyVars, " or "))
	}

	var list []gym.Env
	if f.server != "" {
		token := f.token
		if token == "" {
			token = os.Getenv("GYMSERVER_TOKEN")
		}
		envOf, closeFn, err := dialServers(ctx, f.server, token)
		if err != nil {
			return fail(1, "%v", err)
		}
		defer closeFn()
		for _, ec := range cfg.Environments {
			e, err := envOf(ctx, ec.ID)
			if err != nil {
				return fail(1, "server %s: environment %s: %v", f.server, ec.ID, err)
			}
			list = append(list, e)
		}
	} else {
		reg, closeFn, err := load(ctx, cfg, logger, loadOptions{
			WarmPool:    f.warmPool,
			CreatedPool: f.createdPool,
			Reuse:       f.reuse,
			FloatCPUs:   f.floatCPUs,
			OrphanAfter: orphanAfterOption(f.orphanAfter),
			Janitor:     !f.noJanitor,
			JanitorLog:  f.janitorLog,
			Caches:      f.caches,
			Engines:     f.engines,
		})
		if err != nil {
			return fail(1, "%v", err)
		}
		defer closeFn(context.WithoutCancel(ctx))
		for _, ec := range cfg.Environments {
			e, err := reg.Lookup(ec.ID)
			if err != nil {
				return fail(1, "%v", err)
			}
			list = append(list, e)
		}
	}

	opts := rollout.Options{
		Config:        cfg,
		Envs:          list,
		Policy:        sel.factory,
		PolicyName:    sel.name,
		Model:         sel.model(),
		Plugins:       plugins,
		ResultsPath:   output,
		ResultsFormat: f.resultsFormat,
		Budget:        sel.budget,
		Cost:          sel.cost(),
		Logger:        logger,
	}
	if !f.quiet {
		opts.Progress = stderr
	}
	runner, err := rollout.New(opts)
	if err != nil {
		return fail(1, "%v", err)
	}
	sum, err := runner.Run(ctx)
	if sum != nil && !f.quiet {
		fmt.Fprintln(stderr)
		rollout.WriteSummary(stderr, sum)
	}
	if sum != nil {
		fmt.Fprintf(stderr, "results: %s\nstats: %s\ntrajectories: %s\n", sum.ResultsPath, sum.StatsPath, sum.TrajectoryDir)
	}
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		fmt.Fprintln(stderr, "gymserver rollout: interrupted; finished episodes were written")
		return 130
	}
	return fail(1, "%v", err)
}

// policySelection is the policy chosen by --policy.
type policySelection struct {
	name    string
	factory rollout.PolicyFactory
	// llm is the LLM config, set for --policy llm.
	llm *policy.Config
	// keySource names where the API key came from.
	keySource string
	// budget is the per-episode cap of --policy llm.
	budget rollout.Budget
	// warnings are the settings the run accepts but cannot honour as
	// the seed did, one line each.
	warnings []string
}

func (s policySelection) model() string {
	if s.llm != nil {
		return s.llm.Model
	}
	return ""
}

// cost returns the cost estimate of the LLM policy; nil for other
// policies, which spend nothing.
func (s policySelection) cost() func(gym.Usage) float64 {
	if s.llm != nil {
		return s.llm.Cost
	}
	return nil
}

// selectPolicy builds the policy factory named by --policy. It contacts
// nothing.
func selectPolicy(cfg *config.Config, f *rolloutFlags, logger *slog.Logger) (policySelection, error) {
	switch {
	case f.policy == "llm":
		pc, source := llmConfig(cfg.LLM, f)
		pc.Logger = logger
		if err := pc.Validate(); err != nil {
			return policySelection{}, err
		}
		sel := policySelection{name: "llm", llm: &pc, keySource: source}
		sel.budget, sel.warnings = llmBudget(cfg.LLM, f, pc)
		var shared gym.Policy
		sel.factory = func(gym.EnvSpec, gym.TaskSpec) (gym.Policy, error) {
			if shared == nil {
				p, err := policy.NewLLM(pc)
				if err != nil {
					return nil, err
				}
				shared = p
			}
			return shared, nil
		}
		return sel, nil
	case f.policy == "oracle":
		// Each task applies its own reference, found by environment and
		// task id in the config (a remote environment's tasks too).
		tasks := map[string]map[string]config.Task{}
		for _, ec := range cfg.Environments {
			m := make(map[string]config.Task, len(ec.Tasks))
			for _, t := range ec.Tasks {
				m[t.ID] = t
			}
			tasks[ec.ID] = m
		}
		return policySelection{name: "oracle", factory: func(spec gym.EnvSpec, ts gym.TaskSpec) (gym.Policy, error) {
			m, ok := tasks[spec.ID]
			if !ok {
				return nil, fmt.Errorf("environment %s is not in the config: %w", spec.ID, gym.ErrNotFound)
			}
			t, ok := m[ts.ID]
			if ec, _ := cfg.Environment(spec.ID); !ok && ts.ID == "" && len(ec.Tasks) > 0 {
				// No task named: the environment's first, as Reset picks.
				t, ok = ec.Tasks[0], true
			}
			if !ok {
				return nil, fmt.Errorf("task %s is not in the config: %w", ts.ID, gym.ErrNotFound)
			}
			calls, err := envs.ReferenceCalls(t)
			if err != nil {
				return nil, err
			}
			return policy.NewScripted(calls), nil
		}}, nil
	case strings.HasPrefix(f.policy, "replay:"):
		file := strings.TrimPrefix(f.policy, "replay:")
		p, err := policy.LoadReplay(file)
		if err != nil {
			return policySelection{}, err
		}
		return policySelection{name: f.policy, factory: func(gym.EnvSpec, gym.TaskSpec) (gym.Policy, error) { return p, nil }}, nil
	}
	return policySelection{}, fmt.Errorf("--policy %q: want llm, oracle or replay:FILE", f.policy)
}

// llmConfig merges the policy defaults, llm_config and the flags, and
// returns the config with where its API key came from.
func llmConfig(l config.LLM, f *rolloutFlags) (policy.Config, string) {
	pc := policy.DefaultConfig()
	// The OpenAI SDKs' variable (the Agentic Rollout Library seed reads
	// it too) comes before the default, after llm_config and the flag.
	if v := os.Getenv("OPENAI_BASE_URL"); v != "" {
		pc.BaseURL = v
	}
	// llm_config holds only what the file set.
	if l.Model != "" {
		pc.Model = l.Model
	}
	if l.BaseURL != "" {
		pc.BaseURL = l.BaseURL
	}
	if l.Temperature != nil {
		pc.Temperature = *l.Temperature
	}
	if l.MaxTokens > 0 {
		pc.MaxTokens = l.MaxTokens
	}
	if l.Timeout > 0 {
		pc.Timeout = l.Timeout
	}
	if l.MaxRetries != nil {
		pc.MaxRetries = *l.MaxRetries
	}
	pc.MaxContextMessages, pc.MaxOutputLength = l.MaxContextMessages, l.MaxOutputLength
	if l.Mode == "react" {
		pc.Mode = policy.ModeReAct
	} else {
		pc.Mode = policy.ModeNative
	}
	if f.set["llm-model"] {
		pc.Model = f.model
	}
	if f.set["llm-base-url"] {
		pc.BaseURL = f.baseURL
	}
	if f.set["llm-temperature"] {
		pc.Temperature = f.temperature
	}
	if f.set["llm-max-tokens"] {
		pc.MaxTokens = f.maxTokens
	}
	if f.set["llm-timeout"] {
		pc.Timeout = f.timeout.d
	}
	if f.set["llm-max-context-messages"] {
		pc.MaxContextMessages = f.maxContext
	}
	if f.set["llm-max-output-length"] {
		pc.MaxOutputLength = f.maxOutput
	}
	// The cache is the seed's enable_caching, off unless asked (the seed
	// had it on; here it is used only at temperature 0, see policy.Config).
	caching := (l.EnableCaching != nil && *l.EnableCaching) || f.usage.enableCaching
	if f.usage.disableCaching {
		caching = false
	}
	size := policy.DefaultCacheSize
	if l.CacheSize > 0 {
		size = l.CacheSize
	}
	if f.set["llm-cache-size"] {
		size = f.usage.cacheSize
	}
	if caching {
		pc.CacheSize = size
	}
	if (l.WarnHighUsage != nil && !*l.WarnHighUsage) || (l.TrackTokenUsage != nil && !*l.TrackTokenUsage) ||
		f.usage.disableWarnings || f.usage.disableTokenTracking {
		pc.HighUsageCost = 0
	}
	if l.InputCostPer1K != nil || l.OutputCostPer1K != nil {
		// A price given in part takes the rest from the seed's table.
		pc.Price, _ = policy.PriceFor(pc.Model)
		if l.InputCostPer1K != nil {
			pc.Price.InputPer1K = *l.InputCostPer1K
		}
		if l.OutputCostPer1K != nil {
			pc.Price.OutputPer1K = *l.OutputCostPer1K
		}
	}
	switch {
	case f.apiKey != "":
		pc.APIKey = f.apiKey
		return pc, "--llm-api-key"
	default:
		for _, v := range apiKeyVars {
			if k := os.Getenv(v); k != "" {
				pc.APIKey = k
				return pc, "$" + v
			}
		}
		if l.APIKey != "" {
			pc.APIKey = l.APIKey
			return pc, "llm_config.api_key"
		}
	}
	return pc, ""
}

// llmBudget returns the per-episode budget of an LLM policy (llm_config,
// then the flags) and a warning for each setting the seed honoured in a way
// that has no effect here.
func llmBudget(l config.LLM, f *rolloutFlags, pc policy.Config) (rollout.Budget, []string) {
	var b rollout.Budget
	var warns []string
	if l.MaxCostPerEpisode != nil {
		b.MaxCost = *l.MaxCostPerEpisode
	}
	if f.set["llm-max-cost-per-episode"] {
		b.MaxCost = f.usage.maxCost
	}
	b.MaxTokens = l.MaxTokensPerEpisode
	if f.set["llm-max-tokens-per-episode"] {
		b.MaxTokens = f.usage.maxEpisodeTokens
	}
	wantCache := (l.EnableCaching != nil && *l.EnableCaching) || f.usage.enableCaching
	if wantCache && !f.usage.disableCaching && !pc.Caches() {
		warns = append(warns, fmt.Sprintf("response caching is off at temperature %g: the seed replayed its answer to an identical conversation at any temperature, "+
			"which would turn repeated episodes into copies; here the cache answers only at temperature 0 (--llm-temperature 0)", pc.Temperature))
	}
	if (l.CacheSize > 0 || f.set["llm-cache-size"]) && !wantCache && !f.usage.disableCaching {
		warns = append(warns, "cache_size is set but there is no response cache: the seed cached by default; "+
			"here caching is off unless llm_config.enable_caching or --llm-enable-caching asks for it (at temperature 0 only)")
	}
	if f.usage.disableTokenTracking {
		warns = append(warns, "--llm-disable-token-tracking: the seed stopped counting tokens; token usage is still recorded here (the endpoint reports it at no cost), only the high-usage warnings are off")
	}
	if _, known := policy.PriceFor(pc.Model); b.MaxCost > 0 && !known && pc.Price == (policy.Price{}) {
		p, _ := policy.PriceFor(pc.Model)
		warns = append(warns, fmt.Sprintf("max_cost_per_episode: model %s is not in the seed's price table, so its cost is estimated at GPT-4's %s as in the seed; "+
			"set llm_config.input_cost_per_1k_tokens and output_cost_per_1k_tokens", pc.Model, p))
	}
	return b, warns
}

// maxPolicyErrors bounds the tasks whose policy failed that the start-up
// check reports; the rest are counted.
const maxPolicyErrors = 10

// checkPolicies makes the policy of every planned task once, as the run
// will, and reports the tasks whose policy cannot be made (an oracle's
// task without a reference solution).
func checkPolicies(plans []rollout.EnvPlan, sel policySelection) error {
	var errs []error
	failed := 0
	for _, p := range plans {
		for _, id := range p.Tasks {
			if _, err := sel.factory(gym.EnvSpec{ID: p.ID}, gym.TaskSpec{ID: id}); err != nil {
				if failed++; failed <= maxPolicyErrors {
					errs = append(errs, fmt.Errorf("environment %s: task %s: policy %s: %w", p.ID, id, sel.name, err))
				}
			}
		}
	}
	if failed > maxPolicyErrors {
		errs = append(errs, fmt.Errorf("... and %d more tasks", failed-maxPolicyErrors))
	}
	return errors.Join(errs...)
}

// planTasksShown is how many task ids the plan lists per environment.
const planTasksShown = 5

// printPlan prints what a run would do.
func printPlan(w io.Writer, cfg *config.Config, plans []rollout.EnvPlan, f *rolloutFlags, sel policySelection, plugins *plugin.Set, output string) {
	plan := rollout.PlanFor(cfg, plans, sel.name)
	fmt.Fprintf(w, "config: %s (%d environments)\n", cfg.Path, len(cfg.Environments))
	switch {
	case sel.llm != nil:
		key := "from " + sel.keySource
		if sel.keySource == "" {
			key = "MISSING: a real run needs --llm-api-key or $" + strings.Join(apiKeyVars, " or $") + " (or use --policy oracle)"
		}
		fmt.Fprintf(w, "policy: llm, model %s at %s (%s mode, temperature %g, max tokens %d, timeout %s, %d retries); API key %s\n",
			sel.llm.Model, sel.llm.BaseURL, sel.llm.Mode, sel.llm.Temperature, sel.llm.MaxTokens, sel.llm.Timeout, sel.llm.MaxRetries, key)
		fmt.Fprintf(w, "llm usage: %s; %s; %s\n", describeCache(*sel.llm), describeWarnings(*sel.llm), describeBudget(sel.budget))
	default:
		fmt.Fprintf(w, "policy: %s\n", sel.name)
	}
	target := "in process, Docker sandboxes"
	if f.server != "" {
		target = "remote gymserver at " + f.server
	}
	fmt.Fprintf(w, "environments: %s\n", target)
	ctl := cfg.EpisodeControl
	for _, p := range plans {
		ec, _ := cfg.Environment(p.ID)
		tasks := ""
		if p.TaskCount > 1 {
			tasks = fmt.Sprintf(" over %d of %d tasks", len(p.Tasks), p.TaskCount)
		}
		fmt.Fprintf(w, "  %s: up to %d episode(s)%s, image %s, %d test command(s), global timeout %s, max actions %d\n",
			p.ID, p.Episodes, tasks, ec.DockerImage, len(ec.UnitTests), ec.Timeouts.Global, ec.MaxActions)
		if p.TaskCount > 1 && len(p.Tasks) > 0 {
			shown := p.Tasks[:min(len(p.Tasks), planTasksShown)]
			more := ""
			if n := len(p.Tasks) - len(shown); n > 0 {
				more = fmt.Sprintf(", ... %d more", n)
			}
			fmt.Fprintf(w, "    tasks: %s%s\n", strings.Join(shown, ", "), more)
		}
		if n := len(p.Tasks); n > 1 && ctl.EpisodesPerTask == 0 && p.Episodes < n {
			fmt.Fprintf(w, "warning: %s: %d episode(s) cover %d of its %d tasks; set episode_control_config.episodes_per_task (--episodes-per-task) to run each of them\n",
				p.ID, p.Episodes, p.Episodes, n)
		}
	}
	filter := "all"
	if cfg.Rollout.TaskFilter != "" {
		filter = fmt.Sprintf("those matching %q", cfg.Rollout.TaskFilter)
	}
	sample := ""
	if cfg.Rollout.TasksPerEnv > 0 {
		sample = fmt.Sprintf(", a sample of %d per environment (sample_seed %d)", cfg.Rollout.TasksPerEnv, cfg.Rollout.SampleSeed)
	}
	per := fmt.Sprintf("max_episodes %d per environment, spread over its tasks", ctl.MaxEpisodes)
	if ctl.EpisodesPerTask > 0 {
		per = fmt.Sprintf("%d per task", ctl.EpisodesPerTask)
	}
	fmt.Fprintf(w, "tasks: %s%s; episodes: %s\n", filter, sample, per)
	minRate := "none"
	if ctl.MinSuccessRate != nil {
		minRate = strconv.FormatFloat(*ctl.MinSuccessRate, 'f', -1, 64)
	}
	fmt.Fprintf(w, "episodes: at most %d in total (safety_limit %d), %d at a time; stop_on_success %t, min_success_rate %s (per task)\n",
		rollout.Total(plan), ctl.SafetyLimit, cfg.Rollout.MaxParallelRollouts, ctl.StopOnSuccess, minRate)
	fmt.Fprintf(w, "outputs: results %s (%s format), stats %s, trajectories %s (results saved every %d episode(s); state persistence %t)\n",
		output, f.resultsFormat, rollout.StatsPath(output), rollout.TrajectoryDir(output, cfg.Rollout.TrajectoryOutputPath),
		cfg.Rollout.SaveTrajectoryInterval, cfg.Rollout.StatePersistenceEnabled)
	state := "enabled"
	if !cfg.Rollout.EnablePlugins {
		state = "disabled (rollout_config.enable_plugins is false)"
	}
	names := plugins.Names()
	if len(names) == 0 && len(plugins.Disabled()) == 0 {
		fmt.Fprintln(w, "plugins: none")
	} else {
		fmt.Fprintf(w, "plugins: %s\n", state)
		for _, n := range names {
			hs := plugins.HooksOf(n)
			s := make([]string, len(hs))
			for i, h := range hs {
				s[i] = string(h)
			}
			fmt.Fprintf(w, "  %s: hooks %s\n", n, strings.Join(s, ", "))
		}
		for _, n := range plugins.Disabled() {
			fmt.Fprintf(w, "  %s: disabled\n", n)
		}
	}
	for _, warn := range append(slices.Clone(cfg.Warnings), sel.warnings...) {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	fmt.Fprintln(w, "dry run: configuration valid; nothing was started")
}

func describeCache(c policy.Config) string {
	switch {
	case c.Caches():
		return fmt.Sprintf("response cache of %d answers", c.CacheSize)
	case c.CacheSize > 0:
		return fmt.Sprintf("response cache off at temperature %g (used at 0 only)", c.Temperature)
	}
	return "no response cache"
}

func describeWarnings(c policy.Config) string {
	if c.HighUsageCost <= 0 {
		return "no high-usage warnings"
	}
	return fmt.Sprintf("high-usage warnings from an estimated $%g at %s", c.HighUsageCost, c.EffectivePrice())
}

func describeBudget(b rollout.Budget) string {
	var caps []string
	if b.MaxTokens > 0 {
		caps = append(caps, fmt.Sprintf("%d tokens", b.MaxTokens))
	}
	if b.MaxCost > 0 {
		caps = append(caps, fmt.Sprintf("$%g", b.MaxCost))
	}
	if len(caps) == 0 {
		return "no per-episode budget"
	}
	return "per-episode budget " + strings.Join(caps, " or ")
}

// dialServers connects to the servers of --server: one URL is one
// connection; several (comma-separated) are a gymclient.Pool that spreads
// sessions over them, places new ones on the others when one goes away,
// and keeps every fork on its session's server. It returns how to look up
// an environment and how to close the connections.
func dialServers(ctx context.Context, list, token string) (func(context.Context, string) (gym.Env, error), func(), error) {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return nil, nil, fmt.Errorf("--server %q names no URL", list)
	}
	if len(urls) == 1 {
		c, err := gymclient.Dial(ctx, urls[0], gymclient.Options{Token: token})
		if err != nil {
			return nil, nil, fmt.Errorf("connect %s: %w", urls[0], err)
		}
		env := func(ctx context.Context, id string) (gym.Env, error) {
			e, err := c.Env(ctx, id)
			if err != nil {
				return nil, err // not a typed nil in the interface
			}
			return e, nil
		}
		return env, func() { c.Close() }, nil
	}
	p, err := gymclient.DialPool(ctx, urls, gymclient.PoolOptions{Options: gymclient.Options{Token: token}})
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", list, err)
	}
	return p.Env, func() { p.Close() }, nil
}
