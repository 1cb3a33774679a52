package wire

// Path is the WebSocket endpoint.
const Path = "/v1/ws"

// Subprotocol is the WebSocket subprotocol of version 1.
const Subprotocol = "gymserver.v1+msgpack"

// Version is the protocol's major version.
const Version = 1

// MaxID is the largest request id, 2^53−1: the largest integer that
// every client language holds exactly (JavaScript numbers are float64).
// Request ids run from 1 to MaxID; 0 is the id of a response to a request
// whose id could not be read.
const MaxID = 1<<53 - 1

// MaxDepth is the deepest nesting of maps and arrays a frame may have.
const MaxDepth = 64

// DefaultMaxFrameBytes is the default limit on the size of one frame.
const DefaultMaxFrameBytes = 16 << 20

// The ops.
const (
	OpHello = "hello"
	OpEnvs  = "envs"
	// OpTasks pages through the tasks of one environment.
	OpTasks = "tasks"
	OpReset = "reset"
	// OpResetGroup starts n sessions of one task and seed at once.
	OpResetGroup = "reset_group"
	OpStep       = "step"
	OpEvaluate   = "evaluate"
	OpClose      = "close"
	// OpSnapshot, OpFork and OpDropSnapshot save a session's state and
	// start sessions from it; a server lists them in hello only when one
	// of its environments supports snapshots (CapSnapshot).
	OpSnapshot     = "snapshot"
	OpFork         = "fork"
	OpDropSnapshot = "drop_snapshot"
)

// Ops returns the ops of version 1, in the order PROTOCOL.md lists them.
func Ops() []string {
	return []string{OpHello, OpEnvs, OpReset, OpStep, OpEvaluate, OpClose, OpSnapshot, OpFork, OpDropSnapshot, OpTasks, OpResetGroup}
}

// SnapshotOps returns the ops that exist only with CapSnapshot.
func SnapshotOps() []string {
	return []string{OpSnapshot, OpFork, OpDropSnapshot}
}

// Task listing bounds.
const (
	// EnvsTasks is the most tasks an environment lists in envs; the tasks
	// op pages through the rest.
	EnvsTasks = 100
	// DefaultTasksLimit is the page size of tasks when limit is 0.
	DefaultTasksLimit = 100
	// MaxTasksLimit is the largest page size of tasks.
	MaxTasksLimit = 1000
)

// The capabilities a server may announce in HelloResult.Capabilities.
const (
	CapPipelining   = "pipelining"
	CapMultiSession = "multi_session"
	CapMultiCall    = "multi_call"
	CapRawText      = "raw_text"
	CapEvaluate     = "evaluate"
	// CapSnapshot: at least one environment supports snapshot and fork
	// (see EnvSpec.Snapshot for which).
	CapSnapshot = "snapshot"
)

// Reasons refine an error code for conditions the server detects itself.
// They are stable; new ones may be added.
const (
	ReasonBadFrame              = "bad_frame"
	ReasonBadRequest            = "bad_request"
	ReasonUnknownOp             = "unknown_op"
	ReasonUnknownParser         = "unknown_parser"
	ReasonFrameTooLarge         = "frame_too_large"
	ReasonUnknownEnv            = "unknown_env"
	ReasonUnknownSession        = "unknown_session"
	ReasonSessionExpired        = "session_expired"
	ReasonSessionClosed         = "session_closed"
	ReasonMaxSessions           = "max_sessions"
	ReasonMaxConnectionSessions = "max_connection_sessions"
	ReasonMaxInflight           = "max_inflight"
	ReasonResetWait             = "reset_wait"
	ReasonDraining              = "draining"
	ReasonUnsupported           = "unsupported"
	ReasonUnknownSnapshot       = "unknown_snapshot"
	ReasonMaxSnapshots          = "max_connection_snapshots"
	ReasonMaxQueuedBytes        = "max_queued_bytes"
)

// Request is a request frame. It is the union of the fields of every op;
// each op reads the fields PROTOCOL.md lists for it and ignores the rest.
type Request struct {
	ID uint64 `msgpack:"id"`
	Op string `msgpack:"op"`

	// Client names the client, for logs (hello).
	Client string `msgpack:"client,omitempty"`

	// Env, Task, Seed and Options select a new episode (reset).
	Env     string         `msgpack:"env,omitempty"`
	Task    string         `msgpack:"task,omitempty"`
	Seed    *int64         `msgpack:"seed,omitempty"`
	Options map[string]any `msgpack:"options,omitempty"`

	// Session is the session a request applies to (step, evaluate, close;
	// for reset, the session to close first).
	Session string `msgpack:"session,omitempty"`

	// ToolCalls is a structured action (step).
	ToolCalls []ToolCall `msgpack:"tool_calls,omitempty"`
	// Text is raw model text to parse with Parser (step).
	Text *string `msgpack:"text,omitempty"`
	// Parser names the raw-text parser: hermes, json or react.
	Parser string `msgpack:"parser,omitempty"`

	// Snapshot is the snapshot a request applies to (fork, drop_snapshot).
	Snapshot string `msgpack:"snapshot,omitempty"`
	// N is the number of sessions to fork or to start (reset_group); 0
	// means 1.
	N int `msgpack:"n,omitempty"`

	// Offset and Limit select a page of tasks (tasks): Limit 0 means
	// DefaultTasksLimit.
	Offset int `msgpack:"offset,omitempty"`
	Limit  int `msgpack:"limit,omitempty"`
	// Prompts set to false leaves the prompts out of a page of tasks
	// (tasks); nil means true.
	Prompts *bool `msgpack:"prompts,omitempty"`
}

// Response is a response frame: Result when OK, Error otherwise.
type Response struct {
	ID     uint64 `msgpack:"id"`
	OK     bool   `msgpack:"ok"`
	Result any    `msgpack:"result,omitempty"`
	Error  *Error `msgpack:"error,omitempty"`
}

// Error is the error of a failed request.
type Error struct {
	// Code is a gym error class (see gym.ErrorClass): a closed set.
	Code string `msgpack:"code" json:"code"`
	// Message is for humans.
	Message string `msgpack:"message" json:"message"`
	// Mask tells a trainer to drop the sample (infrastructure failure).
	Mask bool `msgpack:"mask" json:"mask"`
	// Reason refines Code for conditions the server detects itself.
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// HelloResult is the result of hello.
type HelloResult struct {
	Server        string   `msgpack:"server"`
	ServerVersion string   `msgpack:"server_version"`
	Protocol      int      `msgpack:"protocol"`
	Subprotocol   string   `msgpack:"subprotocol"`
	Instance      string   `msgpack:"instance"`
	Ops           []string `msgpack:"ops"`
	Parsers       []string `msgpack:"parsers"`
	Capabilities  []string `msgpack:"capabilities"`
	Limits        Limits   `msgpack:"limits"`
	Draining      bool     `msgpack:"draining"`
}

// Limits are the server's limits, as reported by hello. Durations are in
// seconds.
type Limits struct {
	MaxFrameBytes            int64   `msgpack:"max_frame_bytes"`
	MaxSessions              int     `msgpack:"max_sessions"`
	MaxSessionsPerConnection int     `msgpack:"max_sessions_per_connection"`
	MaxInflightPerConnection int     `msgpack:"max_inflight_per_connection"`
	MaxConcurrentResets      int     `msgpack:"max_concurrent_resets"`
	ResetWait                float64 `msgpack:"reset_wait"`
	IdleSessionTTL           float64 `msgpack:"idle_session_ttl"`
	PingInterval             float64 `msgpack:"ping_interval"`
	MaxDepth                 int     `msgpack:"max_depth"`
	// MaxSnapshotsPerConnection bounds the snapshots one connection holds.
	MaxSnapshotsPerConnection int `msgpack:"max_snapshots_per_connection"`
	// MaxQueuedBytesPerConnection bounds the decoded size of the requests
	// one connection has sent and not yet had answered.
	MaxQueuedBytesPerConnection int64 `msgpack:"max_queued_bytes_per_connection"`
}

// EnvsResult is the result of envs.
type EnvsResult struct {
	Envs []EnvSpec `msgpack:"envs"`
}

// EnvSpec describes an environment.
type EnvSpec struct {
	ID          string `msgpack:"id"`
	Description string `msgpack:"description,omitempty"`
	// Tasks are the environment's first tasks, at most EnvsTasks of them;
	// TaskCount is how many it has.
	Tasks     []TaskSpec `msgpack:"tasks"`
	TaskCount int        `msgpack:"task_count"`
	Tools     []Tool     `msgpack:"tools"`
	// Snapshot is true when the environment's sessions support snapshot
	// and fork.
	Snapshot bool `msgpack:"snapshot,omitempty"`
}

// TaskSpec describes a task.
type TaskSpec struct {
	ID           string `msgpack:"id"`
	Prompt       string `msgpack:"prompt"`
	TestCommands int    `msgpack:"test_commands"`
	HasReference bool   `msgpack:"has_reference"`
	// Metadata is the task's free-form data: JSON-like values, integral
	// numbers as integers.
	Metadata map[string]any `msgpack:"metadata,omitempty"`
}

// TasksResult is the result of tasks: one page of an environment's tasks.
type TasksResult struct {
	Env string `msgpack:"env"`
	// Total is the number of tasks of the environment.
	Total int `msgpack:"total"`
	// Offset is the index of the page's first task.
	Offset int        `msgpack:"offset"`
	Tasks  []TaskSpec `msgpack:"tasks"`
}

// Tool is a tool schema in the OpenAI function format.
type Tool struct {
	Type     string       `msgpack:"type"`
	Function FunctionSpec `msgpack:"function"`
}

// FunctionSpec describes a function tool.
type FunctionSpec struct {
	Name        string `msgpack:"name"`
	Description string `msgpack:"description"`
	Parameters  Schema `msgpack:"parameters"`
}

// Schema is the flat JSON Schema of a tool's parameters.
type Schema struct {
	Type                 string              `msgpack:"type"`
	Properties           SortedMap[Property] `msgpack:"properties"`
	Required             []string            `msgpack:"required"`
	AdditionalProperties bool                `msgpack:"additionalProperties"`
}

// Property is the schema of one parameter; Items is an array's element
// schema.
type Property struct {
	Type        string    `msgpack:"type"`
	Description string    `msgpack:"description"`
	Enum        []string  `msgpack:"enum,omitempty"`
	Items       *Property `msgpack:"items,omitempty"`
}

// ResetResult is the result of reset: the initial observation.
type ResetResult struct {
	SessionID    string        `msgpack:"session_id"`
	Env          string        `msgpack:"env"`
	Task         string        `msgpack:"task"`
	SystemPrompt string        `msgpack:"system_prompt"`
	Prompt       string        `msgpack:"prompt"`
	Tools        []Tool        `msgpack:"tools"`
	Messages     []Message     `msgpack:"messages"`
	Limits       EpisodeLimits `msgpack:"limits"`
	// ForkOf is the snapshot a forked session started from; Steps and
	// Actions are the counts it continues from. All three are omitted for
	// a reset.
	ForkOf  string `msgpack:"fork_of,omitempty"`
	Steps   int    `msgpack:"steps,omitempty"`
	Actions int    `msgpack:"actions,omitempty"`
}

// EpisodeLimits are the bounds of an episode; durations in seconds.
type EpisodeLimits struct {
	MaxActions     int     `msgpack:"max_actions"`
	GlobalTimeout  float64 `msgpack:"global_timeout"`
	CommandTimeout float64 `msgpack:"command_timeout"`
}

// Message is a chat message in the OpenAI shape.
type Message struct {
	Role       string     `msgpack:"role"`
	Content    string     `msgpack:"content"`
	ToolCalls  []ToolCall `msgpack:"tool_calls,omitempty"`
	ToolCallID string     `msgpack:"tool_call_id,omitempty"`
	Name       string     `msgpack:"name,omitempty"`
}

// ToolCall is a tool call in the OpenAI function-calling shape.
type ToolCall struct {
	ID       string       `msgpack:"id"`
	Type     string       `msgpack:"type"`
	Function FunctionCall `msgpack:"function"`
}

// FunctionCall names a tool and carries its raw JSON arguments.
type FunctionCall struct {
	Name      string    `msgpack:"name"`
	Arguments Arguments `msgpack:"arguments"`
}

// StepResult is the result of step.
type StepResult struct {
	Observation Observation `msgpack:"observation"`
	Reward      float64     `msgpack:"reward"`
	Terminated  bool        `msgpack:"terminated"`
	Truncated   bool        `msgpack:"truncated"`
	Info        StepInfo    `msgpack:"info"`
	// ToolCalls are the calls the step ran, with their ids (parsed from
	// the text of a text step).
	ToolCalls []ToolCall `msgpack:"tool_calls,omitempty"`
}

// Observation is what the agent sees after a step.
type Observation struct {
	Messages []Message `msgpack:"messages"`
	Text     string    `msgpack:"text"`
}

// StepInfo carries diagnostics of a step.
type StepInfo struct {
	Step              int         `msgpack:"step"`
	Actions           int         `msgpack:"actions"`
	Calls             []CallInfo  `msgpack:"calls"`
	TerminationReason string      `msgpack:"termination_reason,omitempty"`
	Evaluation        *Evaluation `msgpack:"evaluation,omitempty"`
	AgentDone         bool        `msgpack:"agent_done,omitempty"`
	// Mask is true when the step hit an infrastructure failure.
	Mask bool `msgpack:"mask,omitempty"`
}

// CallInfo describes the execution of one tool call.
type CallInfo struct {
	ID            string  `msgpack:"id"`
	Name          string  `msgpack:"name"`
	ExitCode      int     `msgpack:"exit_code"`
	Duration      float64 `msgpack:"duration"`
	ErrorClass    string  `msgpack:"error_class,omitempty"`
	Error         string  `msgpack:"error,omitempty"`
	OutputDropped int64   `msgpack:"output_dropped,omitempty"`
	Blocked       bool    `msgpack:"blocked,omitempty"`
}

// Evaluation is the verdict of the hidden tests.
type Evaluation struct {
	Reward     float64       `msgpack:"reward"`
	Success    bool          `msgpack:"success"`
	Mode       string        `msgpack:"mode"`
	Passed     int           `msgpack:"passed"`
	Failed     int           `msgpack:"failed"`
	Errors     int           `msgpack:"errors"`
	Skipped    int           `msgpack:"skipped"`
	Total      int           `msgpack:"total"`
	Tests      []TestCase    `msgpack:"tests"`
	Commands   []TestCommand `msgpack:"commands"`
	Duration   float64       `msgpack:"duration"`
	ErrorClass string        `msgpack:"error_class,omitempty"`
	Error      string        `msgpack:"error,omitempty"`
	Mask       bool          `msgpack:"mask"`
	// Tampered flags a test run that showed signs of forgery by the code
	// under test; the reward is then 0 and the sample is not masked.
	Tampered bool `msgpack:"tampered,omitempty"`
	// Metrics are a verifier's named numbers (a Harbor task's
	// reward.json); RewardKey names the one that is the reward.
	Metrics   SortedMap[float64] `msgpack:"metrics,omitempty"`
	RewardKey string             `msgpack:"reward_key,omitempty"`
}

// TestCase is the result of one test case.
type TestCase struct {
	Name    string `msgpack:"name"`
	Status  string `msgpack:"status"`
	Message string `msgpack:"message,omitempty"`
	Command int    `msgpack:"command"`
}

// TestCommand is the run of one unit-test command.
type TestCommand struct {
	Command  string  `msgpack:"command"`
	ExitCode int     `msgpack:"exit_code"`
	Output   string  `msgpack:"output"`
	Duration float64 `msgpack:"duration"`
	TimedOut bool    `msgpack:"timed_out,omitempty"`
	Source   string  `msgpack:"source"`
	Success  bool    `msgpack:"success"`
}

// Result is the result of close: the final record of a session.
type Result struct {
	SessionID         string      `msgpack:"session_id"`
	Env               string      `msgpack:"env"`
	Task              string      `msgpack:"task"`
	Steps             int         `msgpack:"steps"`
	Actions           int         `msgpack:"actions"`
	TerminationReason string      `msgpack:"termination_reason"`
	AgentDone         bool        `msgpack:"agent_done"`
	Evaluation        *Evaluation `msgpack:"evaluation"`
	StartTime         float64     `msgpack:"start_time"`
	EndTime           float64     `msgpack:"end_time"`
}

// Snapshot describes a saved session state: the result of snapshot.
// Elapsed is in seconds, Created in Unix seconds.
type Snapshot struct {
	ID        string  `msgpack:"id"`
	Env       string  `msgpack:"env"`
	Task      string  `msgpack:"task"`
	SessionID string  `msgpack:"session_id"`
	Steps     int     `msgpack:"steps"`
	Actions   int     `msgpack:"actions"`
	Elapsed   float64 `msgpack:"elapsed"`
	Created   float64 `msgpack:"created"`
	// Mode is "archive" or "commit"; Fallback says why an archive was
	// not possible; Bytes is the archive's size (PROTOCOL.md §4.8).
	Mode     string `msgpack:"mode,omitempty"`
	Fallback string `msgpack:"fallback,omitempty"`
	Bytes    int64  `msgpack:"bytes,omitempty"`
}

// SnapshotResult is the result of snapshot.
type SnapshotResult struct {
	Snapshot Snapshot `msgpack:"snapshot"`
}

// ForkResult is the result of fork and reset_group: one reset result per
// new session.
type ForkResult struct {
	Sessions []ResetResult `msgpack:"sessions"`
}

// DropSnapshotResult is the result of drop_snapshot: the dropped id.
type DropSnapshotResult struct {
	Snapshot string `msgpack:"snapshot"`
}
