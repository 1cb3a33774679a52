package envs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
)

// closeTimeout bounds the removal of a sandbox on Close, which runs on a
// fresh context because the caller's may already be cancelled.
const closeTimeout = 30 * time.Second

// readFileLimit is the most read_file fetches from the sandbox; what the
// agent sees is further cut to the environment's max output.
const readFileLimit = 4 << 20

// session is one episode of a TaskEnv.
type session struct {
	env   *TaskEnv
	task  *task
	id    string
	sb    sandbox.Sandbox
	start time.Time
	// image is the image the sandbox started from and files the task
	// files it was given: a snapshot's forks start the same way.
	image string
	files []sandbox.File
	// fetches counts the snapshot archives still moving out of the
	// sandbox; Close waits for them.
	fetches sync.WaitGroup

	// cancelMu guards the fields below: the cancel functions of the steps
	// running or waiting, which Close cancels all at once.
	cancelMu   sync.Mutex
	cancelSeq  int
	cancelStep map[int]context.CancelFunc
	// closing is set by Close before it cancels: a step that arrives
	// after that must not run (it would hold mu while Close waits).
	closing bool

	// mu serialises calls and guards the fields below.
	mu               sync.Mutex
	steps            int
	actions          int
	done             bool
	reason           gym.TerminationReason
	agentDone        bool
	agentDoneMessage string
	eval             *gym.Evaluation
	closed           bool
	result           gym.Result
	endTime          time.Time
	// crash says how the agent broke its sandbox (sandbox.ErrAgentCrash).
	crash string
	// zygoteDue says the verifier zygote starts at the next step: a
	// fork's waits for its first step (see TaskEnv.Fork).
	zygoteDue bool
}

var _ gym.Session = (*session)(nil)

func (s *session) ID() string { return s.id }

// initial returns the reset observation.
func (s *session) initial() gym.Reset {
	e, t := s.env, s.task
	var msgs []gym.Message
	if e.systemPrompt != "" {
		msgs = append(msgs, gym.Message{Role: gym.RoleSystem, Content: e.systemPrompt})
	}
	msgs = append(msgs, gym.Message{Role: gym.RoleUser, Content: t.cfg.Prompt})
	return gym.Reset{
		SessionID:    s.id,
		EnvID:        e.cfg.ID,
		TaskID:       t.src.ID,
		SystemPrompt: e.systemPrompt,
		Prompt:       t.cfg.Prompt,
		Tools:        t.tools,
		Messages:     msgs,
		Limits:       t.limits(),
	}
}

// deadline is when the episode's global timeout passes; zero means never.
func (s *session) deadline() time.Time {
	if g := s.task.cfg.Timeouts.Global; g > 0 {
		return s.start.Add(g)
	}
	return time.Time{}
}

// Step runs the action's tool calls in order.
func (s *session) Step(ctx context.Context, a gym.Action) (gym.StepResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.cancelMu.Lock()
	if s.closing {
		s.cancelMu.Unlock()
		return gym.StepResult{}, fmt.Errorf("session %s: step: the session is closing: %w", s.id, gym.ErrEpisodeDone)
	}
	if s.cancelStep == nil {
		s.cancelStep = map[int]context.CancelFunc{}
	}
	s.cancelSeq++
	key := s.cancelSeq
	s.cancelStep[key] = cancel
	s.cancelMu.Unlock()
	defer func() {
		s.cancelMu.Lock()
		delete(s.cancelStep, key)
		s.cancelMu.Unlock()
	}()

	calls, parseErr := toolparse.Calls(a)
	if gym.ClassOf(parseErr) == gym.ClassInvalidArgument {
		return gym.StepResult{}, fmt.Errorf("session %s: step: %w", s.id, parseErr)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.done {
		return gym.StepResult{}, fmt.Errorf("session %s: step: episode ended (%s): %w", s.id, s.reason, gym.ErrEpisodeDone)
	}
	if s.zygoteDue {
		// Under mu, so Close cannot remove the sandbox meanwhile; the
		// zygote imports while the agent works, and the tests use it.
		s.zygoteDue = false
		s.task.startZygote(ctx, s.sb)
	}
	s.steps++
	res := gym.StepResult{Info: gym.StepInfo{Step: s.steps}}
	calls = withIDs(calls, s.steps)
	res.ToolCalls = calls

	runCtx := ctx
	if d := s.deadline(); !d.IsZero() {
		var cancelRun context.CancelFunc
		runCtx, cancelRun = context.WithDeadline(ctx, d)
		defer cancelRun()
	}

	switch {
	case parseErr != nil:
		// The text held a call its parser could not read: the agent sees
		// the parser's explanation.
		res.Observation.Text = "Error: " + parseErr.Error()
		res.Observation.Messages = []gym.Message{}
		res.Info.Calls = []gym.CallInfo{{ExitCode: -1, ErrorClass: gym.ClassAgent, Error: parseErr.Error()}}
	case len(calls) == 0:
		// A turn without a tool call is an agent error, not a lost step.
		res.Observation.Text = "No tool was called. Call one of the tools: " + strings.Join(toolNames(s.task.tools), ", ") + "."
		res.Observation.Messages = []gym.Message{}
		res.Info.Calls = []gym.CallInfo{{ExitCode: -1, ErrorClass: gym.ClassAgent, Error: "no tool call"}}
	}
	var texts []string
	for _, call := range calls {
		var out string
		var info gym.CallInfo
		switch {
		case s.done:
			out = "Not executed: the episode already ended (" + string(s.reason) + ")."
			info = gym.CallInfo{ID: call.ID, Name: call.Function.Name, ExitCode: -1, ErrorClass: gym.ClassEpisodeDone, Error: "episode ended"}
		case s.task.cfg.MaxActions > 0 && s.actions >= s.task.cfg.MaxActions:
			s.end(gym.ReasonMaxActions)
			out = fmt.Sprintf("Not executed: the action limit (%d) was reached.", s.task.cfg.MaxActions)
			info = gym.CallInfo{ID: call.ID, Name: call.Function.Name, ExitCode: -1, ErrorClass: gym.ClassAgent, Error: "action limit reached"}
		case runCtx.Err() != nil && ctx.Err() == nil:
			s.end(gym.ReasonTimeout)
			out = "Not executed: the episode's time limit passed."
			info = gym.CallInfo{ID: call.ID, Name: call.Function.Name, ExitCode: -1, ErrorClass: gym.ClassToolTimeout, Error: "episode timeout"}
		default:
			s.actions++
			out, info = s.call(runCtx, call)
			if ctx.Err() != nil {
				return gym.StepResult{}, fmt.Errorf("session %s: step %d: %w", s.id, s.steps, ctx.Err())
			}
			switch {
			case s.crash != "":
				s.end(gym.ReasonAgentCrash)
			case info.ErrorClass == gym.ClassSandbox:
				s.end(gym.ReasonSandboxError)
			case runCtx.Err() != nil:
				s.end(gym.ReasonTimeout)
			case s.task.cfg.MaxActions > 0 && s.actions >= s.task.cfg.MaxActions && !s.done:
				s.end(gym.ReasonMaxActions)
			}
		}
		res.Info.Calls = append(res.Info.Calls, info)
		res.Observation.Messages = append(res.Observation.Messages, gym.Message{
			Role: gym.RoleTool, Content: out, ToolCallID: call.ID, Name: call.Function.Name,
		})
		if len(calls) > 1 {
			texts = append(texts, fmt.Sprintf("[%s %s]\n%s", call.Function.Name, call.ID, out))
		} else {
			texts = append(texts, out)
		}
	}
	if len(calls) > 0 {
		res.Observation.Text = strings.Join(texts, "\n\n")
	}
	res.Info.Actions = s.actions
	res.Info.AgentDone = s.agentDone
	if s.done {
		ev, err := s.evaluate(ctx)
		if err != nil {
			return gym.StepResult{}, err
		}
		res.Reward = ev.Reward
		res.Terminated = !s.reason.Truncation()
		res.Truncated = s.reason.Truncation()
		res.Info.TerminationReason = s.reason
		res.Info.Evaluation = &ev
	}
	return res, nil
}

// withIDs returns a copy of the calls of step with their type set and an
// id (gym.CallID) on each call that has none.
func withIDs(calls []gym.ToolCall, step int) []gym.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]gym.ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" {
			c.ID = gym.CallID(step, i)
		}
		if c.Type == "" {
			c.Type = "function"
		}
		out[i] = c
	}
	return out
}

// end marks the episode ended for reason, keeping the first reason.
func (s *session) end(reason gym.TerminationReason) {
	if s.done {
		return
	}
	s.done = true
	s.reason = reason
	s.endTime = time.Now()
}

// call runs one tool call and returns the text the agent sees.
func (s *session) call(ctx context.Context, call gym.ToolCall) (string, gym.CallInfo) {
	start := time.Now()
	info := gym.CallInfo{ID: call.ID, Name: call.Function.Name, ExitCode: -1}
	out, err := s.dispatch(ctx, call, &info)
	info.Duration = gym.Duration(time.Since(start))
	if err != nil {
		class := gym.ClassOf(err)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			class = gym.ClassToolTimeout
			err = fmt.Errorf("stopped: the episode's time limit passed")
		}
		if class == gym.ClassInternal {
			class = gym.ClassAgent
		}
		if errors.Is(err, sandbox.ErrAgentCrash) {
			// The agent broke its own sandbox: scored, not masked.
			class = gym.ClassAgent
			s.crash = err.Error()
		}
		info.ErrorClass = class
		info.Error = err.Error()
		if class == gym.ClassSandbox {
			out = "Error: the sandbox failed: " + err.Error()
		} else {
			out = "Error: " + err.Error()
		}
	}
	return out, info
}

// dispatch runs one tool. Errors are classified: agent errors are the
// agent's fault, sandbox errors end the episode.
func (s *session) dispatch(ctx context.Context, call gym.ToolCall, info *gym.CallInfo) (string, error) {
	cfg := s.task.cfg
	switch call.Function.Name {
	case gym.ToolExecuteCommand:
		var args gym.ExecuteCommandArgs
		if err := s.decodeArgs(call, &args); err != nil {
			return "", err
		}
		if strings.TrimSpace(args.Command) == "" {
			return "", gym.Errorf(gym.ClassAgent, "execute_command: command is empty")
		}
		if args.Timeout < 0 {
			return "", gym.Errorf(gym.ClassAgent, "execute_command: timeout must not be negative")
		}
		timeout := cfg.Timeouts.Command
		if args.Timeout > 0 {
			if t := time.Duration(args.Timeout * float64(time.Second)); timeout == 0 || t < timeout {
				timeout = t
			}
		}
		req := sandbox.ExecRequest{
			Argv:       []string{"/bin/sh", "-c", args.Command},
			Dir:        s.resolve(args.WorkingDirectory),
			Timeout:    timeout,
			MaxOutput:  cfg.MaxOutput,
			Background: args.Background,
		}
		if cfg.PersistentShell && !args.Background {
			// The shell stays where the last command left it; a
			// working_directory given is changed to.
			req.Argv, req.Shell, req.Dir = []string{args.Command}, true, ""
			if args.WorkingDirectory != "" {
				req.Dir = s.resolve(args.WorkingDirectory)
			}
		}
		r, err := s.sb.Exec(ctx, req)
		if err != nil {
			return "", err
		}
		if args.Background {
			info.ExitCode = r.ExitCode
			return fmt.Sprintf("Started in the background (pid %d). Its output is discarded; redirect it to a file to keep it. Background processes are stopped before evaluation.", r.PID), nil
		}
		return execObservation(r, req, info), nil

	case gym.ToolWriteFile:
		var args gym.WriteFileArgs
		if err := s.decodeArgs(call, &args); err != nil {
			return "", err
		}
		if args.Filepath == "" {
			return "", gym.Errorf(gym.ClassAgent, "write_file: filepath is empty")
		}
		p := s.resolve(args.Filepath)
		if err := s.sb.WriteFile(ctx, p, []byte(args.Content), 0o644); err != nil {
			return "", fileError("write_file", p, err)
		}
		info.ExitCode = 0
		return fmt.Sprintf("Wrote %d bytes to %s.", len(args.Content), p), nil

	case gym.ToolReadFile:
		var args gym.ReadFileArgs
		if err := s.decodeArgs(call, &args); err != nil {
			return "", err
		}
		if args.Filepath == "" {
			return "", gym.Errorf(gym.ClassAgent, "read_file: filepath is empty")
		}
		p := s.resolve(args.Filepath)
		data, err := s.sb.ReadFile(ctx, p, readFileLimit)
		if err != nil && !errors.Is(err, sandbox.ErrTooLarge) {
			return "", fileError("read_file", p, err)
		}
		info.ExitCode = 0
		text, dropped := capMiddle(string(data), cfg.MaxOutput)
		info.OutputDropped = int64(dropped)
		if errors.Is(err, sandbox.ErrTooLarge) {
			text += fmt.Sprintf("\n[file longer than %d bytes; only the start was read]", readFileLimit)
		}
		return text, nil

	case gym.ToolMarkDone:
		var args gym.MarkDoneArgs
		if err := s.decodeArgs(call, &args); err != nil {
			return "", err
		}
		s.agentDone = true
		s.agentDoneMessage = args.Message
		s.end(gym.ReasonCompleted)
		info.ExitCode = 0
		return "Marked done. The episode is over; the tests will now run.", nil
	}
	if t, ok := s.task.custom[call.Function.Name]; ok {
		return s.runTool(ctx, t, call, info)
	}
	return "", gym.Errorf(gym.ClassAgent, "unknown tool %q; available tools: %s",
		call.Function.Name, strings.Join(toolNames(s.task.tools), ", "))
}

// runTool runs a custom tool as execute_command runs a command: as the
// agent, in the working directory, under the command timeout (or the
// tool's, when shorter) and the output cap. The arguments, checked against
// the tool's schema, are its stdin and never part of its command line.
func (s *session) runTool(ctx context.Context, t config.Tool, call gym.ToolCall, info *gym.CallInfo) (string, error) {
	args, err := gym.CheckArguments(t.Name, t.Spec().Function.Parameters, call.Function.Arguments)
	if err != nil {
		return "", err
	}
	cfg := s.task.cfg
	timeout := cfg.Timeouts.Command
	if t.Timeout > 0 && (timeout == 0 || t.Timeout < timeout) {
		timeout = t.Timeout
	}
	req := sandbox.ExecRequest{
		Argv:      t.Command,
		Dir:       cfg.WorkingDirectory,
		Timeout:   timeout,
		MaxOutput: cfg.MaxOutput,
		Stdin:     []byte(args),
	}
	r, err := s.sb.Exec(ctx, req)
	if err != nil {
		return "", err
	}
	return execObservation(r, req, info), nil
}

// execObservation records a finished command in info and returns what the
// agent sees of it: exit code, stdout and stderr cut in the middle, and
// why it was killed, if it was.
func execObservation(r sandbox.ExecResult, req sandbox.ExecRequest, info *gym.CallInfo) string {
	info.ExitCode = r.ExitCode
	info.OutputDropped = r.StdoutDropped + r.StderrDropped
	text := formatExec(r, req.MaxOutput)
	switch {
	case r.TimedOut:
		info.ErrorClass = gym.ClassToolTimeout
		info.Error = fmt.Sprintf("timed out after %s; the command and its children were killed", req.Timeout)
		text = "Timed out after " + req.Timeout.String() + "; the command and its children were killed.\n" + text
	case r.OOMKilled:
		info.ErrorClass = gym.ClassAgent
		info.Error = "killed: out of memory"
		text = "Killed: the sandbox ran out of memory.\n" + text
	}
	return text
}

// decodeArgs parses a call's JSON arguments into v, held to the tool's
// schema (gym.DecodeArguments): arguments it does not declare are refused.
func (s *session) decodeArgs(call gym.ToolCall, v any) error {
	var schema gym.Schema
	for _, t := range s.task.tools {
		if t.Function.Name == call.Function.Name {
			schema = t.Function.Parameters
		}
	}
	return gym.DecodeArguments(call.Function.Name, schema, call.Function.Arguments, v)
}

// fileError turns a sandbox file error into what the agent sees.
func fileError(tool, p string, err error) error {
	switch {
	case errors.Is(err, sandbox.ErrNotExist):
		return gym.Errorf(gym.ClassAgent, "%s: %s: no such file or directory", tool, p)
	case errors.Is(err, sandbox.ErrIsDir):
		return gym.Errorf(gym.ClassAgent, "%s: %s: is a directory", tool, p)
	case errors.Is(err, sandbox.ErrNotDir):
		return gym.Errorf(gym.ClassAgent, "%s: %s: a parent is not a directory", tool, p)
	case gym.ClassOf(err) == gym.ClassSandbox:
		return err
	}
	return gym.Classify(fmt.Errorf("%s: %s: %w", tool, p, err), gym.ClassAgent)
}

// resolve makes p absolute against the working directory.
func (s *session) resolve(p string) string {
	if p == "" {
		return s.task.cfg.WorkingDirectory
	}
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(s.task.cfg.WorkingDirectory, p)
}

// Evaluate ends the episode if needed and runs the hidden tests once.
func (s *session) Evaluate(ctx context.Context) (gym.Evaluation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eval == nil && s.closed {
		return gym.Evaluation{}, fmt.Errorf("session %s: evaluate: closed before evaluation: %w", s.id, gym.ErrEpisodeDone)
	}
	s.end(gym.ReasonEvaluated)
	return s.evaluate(ctx)
}

// evaluate runs the tests once; s.mu must be held.
func (s *session) evaluate(ctx context.Context) (gym.Evaluation, error) {
	if s.eval != nil {
		return *s.eval, nil
	}
	if s.reason == gym.ReasonAgentCrash {
		// Nothing is left to test; the failure is the agent's.
		s.eval = &gym.Evaluation{Mode: cmp.Or(s.task.cfg.Reward.Mode, "pass_rate"), Tests: []gym.TestCase{}, Commands: []gym.TestCommand{},
			ErrorClass: gym.ClassAgent, Error: "the agent crashed its sandbox: " + s.crash}
		return *s.eval, nil
	}
	ev, err := s.task.evaluate(ctx, s.sb)
	if err != nil {
		return gym.Evaluation{}, fmt.Errorf("session %s: evaluate: %w", s.id, err)
	}
	s.eval = &ev
	s.env.log.Info("session evaluated", "session_id", s.id, "reward", ev.Reward,
		"passed", ev.Passed, "total", ev.Total, "reason", s.reason, "error_class", ev.ErrorClass)
	return ev, nil
}

// Close ends the episode, removes the sandbox and returns the result.
func (s *session) Close(ctx context.Context) (gym.Result, error) {
	s.cancelMu.Lock()
	s.closing = true
	for _, cancel := range s.cancelStep {
		cancel()
	}
	s.cancelMu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.result, nil
	}
	s.closed = true
	s.end(gym.ReasonClosed)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	s.fetches.Wait() // bounded by fetchTimeout
	err := s.sb.Close(cctx)
	s.result = gym.Result{
		SessionID:         s.id,
		EnvID:             s.env.cfg.ID,
		TaskID:            s.task.src.ID,
		Steps:             s.steps,
		Actions:           s.actions,
		TerminationReason: s.reason,
		AgentDone:         s.agentDone,
		Evaluation:        s.eval,
		StartTime:         s.start,
		EndTime:           s.endTime,
	}
	s.env.log.Info("session closed", "session_id", s.id, "steps", s.steps, "reason", s.reason)
	if err != nil {
		return s.result, gym.Classify(fmt.Errorf("session %s: close sandbox: %w", s.id, err), gym.ClassSandbox)
	}
	return s.result, nil
}

func toolNames(tools []gym.Tool) []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Function.Name
	}
	return names
}
