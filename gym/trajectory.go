package gym

// Trajectory is the record of one episode, written as one JSON file. It is a
// superset of the Real Work trajectory format (trajectory_id, environment_id,
// start_time, end_time, steps, test_results, episode_result) and adds the
// full chat transcript, token usage and classified errors, so it can be used
// for SFT or RL directly.
type Trajectory struct {
	TrajectoryID  string `json:"trajectory_id"`
	EnvironmentID string `json:"environment_id"`
	TaskID        string `json:"task_id"`
	SessionID     string `json:"session_id,omitempty"`
	Episode       int    `json:"episode"`
	StartTime     Time   `json:"start_time"`
	EndTime       Time   `json:"end_time"`
	Policy        string `json:"policy,omitempty"`
	Model         string `json:"model,omitempty"`
	// Steps holds one entry per tool call, in the seed's shape.
	Steps []TrajectoryStep `json:"steps"`
	// TestResults holds one entry per unit_tests command, in the seed's shape.
	TestResults   []TestCommand `json:"test_results"`
	EpisodeResult EpisodeResult `json:"episode_result"`
	// Messages is the full transcript: system, user, assistant (with tool
	// calls and raw arguments) and tool messages.
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitempty"`
	// Turns holds one entry per policy call, in order, with its token
	// usage; Usage is their sum.
	Turns []TrajectoryTurn `json:"turns,omitempty"`
	Usage Usage            `json:"usage"`
	// Evaluation has the per-test results.
	Evaluation *Evaluation `json:"evaluation,omitempty"`
	// Plugins holds outputs of plugins by plugin name.
	Plugins map[string]any `json:"plugins,omitempty"`
	// EpisodeChanges is what pre_episode plugins changed in the episode
	// before it started; nil when nothing.
	EpisodeChanges *EpisodeChanges `json:"episode_changes,omitempty"`
}

// EpisodeChanges records the changes plugins made to an episode before it
// started, as applied: limits are the effective ones, never above the
// environment's.
type EpisodeChanges struct {
	// By names the plugins that made changes, in order.
	By []string `json:"by"`
	// Prompt is the prompt the policy got in place of the task's;
	// OriginalPrompt is the task's.
	Prompt         string `json:"prompt,omitempty"`
	OriginalPrompt string `json:"original_prompt,omitempty"`
	// EnvironmentVariables were set in the sandbox.
	EnvironmentVariables map[string]string `json:"environment_variables,omitempty"`
	MaxActions           int               `json:"max_actions,omitempty"`
	GlobalTimeout        Duration          `json:"global_timeout,omitempty"`
	CommandTimeout       Duration          `json:"command_timeout,omitempty"`
}

// TrajectoryStep is one tool call and its result.
type TrajectoryStep struct {
	StepID    string           `json:"step_id"`
	Timestamp Time             `json:"timestamp"`
	Action    TrajectoryAction `json:"action"`
	Result    TrajectoryResult `json:"result"`
}

// TrajectoryAction is the seed's action record plus the raw tool call.
type TrajectoryAction struct {
	// Type is the seed's action type: "command", "file_write", "file_read",
	// "done", or the tool name for other tools.
	Type string `json:"type"`
	// Content is the command, path or message.
	Content  string   `json:"content"`
	Timeout  float64  `json:"timeout,omitempty"`
	ToolCall ToolCall `json:"tool_call"`
	// Turn is the 1-based index of the policy turn that made the call.
	Turn int `json:"turn,omitempty"`
	// OriginalToolCall is the call as the policy made it, when a filter
	// changed it before it ran; ToolCall is what ran.
	OriginalToolCall *ToolCall `json:"original_tool_call,omitempty"`
}

// TrajectoryResult is the seed's result record plus classification.
type TrajectoryResult struct {
	Success    bool       `json:"success"`
	Output     string     `json:"output"`
	Duration   Duration   `json:"duration"`
	ExitCode   int        `json:"exit_code"`
	ErrorClass ErrorClass `json:"error_class,omitempty"`
	Error      string     `json:"error,omitempty"`
	// Blocked is true when a filter refused the call: it did not run and
	// Output says why.
	Blocked bool `json:"blocked,omitempty"`
}

// TrajectoryTurn is one call of the policy.
type TrajectoryTurn struct {
	// Turn is the 1-based index of the call in the episode.
	Turn int `json:"turn"`
	// MessageIndex is the index in Messages of the assistant message the
	// call produced; -1 when it failed.
	MessageIndex int      `json:"message_index"`
	Usage        Usage    `json:"usage"`
	Duration     Duration `json:"duration"`
	FinishReason string   `json:"finish_reason,omitempty"`
	// ToolCalls is the number of tool calls in the answer.
	ToolCalls  int    `json:"tool_calls"`
	ParseError string `json:"parse_error,omitempty"`
	Error      string `json:"error,omitempty"`
}

// EpisodeResult is the seed's episode summary plus classification.
type EpisodeResult struct {
	// Success comes from the tests, never from mark_done, nor from a
	// plugin that changed the score.
	Success bool `json:"success"`
	// FinalScore is the episode's reward: the tests', or the one a
	// post_test plugin gave it; then TestScore keeps the tests' own and
	// ScoreAdjustedBy names the plugins that set it ("a, b": the last
	// one's stands).
	FinalScore       float64           `json:"final_score"`
	TestScore        *float64          `json:"test_score,omitempty"`
	ScoreAdjustedBy  string            `json:"score_adjusted_by,omitempty"`
	TerminatedReason TerminationReason `json:"terminated_reason"`
	AgentDone        bool              `json:"agent_done"`
	AgentDoneMessage string            `json:"agent_done_message,omitempty"`
	Actions          int               `json:"actions"`
	ActionErrors     int               `json:"action_errors"`
	ErrorClass       ErrorClass        `json:"error_class,omitempty"`
	Error            string            `json:"error,omitempty"`
	Mask             bool              `json:"mask"`
	// Tampered is true when the evaluation found the test run forged
	// (see Evaluation.Tampered).
	Tampered        bool    `json:"tampered,omitempty"`
	TestsPassed     int     `json:"tests_passed"`
	TestsTotal      int     `json:"tests_total"`
	DurationSeconds float64 `json:"duration_seconds"`
}
