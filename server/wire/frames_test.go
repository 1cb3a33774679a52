package wire_test

import (
	"time"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// frame is one named example frame of the protocol.
type frame struct {
	name string
	v    any
}

func ptr[T any](v T) *T { return &v }

// exampleFrames returns a request and a response of every op, built from
// gym values through the same conversions the server uses.
func exampleFrames() []frame {
	tools := wire.FromTools(gym.StandardTools()[3:]) // mark_done: small
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := gym.Evaluation{
		Reward: 0.5, Success: false, Mode: "pass_rate", Passed: 1, Failed: 1, Total: 2,
		Tests: []gym.TestCase{
			{Name: "tests/test_calc.py::test_add", Status: gym.TestPassed},
			{Name: "tests/test_calc.py::test_div", Status: gym.TestFailed, Message: "ZeroDivisionError"},
		},
		Commands: []gym.TestCommand{{Command: "pytest -q tests", ExitCode: 1, Output: "1 failed, 1 passed", Duration: gym.Duration(800 * time.Millisecond), Source: "junit"}},
		Duration: gym.Duration(time.Second),
	}
	step := gym.StepResult{
		Observation: gym.Observation{
			Messages: []gym.Message{{Role: gym.RoleTool, Content: "hi\n", ToolCallID: "c1", Name: gym.ToolExecuteCommand}},
			Text:     "hi\n",
		},
		Info: gym.StepInfo{Step: 1, Actions: 1, Calls: []gym.CallInfo{{ID: "c1", Name: gym.ToolExecuteCommand, ExitCode: 0, Duration: gym.Duration(2 * time.Millisecond)}}},
	}
	final := gym.StepResult{
		Observation: gym.Observation{
			Messages: []gym.Message{{Role: gym.RoleTool, Content: "Task marked as done.", ToolCallID: "call_0", Name: gym.ToolMarkDone}},
			Text:     "Task marked as done.",
		},
		Reward:     0.5,
		Terminated: true,
		Info: gym.StepInfo{Step: 2, Actions: 2, Calls: []gym.CallInfo{{ID: "call_0", Name: gym.ToolMarkDone, ExitCode: -1}},
			TerminationReason: gym.ReasonCompleted, Evaluation: &ev, AgentDone: true},
	}
	finalWire := wire.FromStepResult(final)
	finalWire.ToolCalls = wire.FromToolCalls([]gym.ToolCall{gym.NewToolCall("call_0", gym.ToolMarkDone, "{}")})
	reset := gym.Reset{
		SessionID: "mem-1", EnvID: "mem", TaskID: "hello", SystemPrompt: "You are an agent.", Prompt: "Write hello to a.txt.",
		Tools:    gym.StandardTools()[3:],
		Messages: []gym.Message{{Role: gym.RoleSystem, Content: "You are an agent."}, {Role: gym.RoleUser, Content: "Write hello to a.txt."}},
		Limits:   gym.EpisodeLimits{MaxActions: 50, GlobalTimeout: gym.Duration(30 * time.Minute), CommandTimeout: gym.Duration(2 * time.Minute)},
	}
	// A custom tool (config `tools`) among the standard ones: its schema
	// has an enum and an array's items.
	customReset := reset
	customReset.Tools = append(gym.StandardTools()[3:], gym.Tool{Type: "function", Function: gym.FunctionSpec{
		Name: "lint", Description: "Lint files.", Parameters: gym.Schema{Type: "object", Required: []string{"files"},
			Properties: map[string]gym.Property{
				"files": {Type: "array", Description: "Files to lint.", Items: &gym.Property{Type: "string"}},
				"level": {Type: "string", Enum: []string{"error", "warning"}},
			}},
	}})
	snap := gym.Snapshot{ID: "mem-snap-1", EnvID: "mem", TaskID: "hello", SessionID: "mem-1", Steps: 1, Actions: 1,
		Elapsed: gym.Duration(1500 * time.Millisecond), Created: start.Add(1500 * time.Millisecond),
		Mode: gym.SnapshotArchive, Bytes: 10240}
	commitSnap := snap
	commitSnap.ID, commitSnap.Mode, commitSnap.Bytes = "mem-snap-2", gym.SnapshotCommit, 0
	commitSnap.Fallback = "archive: /tmp/f is a named pipe: not archivable"
	fork1, fork2 := reset, reset
	fork1.SessionID, fork1.ForkOf, fork1.Steps, fork1.Actions = "mem-2", snap.ID, snap.Steps, snap.Actions
	fork2.SessionID, fork2.ForkOf, fork2.Steps, fork2.Actions = "mem-3", snap.ID, snap.Steps, snap.Actions
	return []frame{
		{"hello_request", wire.Request{ID: 1, Op: wire.OpHello, Client: "example/1"}},
		{"hello_response", wire.Response{ID: 1, OK: true, Result: wire.HelloResult{
			Server: "gymserver", ServerVersion: "dev", Protocol: wire.Version, Subprotocol: wire.Subprotocol, Instance: "3f9c2a",
			Ops: wire.Ops(), Parsers: []string{"hermes", "json", "react"},
			Capabilities: []string{wire.CapPipelining, wire.CapMultiSession, wire.CapMultiCall, wire.CapRawText, wire.CapEvaluate, wire.CapSnapshot},
			Limits: wire.Limits{MaxFrameBytes: wire.DefaultMaxFrameBytes, MaxSessions: 1024, MaxSessionsPerConnection: 512,
				MaxInflightPerConnection: 4096, MaxConcurrentResets: 16, ResetWait: 300, IdleSessionTTL: 1800, PingInterval: 15, MaxDepth: wire.MaxDepth,
				MaxSnapshotsPerConnection: 64, MaxQueuedBytesPerConnection: 64 << 20},
		}}},
		{"envs_request", wire.Request{ID: 2, Op: wire.OpEnvs}},
		{"envs_response", wire.Response{ID: 2, OK: true, Result: wire.EnvsResult{Envs: []wire.EnvSpec{{
			ID: "mem", Description: "in-memory", Tasks: []wire.TaskSpec{{ID: "hello", Prompt: "Write hello to a.txt.", TestCommands: 1, HasReference: true}}, TaskCount: 1, Tools: tools, Snapshot: true,
		}}}}},
		{"tasks_request", wire.Request{ID: 13, Op: wire.OpTasks, Env: "many", Offset: 100, Limit: 2}},
		{"tasks_response", wire.Response{ID: 13, OK: true, Result: wire.TasksResult{Env: "many", Total: 250, Offset: 100, Tasks: wire.FromTaskSpecs([]gym.TaskSpec{
			{ID: "task-100", Prompt: "Make test 100 pass.", TestCommands: 1, HasReference: true,
				Metadata: map[string]any{"difficulty": "easy", "index": float64(100), "tags": []any{"math"}, "weight": 0.5}},
			{ID: "task-101", Prompt: "Make test 101 pass.", TestCommands: 1},
		})}}},
		{"tasks_no_prompts_request", wire.Request{ID: 14, Op: wire.OpTasks, Env: "many", Prompts: ptr(false)}},
		{"tasks_error_response", wire.Response{ID: 14, Error: &wire.Error{Code: "invalid_argument", Reason: wire.ReasonBadRequest,
			Message: "limit 5000 is out of range 1 … 1000 (0 means 100)"}}},
		{"reset_request", wire.Request{ID: 3, Op: wire.OpReset, Env: "mem", Task: "hello", Seed: ptr(int64(7)), Options: map[string]any{"difficulty": "easy"}}},
		{"reset_response", wire.Response{ID: 3, OK: true, Result: wire.FromReset(reset)}},
		{"reset_custom_tool_response", wire.Response{ID: 3, OK: true, Result: wire.FromReset(customReset)}},
		{"step_request", wire.Request{ID: 4, Op: wire.OpStep, Session: "mem-1", ToolCalls: wire.FromToolCalls([]gym.ToolCall{
			gym.NewToolCall("c1", gym.ToolExecuteCommand, `{"command": "echo hi"}`)})}},
		{"step_response", wire.Response{ID: 4, OK: true, Result: wire.FromStepResult(step)}},
		{"step_text_request", wire.Request{ID: 5, Op: wire.OpStep, Session: "mem-1", Parser: "hermes",
			Text: ptr(`Done.<tool_call>{"name": "mark_done", "arguments": {}}</tool_call>`)}},
		{"step_text_response", wire.Response{ID: 5, OK: true, Result: finalWire}},
		{"evaluate_request", wire.Request{ID: 6, Op: wire.OpEvaluate, Session: "mem-1"}},
		{"evaluate_response", wire.Response{ID: 6, OK: true, Result: wire.FromEvaluation(ev)}},
		{"close_request", wire.Request{ID: 7, Op: wire.OpClose, Session: "mem-1"}},
		{"close_response", wire.Response{ID: 7, OK: true, Result: wire.FromResult(gym.Result{
			SessionID: "mem-1", EnvID: "mem", TaskID: "hello", Steps: 2, Actions: 2, TerminationReason: gym.ReasonCompleted,
			AgentDone: true, Evaluation: &ev, StartTime: start, EndTime: start.Add(1500 * time.Millisecond),
		})}},
		{"error_response", wire.Response{ID: 8, Error: &wire.Error{Code: "episode_done", Reason: wire.ReasonSessionClosed, Message: "session mem-1: closed"}}},
		{"snapshot_request", wire.Request{ID: 9, Op: wire.OpSnapshot, Session: "mem-1"}},
		{"snapshot_response", wire.Response{ID: 9, OK: true, Result: wire.SnapshotResult{Snapshot: wire.FromSnapshot(snap)}}},
		{"snapshot_commit_response", wire.Response{ID: 9, OK: true, Result: wire.SnapshotResult{Snapshot: wire.FromSnapshot(commitSnap)}}},
		{"fork_request", wire.Request{ID: 10, Op: wire.OpFork, Snapshot: snap.ID, N: 2}},
		{"fork_response", wire.Response{ID: 10, OK: true, Result: wire.ForkResult{Sessions: []wire.ResetResult{wire.FromReset(fork1), wire.FromReset(fork2)}}}},
		{"fork_error_response", wire.Response{ID: 10, Error: &wire.Error{Code: "resource_exhausted", Reason: wire.ReasonMaxConnectionSessions,
			Message: "fork mem-snap-1: 2 new sessions do not fit: connection has 511 of at most 512 sessions (max_sessions_per_connection)"}}},
		{"drop_snapshot_request", wire.Request{ID: 11, Op: wire.OpDropSnapshot, Snapshot: snap.ID}},
		{"reset_group_request", wire.Request{ID: 15, Op: wire.OpResetGroup, Env: "mem", Task: "hello", Seed: ptr(int64(7)), N: 2}},
		{"drop_snapshot_response", wire.Response{ID: 11, OK: true, Result: wire.DropSnapshotResult{Snapshot: snap.ID}}},
		{"unknown_snapshot_response", wire.Response{ID: 12, Error: &wire.Error{Code: "not_found", Reason: wire.ReasonUnknownSnapshot,
			Message: `snapshot "mem-snap-1" is not held by this connection`}}},
	}
}
