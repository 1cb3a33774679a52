package gymtest

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
)

// SystemPrompt is the system prompt of every gymtest episode.
const SystemPrompt = "You are an agent in an in-memory test environment. Use the tools to complete the task."

// Task is one task of an in-memory environment.
type Task struct {
	ID     string
	Prompt string
	// Expect maps a file path to the content the agent must write there;
	// each entry is one test case of the evaluation.
	Expect map[string]string
	// Metadata is the task's free-form data, reported by Spec.
	Metadata map[string]any
}

// Env is an in-memory gym.Env. It is safe for concurrent use; configure it
// (SetMaxActions) before the first Reset.
type Env struct {
	id         string
	tasks      []Task
	maxActions int
	resetHook  func(context.Context, gym.ResetRequest) error
	forkHook   func(ctx context.Context, snapshotID string) error

	nextID   atomic.Int64
	nextSnap atomic.Int64
	// mu guards the fields below.
	mu   sync.Mutex
	open map[string]*Session
	// resets counts successful resets.
	resets int
	// snapshots holds the saved states by snapshot id.
	snapshots map[string]savedState
}

// savedState is what a snapshot keeps of a session.
type savedState struct {
	snap  gym.Snapshot
	task  Task
	files map[string]string
}

var (
	_ gym.Env    = (*Env)(nil)
	_ gym.Forker = (*Env)(nil)
)

// NewEnv returns an environment with the given id and tasks.
func NewEnv(id string, tasks ...Task) *Env {
	return &Env{id: id, tasks: tasks, open: make(map[string]*Session), snapshots: make(map[string]savedState)}
}

// SetMaxActions sets the number of tool calls after which episodes are
// truncated (0: no limit) and returns e. Call it before the first Reset.
func (e *Env) SetMaxActions(n int) *Env {
	e.maxActions = n
	return e
}

// SetResetHook makes every Reset call hook first and fail with its error,
// if any; tests use it to block or fail resets. Call it before the first
// Reset. It returns e.
func (e *Env) SetResetHook(hook func(context.Context, gym.ResetRequest) error) *Env {
	e.resetHook = hook
	return e
}

// SetForkHook makes every Fork call hook first and fail with its error, if
// any; tests use it to block or fail forks. Call it before the first Fork.
// It returns e.
func (e *Env) SetForkHook(hook func(ctx context.Context, snapshotID string) error) *Env {
	e.forkHook = hook
	return e
}

// Spec describes the environment and all its tasks.
func (e *Env) Spec() gym.EnvSpec {
	spec := gym.EnvSpec{ID: e.id, Description: "in-memory test environment", TaskCount: len(e.tasks), Tools: gym.StandardTools()}
	for _, t := range e.tasks {
		spec.Tasks = append(spec.Tasks, gym.TaskSpec{ID: t.ID, Prompt: t.Prompt, TestCommands: 1, Metadata: t.Metadata})
	}
	return spec
}

// OpenSessions returns the ids of the sessions that are not closed yet,
// sorted.
func (e *Env) OpenSessions() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.open))
	for id := range e.open {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Resets returns the number of successful resets so far.
func (e *Env) Resets() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resets
}

// Reset starts an episode of req.Task (the first task when empty). Options
// are not supported: any option is an ErrInvalidArgument.
func (e *Env) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	if err := ctx.Err(); err != nil {
		return nil, gym.Reset{}, fmt.Errorf("env %s: reset: %w", e.id, err)
	}
	if len(req.Options) > 0 {
		keys := make([]string, 0, len(req.Options))
		for k := range req.Options {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, gym.Reset{}, fmt.Errorf("env %s: reset: unknown options %s: %w", e.id, strings.Join(keys, ", "), gym.ErrInvalidArgument)
	}
	if e.resetHook != nil {
		if err := e.resetHook(ctx, req); err != nil {
			return nil, gym.Reset{}, fmt.Errorf("env %s: reset: %w", e.id, err)
		}
	}
	var task *Task
	for i := range e.tasks {
		if req.Task == "" || e.tasks[i].ID == req.Task {
			task = &e.tasks[i]
			break
		}
	}
	if task == nil {
		return nil, gym.Reset{}, fmt.Errorf("env %s: task %q: %w", e.id, req.Task, gym.ErrNotFound)
	}
	s := e.newSession(*task, make(map[string]string), time.Now())
	e.mu.Lock()
	e.open[s.id] = s
	e.resets++
	e.mu.Unlock()
	return s, s.initial(), nil
}

// newSession returns a session of task with files, whose clock started at
// start.
func (e *Env) newSession(task Task, files map[string]string, start time.Time) *Session {
	return &Session{
		env:   e,
		id:    fmt.Sprintf("%s-%d", e.id, e.nextID.Add(1)),
		task:  task,
		files: files,
		start: start,
	}
}

// initial returns the initial observation of s.
func (s *Session) initial() gym.Reset {
	return gym.Reset{
		SessionID:    s.id,
		EnvID:        s.env.id,
		TaskID:       s.task.ID,
		SystemPrompt: SystemPrompt,
		Prompt:       s.task.Prompt,
		Tools:        gym.StandardTools(),
		Messages: []gym.Message{
			{Role: gym.RoleSystem, Content: SystemPrompt},
			{Role: gym.RoleUser, Content: s.task.Prompt},
		},
		Limits: gym.EpisodeLimits{MaxActions: s.env.maxActions},
	}
}

// Snapshots returns the ids of the snapshots not dropped yet, sorted.
func (e *Env) Snapshots() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.snapshots))
	for id := range e.snapshots {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Fork starts a session from a snapshot: a copy of its files, its step and
// action counts, and a clock that counts the snapshot's elapsed time.
func (e *Env) Fork(ctx context.Context, snapshotID string) (gym.Session, gym.Reset, error) {
	if err := ctx.Err(); err != nil {
		return nil, gym.Reset{}, fmt.Errorf("env %s: fork %s: %w", e.id, snapshotID, err)
	}
	if e.forkHook != nil {
		if err := e.forkHook(ctx, snapshotID); err != nil {
			return nil, gym.Reset{}, fmt.Errorf("env %s: fork %s: %w", e.id, snapshotID, err)
		}
	}
	e.mu.Lock()
	saved, ok := e.snapshots[snapshotID]
	e.mu.Unlock()
	if !ok {
		return nil, gym.Reset{}, fmt.Errorf("env %s: snapshot %q: %w", e.id, snapshotID, gym.ErrNotFound)
	}
	s := e.newSession(saved.task, maps.Clone(saved.files), time.Now().Add(-time.Duration(saved.snap.Elapsed)))
	s.steps, s.actions = saved.snap.Steps, saved.snap.Actions
	e.mu.Lock()
	e.open[s.id] = s
	e.mu.Unlock()
	r := s.initial()
	r.ForkOf, r.Steps, r.Actions = snapshotID, s.steps, s.actions
	return s, r, nil
}

// DropSnapshot deletes a snapshot; sessions forked from it go on.
func (e *Env) DropSnapshot(ctx context.Context, snapshotID string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.snapshots[snapshotID]; !ok {
		return fmt.Errorf("env %s: snapshot %q: %w", e.id, snapshotID, gym.ErrNotFound)
	}
	delete(e.snapshots, snapshotID)
	return nil
}

// Session is one in-memory episode.
type Session struct {
	env   *Env
	id    string
	task  Task
	start time.Time

	// cancelMu guards the fields below, so that Close can stop running
	// and waiting steps before taking mu.
	cancelMu sync.Mutex
	cancels  map[*context.CancelFunc]struct{}
	closing  bool

	// mu serialises calls and guards the fields below.
	mu        sync.Mutex
	files     map[string]string
	steps     int
	actions   int
	done      bool
	reason    gym.TerminationReason
	agentDone bool
	endTime   time.Time
	eval      *gym.Evaluation
	closed    bool
	result    gym.Result
}

var (
	_ gym.Session     = (*Session)(nil)
	_ gym.Snapshotter = (*Session)(nil)
)

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// StepsInFlight returns the number of Step calls running or waiting for
// the session.
func (s *Session) StepsInFlight() int {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	return len(s.cancels)
}

// Step runs the action's tool calls in order.
func (s *Session) Step(ctx context.Context, a gym.Action) (gym.StepResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.cancelMu.Lock()
	closing := s.closing
	if s.cancels == nil {
		s.cancels = make(map[*context.CancelFunc]struct{})
	}
	s.cancels[&cancel] = struct{}{}
	s.cancelMu.Unlock()
	defer func() {
		s.cancelMu.Lock()
		delete(s.cancels, &cancel)
		s.cancelMu.Unlock()
	}()

	calls, parseErr := toolparse.Calls(a)
	if gym.ClassOf(parseErr) == gym.ClassInvalidArgument {
		return gym.StepResult{}, fmt.Errorf("session %s: step: %w", s.id, parseErr)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if closing || s.closed {
		return gym.StepResult{}, fmt.Errorf("session %s: step: session closed: %w", s.id, gym.ErrEpisodeDone)
	}
	if s.done {
		return gym.StepResult{}, fmt.Errorf("session %s: step: episode ended (%s): %w", s.id, s.reason, gym.ErrEpisodeDone)
	}
	s.steps++
	res := gym.StepResult{Info: gym.StepInfo{Step: s.steps}}
	if len(calls) > 0 {
		res.ToolCalls = make([]gym.ToolCall, len(calls))
		for i, c := range calls {
			if c.ID == "" {
				c.ID = gym.CallID(s.steps, i)
			}
			if c.Type == "" {
				c.Type = "function"
			}
			res.ToolCalls[i] = c
		}
	}
	switch {
	case parseErr != nil:
		res.Observation.Text = "Error: " + parseErr.Error()
		res.Observation.Messages = []gym.Message{}
		res.Info.Calls = []gym.CallInfo{{ExitCode: -1, ErrorClass: gym.ClassAgent, Error: parseErr.Error()}}
	case len(calls) == 0:
		res.Observation.Text = "No tool was called."
		res.Observation.Messages = []gym.Message{}
		res.Info.Calls = []gym.CallInfo{{ExitCode: -1, ErrorClass: gym.ClassAgent, Error: "no tool call"}}
	}
	var texts []string
	for _, call := range res.ToolCalls {
		var out string
		var info gym.CallInfo
		if s.done {
			out = "Not executed: the episode already ended (" + string(s.reason) + ")."
			info = gym.CallInfo{ID: call.ID, Name: call.Function.Name, ExitCode: -1, ErrorClass: gym.ClassEpisodeDone, Error: "episode ended"}
		} else {
			s.actions++
			start := time.Now()
			out, info = s.call(ctx, call)
			info.Duration = gym.Duration(time.Since(start))
			if err := ctx.Err(); err != nil {
				return gym.StepResult{}, fmt.Errorf("session %s: step %d: %w", s.id, s.steps, err)
			}
			if m := s.env.maxActions; m > 0 && s.actions >= m {
				s.end(gym.ReasonMaxActions)
			}
		}
		res.Info.Calls = append(res.Info.Calls, info)
		res.Observation.Messages = append(res.Observation.Messages, gym.Message{
			Role: gym.RoleTool, Content: out, ToolCallID: call.ID, Name: call.Function.Name,
		})
		texts = append(texts, out)
	}
	if len(calls) > 0 {
		res.Observation.Text = strings.Join(texts, "\n\n")
	}
	res.Info.Actions = s.actions
	res.Info.AgentDone = s.agentDone
	if s.done {
		ev := s.evaluate()
		res.Reward = ev.Reward
		res.Terminated = !s.reason.Truncation()
		res.Truncated = s.reason.Truncation()
		res.Info.TerminationReason = s.reason
		res.Info.Evaluation = &ev
	}
	return res, nil
}

// call runs one tool call; s.mu must be held.
func (s *Session) call(ctx context.Context, call gym.ToolCall) (string, gym.CallInfo) {
	info := gym.CallInfo{ID: call.ID, Name: call.Function.Name, ExitCode: -1}
	fail := func(format string, args ...any) (string, gym.CallInfo) {
		info.ErrorClass = gym.ClassAgent
		info.Error = fmt.Sprintf(format, args...)
		return "Error: " + info.Error, info
	}
	switch call.Function.Name {
	case gym.ToolExecuteCommand:
		var args gym.ExecuteCommandArgs
		if err := decodeArgs(call, &args); err != nil {
			return fail("%v", err)
		}
		if args.Command == "crash" {
			// Simulates an infrastructure failure of the sandbox.
			info.ErrorClass = gym.ClassSandbox
			info.Error = "sandbox crashed"
			s.end(gym.ReasonSandboxError)
			return "Error: the sandbox failed.", info
		}
		out, code := s.exec(ctx, args.Command)
		info.ExitCode = code
		return out, info
	case gym.ToolWriteFile:
		var args gym.WriteFileArgs
		if err := decodeArgs(call, &args); err != nil {
			return fail("%v", err)
		}
		if args.Filepath == "" {
			return fail("write_file: filepath is empty")
		}
		s.files[args.Filepath] = args.Content
		return fmt.Sprintf("Wrote %d bytes to %s.", len(args.Content), args.Filepath), info
	case gym.ToolReadFile:
		var args gym.ReadFileArgs
		if err := decodeArgs(call, &args); err != nil {
			return fail("%v", err)
		}
		content, ok := s.files[args.Filepath]
		if !ok {
			return fail("read_file %s: no such file", args.Filepath)
		}
		return content, info
	case gym.ToolMarkDone:
		var args gym.MarkDoneArgs
		if err := decodeArgs(call, &args); err != nil {
			return fail("%v", err)
		}
		s.agentDone = true
		s.end(gym.ReasonCompleted)
		return "Task marked as done.", info
	}
	return fail("unknown tool %q", call.Function.Name)
}

// exec interprets a tiny command language: echo, cat, true, false, sleep
// (call interprets "crash").
func (s *Session) exec(ctx context.Context, command string) (string, int) {
	fields := strings.Fields(command)
	if len(fields) == 0 {
		return "", 0
	}
	switch fields[0] {
	case "echo":
		return strings.Join(fields[1:], " ") + "\n", 0
	case "cat":
		var b strings.Builder
		for _, p := range fields[1:] {
			c, ok := s.files[p]
			if !ok {
				return b.String() + "cat: " + p + ": No such file or directory\n", 1
			}
			b.WriteString(c)
		}
		return b.String(), 0
	case "true":
		return "", 0
	case "false":
		return "", 1
	case "sleep":
		if len(fields) != 2 {
			return "sleep: want one operand\n", 1
		}
		sec, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || sec < 0 {
			return "sleep: invalid time interval " + strconv.Quote(fields[1]) + "\n", 1
		}
		t := time.NewTimer(time.Duration(sec * float64(time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
			return "", 0
		case <-ctx.Done():
			return "", -1
		}
	}
	return "sh: " + fields[0] + ": command not found\n", 127
}

// decodeArgs parses a call's arguments, held to the standard tool's schema.
func decodeArgs(call gym.ToolCall, v any) error {
	for _, t := range gym.StandardTools() {
		if t.Function.Name == call.Function.Name {
			return gym.DecodeArguments(call.Function.Name, t.Function.Parameters, call.Function.Arguments, v)
		}
	}
	return gym.DecodeArguments(call.Function.Name, gym.Schema{}, call.Function.Arguments, v)
}

// end marks the episode ended, keeping the first reason; s.mu must be held.
func (s *Session) end(reason gym.TerminationReason) {
	if s.done {
		return
	}
	s.done = true
	s.reason = reason
	s.endTime = time.Now()
}

// evaluate runs the tests once; s.mu must be held.
func (s *Session) evaluate() gym.Evaluation {
	if s.eval != nil {
		return *s.eval
	}
	start := time.Now()
	ev := gym.Evaluation{Mode: "pass_rate", Tests: []gym.TestCase{}, Commands: []gym.TestCommand{}}
	paths := make([]string, 0, len(s.task.Expect))
	for p := range s.task.Expect {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		tc := gym.TestCase{Name: p, Status: gym.TestPassed}
		if got, ok := s.files[p]; !ok {
			tc.Status, tc.Message = gym.TestFailed, "file not written"
		} else if got != s.task.Expect[p] {
			tc.Status, tc.Message = gym.TestFailed, fmt.Sprintf("content %q, want %q", got, s.task.Expect[p])
		}
		if tc.Status == gym.TestPassed {
			ev.Passed++
		} else {
			ev.Failed++
		}
		ev.Tests = append(ev.Tests, tc)
	}
	ev.Total = len(paths)
	if ev.Total > 0 {
		ev.Reward = float64(ev.Passed) / float64(ev.Total)
	}
	ev.Success = ev.Reward >= 1
	ev.Duration = gym.Duration(time.Since(start))
	s.eval = &ev
	return ev
}

// Snapshot saves a copy of the session's files, its counts and its
// elapsed time.
func (s *Session) Snapshot(ctx context.Context) (gym.Snapshot, error) {
	s.cancelMu.Lock()
	closing := s.closing
	s.cancelMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if closing || s.closed {
		return gym.Snapshot{}, fmt.Errorf("session %s: snapshot: session closed: %w", s.id, gym.ErrEpisodeDone)
	}
	if s.done {
		return gym.Snapshot{}, fmt.Errorf("session %s: snapshot: episode ended (%s): %w", s.id, s.reason, gym.ErrEpisodeDone)
	}
	if err := ctx.Err(); err != nil {
		return gym.Snapshot{}, fmt.Errorf("session %s: snapshot: %w", s.id, err)
	}
	now := time.Now()
	snap := gym.Snapshot{
		ID:        fmt.Sprintf("%s-snap-%d", s.env.id, s.env.nextSnap.Add(1)),
		EnvID:     s.env.id,
		TaskID:    s.task.ID,
		SessionID: s.id,
		Steps:     s.steps,
		Actions:   s.actions,
		Elapsed:   gym.Duration(now.Sub(s.start)),
		Created:   now,
	}
	s.env.mu.Lock()
	s.env.snapshots[snap.ID] = savedState{snap: snap, task: s.task, files: maps.Clone(s.files)}
	s.env.mu.Unlock()
	return snap, nil
}

// Evaluate ends the episode if needed and evaluates it once.
func (s *Session) Evaluate(ctx context.Context) (gym.Evaluation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eval == nil && s.closed {
		return gym.Evaluation{}, fmt.Errorf("session %s: evaluate: closed before evaluation: %w", s.id, gym.ErrEpisodeDone)
	}
	s.end(gym.ReasonEvaluated)
	return s.evaluate(), nil
}

// Close ends the episode, cancelling a running step, and returns the result.
func (s *Session) Close(ctx context.Context) (gym.Result, error) {
	s.cancelMu.Lock()
	s.closing = true
	for cancel := range s.cancels {
		(*cancel)()
	}
	s.cancelMu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.result, nil
	}
	s.closed = true
	s.end(gym.ReasonClosed)
	s.env.mu.Lock()
	delete(s.env.open, s.id)
	s.env.mu.Unlock()
	s.result = gym.Result{
		SessionID:         s.id,
		EnvID:             s.env.id,
		TaskID:            s.task.ID,
		Steps:             s.steps,
		Actions:           s.actions,
		TerminationReason: s.reason,
		AgentDone:         s.agentDone,
		Evaluation:        s.eval,
		StartTime:         s.start,
		EndTime:           s.endTime,
	}
	return s.result, nil
}
