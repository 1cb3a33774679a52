package gym

import (
	"context"
	"encoding/json"
	"time"
)

// Env is an environment: a family of tasks that share tools and a sandbox
// recipe. An Env is safe for concurrent use; each Reset makes an independent
// Session.
type Env interface {
	// Spec describes the environment: its id, tasks and tools.
	Spec() EnvSpec
	// Reset starts a new episode and returns its session together with the
	// initial observation. Errors: ErrNotFound for an unknown task,
	// ErrInvalidArgument for bad options, ErrSandbox when the sandbox could
	// not be started. The caller must Close the session.
	Reset(ctx context.Context, req ResetRequest) (Session, Reset, error)
}

// Session is one episode in one sandbox.
//
// Step, Evaluate and Close may be called from different goroutines, but a
// session runs one call at a time: concurrent calls are serialised. After the
// episode ends (Step returned Terminated or Truncated) Step returns an error
// wrapping ErrEpisodeDone; Evaluate and Close keep working and return the same
// evaluation. Close is idempotent, always releases the sandbox, and returns
// the final result.
type Session interface {
	// ID is the session's unique id.
	ID() string
	// Step applies one action (one or more tool calls) and returns what the
	// agent observes. Bad actions are not errors: they come back as
	// agent_error observations. An error is returned only when the step could
	// not be attempted (ErrEpisodeDone, ErrSandbox, context cancelled).
	Step(ctx context.Context, a Action) (StepResult, error)
	// Evaluate ends the episode if it is still running (reason "evaluated"),
	// runs the hidden tests once and returns the evaluation; later calls
	// return the same evaluation.
	Evaluate(ctx context.Context) (Evaluation, error)
	// Close ends the episode, releases the sandbox and returns the final
	// result. An episode closed before it ended is not evaluated unless
	// it was evaluated already.
	Close(ctx context.Context) (Result, error)
}

// Snapshotter is implemented by sessions whose state can be saved while
// the episode runs: the sandbox's files (running processes are not kept)
// and the episode's step and action counts and elapsed time.
type Snapshotter interface {
	// Snapshot saves the session's state; the session goes on unchanged.
	// Errors: ErrEpisodeDone once the episode ended (the hidden tests may
	// be in the sandbox by then), ErrSandbox.
	Snapshot(ctx context.Context) (Snapshot, error)
}

// Forker is implemented by environments that start sessions from the
// snapshots of their sessions. Snapshots live until dropped or until the
// environment's provider closes.
type Forker interface {
	// Fork starts a new session from a snapshot: its sandbox holds the
	// snapshot's files, and the episode continues from the snapshot's step
	// and action counts with the rest of its time budget, which the Reset's
	// Limits.GlobalTimeout reports. Each call makes an
	// independent session. Errors: ErrNotFound for an unknown snapshot,
	// ErrSandbox.
	Fork(ctx context.Context, snapshotID string) (Session, Reset, error)
	// DropSnapshot deletes a snapshot; sessions forked from it go on.
	// Errors: ErrNotFound for an unknown snapshot.
	DropSnapshot(ctx context.Context, snapshotID string) error
}

// Snapshot describes a saved session state.
type Snapshot struct {
	ID     string `json:"id"`
	EnvID  string `json:"env"`
	TaskID string `json:"task"`
	// SessionID is the session it was taken from.
	SessionID string `json:"session_id"`
	Steps     int    `json:"steps"`
	Actions   int    `json:"actions"`
	// Elapsed is the episode time used when it was taken.
	Elapsed Duration  `json:"elapsed"`
	Created time.Time `json:"created"`
	// Mode says how the sandbox's files were saved: SnapshotArchive or
	// SnapshotCommit.
	Mode string `json:"mode,omitempty"`
	// Fallback says why a snapshot that was tried as an archive was
	// committed instead; empty otherwise.
	Fallback string `json:"fallback,omitempty"`
	// Bytes is the size of the archive (SnapshotArchive only).
	Bytes int64 `json:"bytes,omitempty"`
}

// Snapshot modes (Snapshot.Mode).
const (
	// SnapshotArchive keeps the files the agent can write as an archive,
	// which forks restore into fresh (or pooled) sandboxes of the task.
	SnapshotArchive = "archive"
	// SnapshotCommit keeps the whole sandbox's files as an image, which
	// forks start from.
	SnapshotCommit = "commit"
)

// ResetRequest selects the task of a new episode.
type ResetRequest struct {
	// Task is the task id. Empty lets Seed pick the task (the same seed
	// picks the same task of the same task list; PROTOCOL.md §4.3), or
	// without a seed picks one at random.
	Task string `json:"task,omitempty"`
	// Seed makes task sampling and any randomness reproducible.
	Seed *int64 `json:"seed,omitempty"`
	// Options are environment-specific settings.
	Options map[string]any `json:"options,omitempty"`
}

// OptionEnvironmentVariables is the reset option that sets environment
// variables in the episode's sandbox, over the environment's own: an
// object of strings. Environments built from a config (envs.TaskEnv) take
// it; the rollout runner sends it for a pre_episode plugin's
// environment_variables.
const OptionEnvironmentVariables = "environment_variables"

// Reset is the initial observation of an episode.
type Reset struct {
	SessionID    string `json:"session_id"`
	EnvID        string `json:"env"`
	TaskID       string `json:"task"`
	SystemPrompt string `json:"system_prompt"`
	Prompt       string `json:"prompt"`
	Tools        []Tool `json:"tools"`
	// Messages is the initial transcript: the system and user messages.
	Messages []Message     `json:"messages"`
	Limits   EpisodeLimits `json:"limits"`
	// ForkOf is the snapshot a forked session started from; Steps and
	// Actions are then the counts it continues from.
	ForkOf  string `json:"fork_of,omitempty"`
	Steps   int    `json:"steps,omitempty"`
	Actions int    `json:"actions,omitempty"`
}

// EpisodeLimits are the bounds of one episode.
type EpisodeLimits struct {
	// MaxActions is the number of tool calls after which the episode is
	// truncated; 0 means no limit.
	MaxActions int `json:"max_actions"`
	// GlobalTimeout is the wall-clock budget of the episode; 0 means none.
	// A forked session reports what remains of it (at least a millisecond).
	GlobalTimeout Duration `json:"global_timeout"`
	// CommandTimeout is the default (and maximum) time of one command.
	CommandTimeout Duration `json:"command_timeout"`
}

// Action is what an agent does in one step: one or more tool calls, given
// either as structured calls or as raw model text that the environment
// parses (gym/toolparse). Environments read the calls with toolparse.Calls,
// so every path parses text the same way.
type Action struct {
	// ToolCalls are structured calls; unused when Parser is set.
	ToolCalls []ToolCall `json:"tool_calls"`
	// Text is raw model text holding the calls, read with Parser.
	Text string `json:"text,omitempty"`
	// Parser names the format of Text ("hermes", "json", "react"); empty
	// means the action is ToolCalls. An unknown parser is an error wrapping
	// ErrInvalidArgument; text the parser cannot read is an agent_error
	// observation.
	Parser string `json:"parser,omitempty"`
}

// StepResult is the outcome of one step, in Gym terms.
type StepResult struct {
	Observation Observation `json:"observation"`
	// Reward is 0 until the episode ends; the final step carries the
	// evaluation's reward.
	Reward     float64  `json:"reward"`
	Terminated bool     `json:"terminated"`
	Truncated  bool     `json:"truncated"`
	Info       StepInfo `json:"info"`
	// ToolCalls are the calls the step ran, in order, with the ids their
	// tool messages answer: the action's calls, or those parsed from its
	// text. Empty for a turn without a readable call.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Done reports whether the episode ended with this step.
func (r StepResult) Done() bool { return r.Terminated || r.Truncated }

// Observation is what the agent sees after a step.
type Observation struct {
	// Messages holds one tool message per tool call, in call order.
	Messages []Message `json:"messages"`
	// Text is the same results as plain text, for text-only policies.
	Text string `json:"text"`
}

// StepInfo carries diagnostics of a step.
type StepInfo struct {
	// Step is the 1-based index of this step in the episode.
	Step int `json:"step"`
	// Actions is the number of tool calls made so far in the episode.
	Actions int        `json:"actions"`
	Calls   []CallInfo `json:"calls"`
	// TerminationReason is set on the step that ended the episode.
	TerminationReason TerminationReason `json:"termination_reason,omitempty"`
	// Evaluation is set on the step that ended the episode.
	Evaluation *Evaluation `json:"evaluation,omitempty"`
	// AgentDone is true when the agent called mark_done.
	AgentDone bool `json:"agent_done,omitempty"`
}

// Mask reports whether the step says nothing about the agent: a call or
// the evaluation failed with an infrastructure error class, or the sandbox
// ended the episode. Trainers drop such samples.
func (i StepInfo) Mask() bool {
	for _, c := range i.Calls {
		if Masked(c.ErrorClass) {
			return true
		}
	}
	if i.Evaluation != nil && i.Evaluation.Mask {
		return true
	}
	return i.TerminationReason == ReasonSandboxError
}

// CallInfo describes the execution of one tool call.
type CallInfo struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// ExitCode is the command's exit status; -1 when it did not exit
	// normally or the tool runs no command.
	ExitCode int `json:"exit_code"`
	// Duration is how long the call took.
	Duration Duration `json:"duration"`
	// ErrorClass classifies a failed call; empty on success.
	ErrorClass ErrorClass `json:"error_class,omitempty"`
	Error      string     `json:"error,omitempty"`
	// OutputDropped is the number of output bytes cut from the middle.
	OutputDropped int64 `json:"output_dropped,omitempty"`
	// Blocked is true when a filter refused the call before it ran.
	Blocked bool `json:"blocked,omitempty"`
}

// TerminationReason says why an episode ended.
type TerminationReason string

// The termination reasons.
const (
	// ReasonCompleted: the agent called mark_done.
	ReasonCompleted TerminationReason = "completed"
	// ReasonMaxActions: the action limit was reached (truncation).
	ReasonMaxActions TerminationReason = "max_actions"
	// ReasonTimeout: the global episode timeout passed (truncation).
	ReasonTimeout TerminationReason = "timeout"
	// ReasonEvaluated: Evaluate was called on a running episode.
	ReasonEvaluated TerminationReason = "evaluated"
	// ReasonClosed: the session was closed before the episode ended.
	ReasonClosed TerminationReason = "closed"
	// ReasonSandboxError: the sandbox failed (truncation, masked).
	ReasonSandboxError TerminationReason = "sandbox_error"
	// ReasonAgentCrash: the agent broke its own sandbox, e.g. ran it out
	// of memory so that the container died (truncation, scored 0, not
	// masked: the failure is the agent's).
	ReasonAgentCrash TerminationReason = "agent_crash"
	// ReasonPolicyError: the policy failed (set by policy drivers).
	ReasonPolicyError TerminationReason = "policy_error"
	// ReasonStopped: the runner was stopped (set by policy drivers).
	ReasonStopped TerminationReason = "stopped"
	// ReasonNoAction: the policy answered without calling a tool and the
	// driver ended the episode (set by policy drivers).
	ReasonNoAction TerminationReason = "no_action"
	// ReasonBudget: the episode spent its token or cost budget
	// (llm_config.max_tokens_per_episode, max_cost_per_episode) and the
	// driver evaluated it without asking the policy again (truncation;
	// set by policy drivers).
	ReasonBudget TerminationReason = "budget"
)

// Truncation reports whether r ends an episode by truncation (a limit or a
// failure) rather than by reaching a terminal state.
func (r TerminationReason) Truncation() bool {
	switch r {
	case ReasonCompleted, ReasonEvaluated:
		return false
	}
	return true
}

// Evaluation is the verdict of the hidden tests on an episode.
type Evaluation struct {
	// Reward is in [0, 1]: the pass rate, or 0/1 in binary mode.
	Reward float64 `json:"reward"`
	// Success is true when Reward reached the task's success threshold.
	Success bool `json:"success"`
	// Mode is the reward mode: "pass_rate" or "binary".
	Mode   string `json:"mode"`
	Passed int    `json:"passed"`
	Failed int    `json:"failed"`
	// Errors counts test cases that errored (counted as not passed).
	Errors  int `json:"errors"`
	Skipped int `json:"skipped"`
	// Total is the number of test cases that count towards the reward.
	Total int `json:"total"`
	// Tests holds one entry per test case.
	Tests []TestCase `json:"tests"`
	// Commands holds one entry per unit_tests command.
	Commands []TestCommand `json:"commands"`
	Duration Duration      `json:"duration"`
	// ErrorClass is set when the tests could not be run or parsed
	// (verifier_error) or the sandbox failed (sandbox_error).
	ErrorClass ErrorClass `json:"error_class,omitempty"`
	Error      string     `json:"error,omitempty"`
	// Mask tells a trainer to drop the sample: the failure says nothing
	// about the agent.
	Mask bool `json:"mask"`
	// Tampered is true when the test run showed signs of forgery by the
	// code under test (a canary test passed or went missing, the report
	// does not agree with itself, or something wrote to the report stream
	// besides pytest). The reward is then 0, unmasked, and Error says why.
	Tampered bool `json:"tampered,omitempty"`
	// Metrics are the named numbers a verifier reported besides the
	// reward (a Harbor task's reward.json); RewardKey says which one is the
	// reward, as "FILE:KEY" (e.g. "reward.json:reward").
	Metrics   map[string]float64 `json:"metrics,omitempty"`
	RewardKey string             `json:"reward_key,omitempty"`
}

// Test case statuses.
const (
	TestPassed  = "passed"
	TestFailed  = "failed"
	TestError   = "error"
	TestSkipped = "skipped"
)

// TestCase is the result of one test case.
type TestCase struct {
	// Name identifies the case, e.g. "tests/test_api.py::test_add".
	Name   string `json:"name"`
	Status string `json:"status"`
	// Message is the failure message, if any.
	Message string `json:"message,omitempty"`
	// Command is the index of the unit_tests command that ran it.
	Command int `json:"command"`
}

// TestCommand is the run of one unit_tests command.
type TestCommand struct {
	Command  string   `json:"command"`
	ExitCode int      `json:"exit_code"`
	Output   string   `json:"output"`
	Duration Duration `json:"duration"`
	TimedOut bool     `json:"timed_out,omitempty"`
	// Source says where the per-test results came from: "junit", "pytest"
	// or "exit_code".
	Source string `json:"source"`
	// Success is true when the command exited 0.
	Success bool `json:"success"`
}

// Result is the final record of a closed session.
type Result struct {
	SessionID string `json:"session_id"`
	EnvID     string `json:"env"`
	TaskID    string `json:"task"`
	Steps     int    `json:"steps"`
	Actions   int    `json:"actions"`
	// TerminationReason says how the episode ended.
	TerminationReason TerminationReason `json:"termination_reason"`
	// AgentDone is true when the agent called mark_done.
	AgentDone bool `json:"agent_done"`
	// Evaluation is nil when the episode was closed before it ended.
	Evaluation *Evaluation `json:"evaluation,omitempty"`
	StartTime  time.Time   `json:"start_time"`
	EndTime    time.Time   `json:"end_time"`
}

// Duration is a time.Duration that encodes as seconds (a float) in JSON, the
// unit trainers and the seed's trajectories use.
type Duration time.Duration

// Seconds returns d in seconds.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

// MarshalJSON encodes d as seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).Seconds())
}

// UnmarshalJSON decodes seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s float64
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*d = Duration(s * float64(time.Second))
	return nil
}

// EnvSpec describes an environment.
type EnvSpec struct {
	ID          string `json:"id"`
	Description string `json:"description,omitempty"`
	// Tasks are the environment's first tasks (all of them when there are
	// few); TaskCount is how many there are. A TaskLister pages through
	// the rest.
	Tasks     []TaskSpec `json:"tasks"`
	TaskCount int        `json:"task_count"`
	Tools     []Tool     `json:"tools"`
}

// TaskLister is an Env with many tasks that lists them page by page.
type TaskLister interface {
	// Tasks returns up to limit tasks (all from offset when limit < 0)
	// starting at offset, in a stable order, and the number of tasks.
	Tasks(offset, limit int) ([]TaskSpec, int)
}

// TaskSpec describes one task of an environment.
type TaskSpec struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
	// Tests is the number of unit_tests commands (test cases are known only
	// after a run).
	TestCommands int  `json:"test_commands"`
	HasReference bool `json:"has_reference"`
	// Metadata is the task's free-form data from its configuration.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Policy chooses the next assistant message from the transcript so far.
// Implementations must be safe for concurrent use by many episodes.
type Policy interface {
	// Act returns the next assistant message for the transcript and tools.
	// Errors wrap ErrPolicy (API failures after retries) or the context's
	// error.
	Act(ctx context.Context, messages []Message, tools []Tool) (Turn, error)
}

// Turn is one answer of a policy.
type Turn struct {
	// Message is the assistant message, with any tool calls.
	Message Message `json:"message"`
	Usage   Usage   `json:"usage"`
	// Raw is the provider's raw response text, when kept.
	Raw string `json:"raw,omitempty"`
	// FinishReason is the provider's reason for ending the answer
	// ("stop", "tool_calls", "length", "content_filter"), when known.
	FinishReason string `json:"finish_reason,omitempty"`
	// Parser is set by text-mode policies: Message.Content is the model's
	// text, whose tool calls are written in this parser's format (see
	// Action.Parser), and Message.ToolCalls is empty. A driver steps the
	// text with the parser, and the environment reads the calls.
	Parser string `json:"parser,omitempty"`
	// ParseError is set by policies that parse the text themselves when
	// the model attempted a
	// tool call in its text that could not be parsed; Message then has no
	// tool calls. It is written for the agent: a driver can send it back
	// as the next user message instead of ending the episode.
	ParseError string `json:"parse_error,omitempty"`
}
