package config

import (
	"encoding/json"
	"time"
)

// Defaults. They live here and nowhere else.
const (
	DefaultWorkingDirectory   = "/workspace"
	DefaultGlobalTimeout      = 1800 * time.Second
	DefaultCommandTimeout     = 300 * time.Second
	DefaultTestTimeout        = 120 * time.Second
	DefaultMaxActions         = 100
	DefaultMaxOutput          = 32 << 10
	DefaultMaxParallel        = 4
	DefaultTrajectoryPath     = "trajectories"
	DefaultMaxEpisodes        = 1
	DefaultSafetyLimit        = 100
	DefaultNetwork            = "none"
	DefaultRewardMode         = RewardPassRate
	DefaultSuccessThreshold   = 1.0
	DefaultMaxRetries         = 0
	DefaultPluginTimeout      = 30 * time.Second
	DefaultServiceStartup     = 30 * time.Second
	DefaultTemplatePrompt     = "You are an expert software engineer working in a Docker container environment. You have access to shell commands, can read and write files, and should implement the requested functionality step by step. Call mark_done when you are finished."
	maxCopyBytes              = 64 << 20
	defaultSaveTrajectoryEach = 1
)

// Reward modes.
const (
	// RewardPassRate scores passed / total test cases.
	RewardPassRate = "pass_rate"
	// RewardBinary scores 1 when every test case passes, else 0.
	RewardBinary = "binary"
)

// Config is a whole configuration file: the Real Work seed's format plus
// gymserver's additive fields. Load returns it with every default applied.
type Config struct {
	// Path is the file it was loaded from; Dir is its directory, against
	// which relative paths were resolved.
	Path string `json:"-"`
	Dir  string `json:"-"`

	Environments   []Environment  `json:"environments"`
	LLM            LLM            `json:"llm_config"`
	Rollout        Rollout        `json:"rollout_config"`
	EpisodeControl EpisodeControl `json:"episode_control_config"`
	Timeouts       Timeouts       `json:"timeout_config"`
	TemplatePrompt string         `json:"template_prompt"`
	Plugins        []Plugin       `json:"plugins"`

	// Warnings are problems that do not stop loading: deprecated root
	// fields and seed fields without effect.
	Warnings []string `json:"-"`
}

// Environment is one task environment (`environments[]`).
type Environment struct {
	ID                   string            `json:"id"`
	Description          string            `json:"description,omitempty"`
	DockerImage          string            `json:"docker_image"`
	InitCommands         []string          `json:"init_commands"`
	UnitTests            []string          `json:"unit_tests"`
	Prompt               string            `json:"prompt"`
	WorkingDirectory     string            `json:"working_directory"`
	EnvironmentVariables map[string]string `json:"environment_variables"`
	CopyFolders          []CopySpec        `json:"copy_folders"`
	MaxRetries           int               `json:"max_retries"`
	Timeouts             Timeouts          `json:"timeout_config"`

	// HiddenTests are copied in only for evaluation, after the agent is
	// done; whatever the agent left at their destinations is removed first.
	// So Load refuses a destination that is or contains the working
	// directory, a system folder (/, /usr, /etc, /tmp, ...) or another
	// hidden-test destination, or that lies below /proc, /sys, /dev or
	// /.gymserver; one that overlaps a CopyFolders destination (equal, one
	// inside the other, or a folder copied above it that puts files in
	// it); and a Reference file written into it.
	HiddenTests []CopySpec `json:"hidden_tests"`
	// Reference is a known solution, applied by `validate --solve` and the
	// oracle policy; nil when the task has none.
	Reference *Reference `json:"reference_solution,omitempty"`
	Reward    Reward     `json:"reward"`
	Resources Resources  `json:"resources"`
	// Network is "none" (the default) or a Docker network name.
	Network string `json:"network"`
	// MaxActions caps the tool calls of an episode (the seed hard-coded 100).
	MaxActions int `json:"max_actions"`
	// MaxOutput caps the bytes of one tool result shown to the agent.
	MaxOutput int `json:"max_output"`
	// PersistentShell runs execute_command in one long-lived shell per
	// session (sandbox.ExecRequest.Shell) instead of a new /bin/sh -c per
	// command: cd, exported variables and functions carry over from one
	// command to the next. Background commands still start on their own.
	PersistentShell bool `json:"persistent_shell,omitempty"`
	// VerifierZygote (default true) keeps, in each sandbox, a process of
	// the sandbox's machinery that imports pytest while the agent works
	// and forks the process of each plain pytest test command
	// (`pytest ARGS`, `python3 -m pytest ARGS`) at evaluation, so the tests
	// do not wait for Python and pytest to start. The test process is the
	// same as without it (the agent's uid, environment, directory, limits,
	// timeout); other commands, and images without pytest, run as usual.
	// False turns it off.
	VerifierZygote *bool `json:"verifier_zygote,omitempty"`
	// SharedUsr (default true) gives the sandboxes /usr/bin and /usr/lib,
	// read-only, from volumes on the Docker Engine's disk holding the base
	// image's copy (see sandbox.Spec.ShareUsr) instead of through the
	// storage driver: process starts, libraries and Python imports are
	// faster on engines whose storage driver is slow to walk paths
	// (fuse-overlayfs). Nothing else changes for the agent, who cannot
	// write there either way. Not for Harbor tasks. False turns it off.
	SharedUsr *bool `json:"shared_usr,omitempty"`
	// Tools are custom tools offered beside the standard ones in every
	// task of the environment.
	Tools []Tool `json:"tools,omitempty"`
	// Services are programs the evaluator starts from the agent's files
	// before each unit_tests command, for tasks whose tests call a server
	// the agent wrote. Without them every process is gone while the tests
	// run. Not for Harbor tasks, whose test.sh starts what it needs.
	Services []Service `json:"services,omitempty"`

	// Tasks are the environment's tasks, never empty after Load: those
	// declared inline (`tasks`), then those of TasksFile (JSONL, one task
	// object per line), then those of TasksDir (a folder of task folders:
	// task.json for a native task, task.toml for a Harbor task). An
	// environment with none of the three has one task made from its own
	// prompt, hidden_tests and reference_solution, whose id is the
	// environment's. The environment's other fields are its tasks'
	// defaults.
	Tasks     []Task `json:"tasks,omitempty"`
	TasksFile string `json:"tasks_file,omitempty"`
	TasksDir  string `json:"tasks_dir,omitempty"`
}

// ZygoteOn reports whether the environment uses the verifier zygote (see
// VerifierZygote).
func (e Environment) ZygoteOn() bool {
	return e.VerifierZygote == nil || *e.VerifierZygote
}

// SharedUsrOn reports whether the environment's sandboxes ask for the
// shared /usr volumes (see SharedUsr).
func (e Environment) SharedUsrOn() bool {
	return e.SharedUsr == nil || *e.SharedUsr
}

// Task returns the task with the given id.
func (e *Environment) Task(id string) (Task, bool) {
	for _, t := range e.Tasks {
		if t.ID == id {
			return t, true
		}
	}
	return Task{}, false
}

// CopySpec copies a host file or folder (Src, absolute after loading) to
// Dest, an absolute path inside the sandbox. In the file a copy is either
// an object {"src", "dest"} or a bare path, which copies the folder into
// the working directory under its own name.
//
// Symlinks, Src itself or any below it, are followed wherever they point:
// a link to a file copies the file's content under the link's name, a link
// to a folder copies the folder's files under it. Folders named
// __pycache__, .git or .pytest_cache are left out. Nothing else is: a
// dangling symlink, a symlink loop, a special file (FIFO, socket, device),
// a folder with no file to copy, more than 64 MiB or 100000 entries, or a
// tree more than 64 folders deep fails Load, and Files, with the host path
// at fault. A copy is never silently smaller than its source.
type CopySpec struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

// Reference is a task's reference solution: files written (copied from
// the host, then given inline), then commands run.
type Reference struct {
	Files    []CopySpec    `json:"files"`
	Contents []FileContent `json:"contents,omitempty"`
	Commands []string      `json:"commands"`
}

// Service is one entry of an environment's `services`: a command the
// evaluator runs in the background, as the agent's uid, in the working
// directory, after the agent's processes are killed and the hidden tests
// installed, once before each unit_tests command; it is killed with
// everything else when the command ends. The agent's own processes never
// stay alive for the tests: the service is started afresh from the files
// the agent left.
type Service struct {
	// Name names the service in logs and test output.
	Name string `json:"name"`
	// Command is a shell command (/bin/sh -c).
	Command string `json:"command"`
	// Port, when not 0, is a TCP port inside the sandbox: the tests start
	// once something listens on it, or once StartupTimeout has passed.
	Port int `json:"port,omitempty"`
	// StartupTimeout bounds the wait for Port (default 30 s).
	StartupTimeout time.Duration `json:"startup_timeout"`
}

// Reward says how test results become a reward.
type Reward struct {
	// Mode is RewardPassRate (default) or RewardBinary.
	Mode string `json:"mode"`
	// SuccessThreshold is the reward at which an episode counts as a
	// success (default 1.0).
	SuccessThreshold float64 `json:"success_threshold"`
}

// Resources are the sandbox limits; zero means the sandbox's default.
type Resources struct {
	// MemoryBytes is given as bytes or a size string ("1g", "512MiB").
	MemoryBytes int64   `json:"memory"`
	CPUs        float64 `json:"cpus"`
	PIDs        int64   `json:"pids"`
	// DiskBytes bounds what the sandbox writes (bytes or "4g"): its whole
	// writable layer where the storage driver has quotas, else each file.
	DiskBytes int64 `json:"disk"`
}

// Timeouts are `timeout_config`: numbers of seconds in the file.
type Timeouts struct {
	// Global bounds a whole episode, including its evaluation's start.
	Global time.Duration `json:"global_timeout"`
	// Command is the default and the maximum timeout of one command.
	Command time.Duration `json:"command_timeout"`
	// Test bounds each unit_tests command.
	Test time.Duration `json:"test_timeout"`
}

// LLM is `llm_config`. It records only what the file sets: an unset
// field is zero (nil for the pointers, whose zero is a real value) and the
// policy's own defaults apply (policy.DefaultConfig). Command-line flags
// override it.
type LLM struct {
	Model              string        `json:"model,omitempty"`
	APIKey             string        `json:"api_key,omitempty"`
	BaseURL            string        `json:"base_url,omitempty"`
	Temperature        *float64      `json:"temperature,omitempty"`
	MaxTokens          int           `json:"max_tokens,omitempty"`
	Timeout            time.Duration `json:"timeout,omitempty"`
	MaxContextMessages int           `json:"max_context_messages,omitempty"`
	MaxOutputLength    int           `json:"max_output_length,omitempty"`
	MaxRetries         *int          `json:"max_retries,omitempty"`
	// Mode is "tools" (native tool calling, the default) or "react" (tool
	// calls parsed from text, for endpoints without tool calling).
	Mode string `json:"mode,omitempty"`

	// EnableCaching answers a request identical to an earlier one (the
	// whole request: model, transcript, tools, sampling settings) from a
	// cache of CacheSize answers. It is used only at temperature 0, where
	// it cannot change what is sampled; nil leaves it off.
	EnableCaching *bool `json:"enable_caching,omitempty"`
	CacheSize     int   `json:"cache_size,omitempty"`
	// TrackTokenUsage false turns off the high-usage warnings, as in the
	// seed; token usage is recorded in trajectories and stats regardless.
	TrackTokenUsage *bool `json:"track_token_usage,omitempty"`
	// WarnHighUsage false turns off the warnings logged when the run's
	// estimated cost passes $10, then $20, $40, ...
	WarnHighUsage *bool `json:"warn_high_usage,omitempty"`
	// MaxCostPerEpisode, in USD, ends an episode as truncated (termination
	// reason "budget") once its estimated cost reached it; the tests
	// still run. MaxTokensPerEpisode does the same by tokens.
	MaxCostPerEpisode   *float64 `json:"max_cost_per_episode,omitempty"`
	MaxTokensPerEpisode int      `json:"max_tokens_per_episode,omitempty"`
	// InputCostPer1K and OutputCostPer1K are the model's prices in USD per
	// 1000 prompt and completion tokens, for the cost estimates; unset,
	// the seed's price table is used.
	InputCostPer1K  *float64 `json:"input_cost_per_1k_tokens,omitempty"`
	OutputCostPer1K *float64 `json:"output_cost_per_1k_tokens,omitempty"`
}

// Rollout is `rollout_config`.
type Rollout struct {
	MaxParallelRollouts int `json:"max_parallel_rollouts"`
	// TrajectoryOutputPath is where per-episode trajectories go; relative
	// paths are relative to the results file's directory.
	TrajectoryOutputPath string `json:"trajectory_output_path"`
	EnablePlugins        bool   `json:"enable_plugins"`
	// SaveTrajectoryInterval rewrites results.json every that many
	// finished episodes (trajectories are always written as they finish).
	SaveTrajectoryInterval int `json:"save_trajectory_interval"`
	// StatePersistenceEnabled skips episodes whose trajectory already
	// exists in TrajectoryOutputPath, so an interrupted run resumes. An
	// episode is known by its environment, task and index in the task.
	StatePersistenceEnabled bool `json:"state_persistence_enabled"`
	// TaskFilter, when set, is a regular expression (RE2, unanchored)
	// matched against "ENV/TASK": only the tasks it matches run.
	TaskFilter string `json:"task_filter"`
	// TasksPerEnv, when positive, runs a sample of that many tasks of each
	// environment (of those TaskFilter keeps); 0 runs them all.
	TasksPerEnv int `json:"tasks_per_env"`
	// SampleSeed makes the TasksPerEnv sample reproducible: the same seed
	// and the same tasks give the same sample.
	SampleSeed int64 `json:"sample_seed"`
}

// EpisodeControl is `episode_control_config`.
type EpisodeControl struct {
	// MaxEpisodes is the number of episodes run per environment when
	// EpisodesPerTask is not set; they are spread round-robin over the
	// environment's tasks (episode i runs task i mod n), so for a one-task
	// environment it is that task's number of episodes.
	MaxEpisodes int `json:"max_episodes"`
	// EpisodesPerTask, when positive, runs that many episodes of every
	// task instead, and MaxEpisodes is not used.
	EpisodesPerTask int `json:"episodes_per_task"`
	// MaxEpisodesPerEnv, when set, caps the episodes of each environment.
	MaxEpisodesPerEnv *int `json:"max_episodes_per_env"`
	// StopOnSuccess stops a task after its first success.
	StopOnSuccess bool `json:"stop_on_success"`
	// MinSuccessRate, when set, stops a task once its success rate
	// reaches it (after at least two of its episodes).
	MinSuccessRate *float64 `json:"min_success_rate"`
	// SafetyLimit caps the episodes of the whole run.
	SafetyLimit int `json:"safety_limit"`
}

// Plugin is one entry of `plugins`: a bare name in the file, or an object.
type Plugin struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	// Config is the plugin's own settings, checked by the plugin.
	Config json.RawMessage `json:"config,omitempty"`
	// Command makes an external plugin: the program gets each hook's
	// context as JSON on stdin and answers JSON. It runs in the config's
	// directory.
	Command []string `json:"command,omitempty"`
	// Hooks limits an external plugin to these hooks; empty means all.
	Hooks   []string      `json:"hooks,omitempty"`
	Timeout time.Duration `json:"timeout"`
}

// EpisodesFor returns the number of episodes to run for an environment
// of which tasks tasks run: EpisodesPerTask for each task when set, else
// MaxEpisodes, capped by MaxEpisodesPerEnv.
func (c EpisodeControl) EpisodesFor(tasks int) int {
	if tasks <= 0 {
		return 0
	}
	n := c.MaxEpisodes
	if c.EpisodesPerTask > 0 {
		n = c.EpisodesPerTask * tasks
	}
	if c.MaxEpisodesPerEnv != nil && *c.MaxEpisodesPerEnv < n {
		n = *c.MaxEpisodesPerEnv
	}
	return n
}

// Environment returns the environment with the given id.
func (c *Config) Environment(id string) (Environment, bool) {
	for _, e := range c.Environments {
		if e.ID == id {
			return e, true
		}
	}
	return Environment{}, false
}
