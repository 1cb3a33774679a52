package rollout

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
	"github.com/gymserver/gymserver/policy/plugin"
)

// closeTimeout bounds closing a session, which runs on a fresh context
// because the run's may be cancelled.
const closeTimeout = 2 * time.Minute

// episode is the state of one running episode; one goroutine owns it.
type episode struct {
	r     *Runner
	env   *envEntry
	task  *taskEntry
	index int
	log   *slog.Logger

	sess  gym.Session
	reset gym.Reset
	traj  gym.Trajectory
	start time.Time

	// agentDeadline bounds the agent's time (policy calls); zero means
	// none. hardCtx carries the later hard deadline.
	agentDeadline time.Time
	hardCtx       context.Context

	// actions counts the tool calls attempted, blocked ones included.
	actions  int
	turn     int
	noAction int
	// preTest is set once pre_test fired for the coming evaluation.
	preTest bool

	// change is what the pre_episode plugins changed (nil when nothing);
	// maxActions and commandTimeout are the limits in force, the
	// environment's or lower (0: none).
	change         *plugin.EpisodeChange
	changedBy      []string
	maxActions     int
	commandTimeout time.Duration
	// score is the reward a post_test plugin gave the episode; scoredBy
	// names the plugins.
	score    *float64
	scoredBy []string

	// Outcome, set by end.
	ended      bool
	reason     gym.TerminationReason
	errClass   gym.ErrorClass
	errText    string
	mask       bool
	eval       *gym.Evaluation
	agentDone  bool
	doneMsg    string
	pluginData map[string]map[string]any
}

// errStopped reports that the run was cancelled while the episode ran.
var errStopped = errors.New("run stopped")

// runEpisode runs episode j. It returns the trajectory, or errStopped when
// the run was cancelled (the session is closed either way).
func (r *Runner) runEpisode(ctx context.Context, j job, pre plugin.Outcome) (*gym.Trajectory, error) {
	ep := &episode{
		r:     r,
		env:   j.env,
		task:  j.task,
		index: j.index,
		log:   r.log.With("env", j.env.id, "task_id", j.task.id, "episode", j.index),
		start: time.Now(),
		traj: gym.Trajectory{
			TrajectoryID:  newID(),
			EnvironmentID: j.env.id,
			TaskID:        j.task.id,
			Episode:       j.index,
			Policy:        r.opts.PolicyName,
			Model:         r.opts.Model,
			Steps:         []gym.TrajectoryStep{},
			TestResults:   []gym.TestCommand{},
		},
		pluginData: mergeOutcome(nil, pre),
		change:     pre.Episode,
		changedBy:  pre.EpisodeChangedBy,
	}
	ep.traj.StartTime = gym.TimeOf(ep.start)
	if err := ep.run(ctx); err != nil {
		return nil, err
	}
	return ep.finish(ctx), nil
}

// run drives the episode until it ends. It returns errStopped when ctx was
// cancelled; every other failure ends the episode with a classified
// outcome.
func (ep *episode) run(ctx context.Context) error {
	req := gym.ResetRequest{Task: ep.task.id}
	if c := ep.change; c != nil && len(c.EnvironmentVariables) > 0 {
		vars := make(map[string]any, len(c.EnvironmentVariables))
		for k, v := range c.EnvironmentVariables {
			vars[k] = v
		}
		req.Options = map[string]any{gym.OptionEnvironmentVariables: vars}
	}
	sess, reset, err := ep.env.env.Reset(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return errStopped
		}
		class := gym.ClassOf(err)
		if class == gym.ClassInternal {
			class = gym.ClassSandbox
		}
		// The agent did nothing: whatever failed, the sample is not its.
		ep.end(gym.ReasonSandboxError, class, fmt.Errorf("reset: %w", err), true)
		return nil
	}
	ep.sess, ep.reset = sess, reset
	ep.traj.SessionID = sess.ID()
	if reset.TaskID != "" {
		ep.traj.TaskID = reset.TaskID
	}
	ep.traj.Tools = reset.Tools
	ep.traj.Messages = slices.Clone(reset.Messages)
	ep.log = ep.log.With("session_id", sess.ID())
	defer ep.close(ctx)
	global := ep.applyChange()

	// The environment's clock started before Reset returned, so its own
	// deadline passes first and its truncation and evaluation win.
	ep.start = time.Now()
	hardCtx := ctx
	if global > 0 {
		ep.agentDeadline = ep.start.Add(global)
		var cancel context.CancelFunc
		hardCtx, cancel = context.WithDeadline(ctx, ep.agentDeadline.Add(ep.task.evalBudget+ep.r.opts.Grace))
		defer cancel()
	}
	ep.hardCtx = hardCtx

	for !ep.ended {
		if ctx.Err() != nil {
			return errStopped
		}
		if !ep.agentDeadline.IsZero() && !time.Now().Before(ep.agentDeadline) {
			return ep.evaluate(ctx, gym.ReasonTimeout)
		}
		if m := ep.maxActions; m > 0 && ep.actions >= m {
			// Blocked calls count towards the limit but never reach the
			// environment, which therefore cannot end the episode itself.
			return ep.evaluate(ctx, gym.ReasonMaxActions)
		}
		if why := ep.r.opts.Budget.spent(ep.traj.Usage, ep.r.opts.Cost); why != "" {
			ep.log.Info("episode budget spent; evaluating", "reason", why)
			return ep.evaluate(ctx, gym.ReasonBudget)
		}
		turn, parseErr, err := ep.act(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return errStopped
			}
			if !ep.agentDeadline.IsZero() && !time.Now().Before(ep.agentDeadline) {
				return ep.evaluate(ctx, gym.ReasonTimeout)
			}
			ep.log.Warn("policy failed; episode ends", "err", err)
			ep.end(gym.ReasonPolicyError, gym.ClassPolicy, err, true)
			break
		}
		if len(turn.Message.ToolCalls) == 0 {
			ep.noAction++
			if ep.noAction >= ep.r.opts.MaxNoActionTurns {
				return ep.evaluate(ctx, gym.ReasonNoAction)
			}
			if parseErr != nil {
				// The environment reads the text as it would a remote
				// trainer's and explains what is wrong with it.
				if err := ep.step(ctx, turn); err != nil {
					return err
				}
				continue
			}
			nudge := turn.ParseError
			if nudge == "" {
				nudge = fmt.Sprintf("You did not call a tool. Continue the task with the tools (%s), and call %s when it is complete.",
					strings.Join(toolNames(reset.Tools), ", "), gym.ToolMarkDone)
			}
			ep.traj.Messages = append(ep.traj.Messages, gym.Message{Role: gym.RoleUser, Content: nudge})
			continue
		}
		ep.noAction = 0
		if err := ep.step(ctx, turn); err != nil {
			return err
		}
	}
	return nil
}

// applyChange applies the pre_episode plugins' changes once the episode
// was reset: the prompt in the transcript and the limits the runner
// enforces, never above the environment's. It records what it applied in
// the trajectory and returns the episode's time budget (0: none).
func (ep *episode) applyChange() time.Duration {
	lim := ep.reset.Limits
	ep.maxActions, ep.commandTimeout = lim.MaxActions, time.Duration(lim.CommandTimeout)
	global := time.Duration(lim.GlobalTimeout)
	c := ep.change
	if c == nil {
		return global
	}
	rec := &gym.EpisodeChanges{By: ep.changedBy, EnvironmentVariables: c.EnvironmentVariables}
	if c.Prompt != nil {
		for i, m := range ep.traj.Messages {
			if m.Role == gym.RoleUser {
				rec.OriginalPrompt, rec.Prompt = m.Content, *c.Prompt
				ep.traj.Messages[i].Content = *c.Prompt
				break
			}
		}
	}
	// lower returns the smaller of the environment's limit (0: none) and
	// the plugins', and warns when the plugins asked for more.
	lower := func(name string, env, want int64) int64 {
		if env > 0 && want > env {
			ep.log.Warn("a plugin asked for a limit above the environment's; the environment's stands",
				"limit", name, "asked", want, "environment", env, "plugins", strings.Join(ep.changedBy, ", "))
			return env
		}
		return want
	}
	if c.MaxActions != nil {
		ep.maxActions = int(lower("max_actions", int64(ep.maxActions), int64(*c.MaxActions)))
		rec.MaxActions = ep.maxActions
	}
	if c.GlobalTimeout != nil {
		global = time.Duration(lower("global_timeout", int64(global), int64(*c.GlobalTimeout*float64(time.Second))))
		rec.GlobalTimeout = gym.Duration(global)
	}
	if c.CommandTimeout != nil {
		ep.commandTimeout = time.Duration(lower("command_timeout", int64(ep.commandTimeout), int64(*c.CommandTimeout*float64(time.Second))))
		rec.CommandTimeout = gym.Duration(ep.commandTimeout)
	}
	ep.traj.EpisodeChanges = rec
	return global
}

// act asks the policy for the next turn and records it in the transcript.
// A text turn's calls are read with toolparse.Calls, as the environment
// reads them, so that plugins and limits see them before the step; the
// error is the text's parse error, for the agent.
func (ep *episode) act(ctx context.Context) (turn gym.Turn, parseErr, err error) {
	actCtx := ep.hardCtx
	if !ep.agentDeadline.IsZero() {
		var cancel context.CancelFunc
		actCtx, cancel = context.WithDeadline(ep.hardCtx, ep.agentDeadline)
		defer cancel()
	}
	ep.turn++
	start := time.Now()
	turn, err = ep.task.policy.Act(actCtx, slices.Clip(ep.traj.Messages), ep.reset.Tools)
	rec := gym.TrajectoryTurn{Turn: ep.turn, MessageIndex: -1, Duration: gym.Duration(time.Since(start))}
	if err != nil {
		rec.Error = err.Error()
		ep.traj.Turns = append(ep.traj.Turns, rec)
		return gym.Turn{}, nil, err
	}
	msg := turn.Message
	msg.Role = gym.RoleAssistant
	msg.ToolCalls = slices.Clone(msg.ToolCalls)
	if turn.Parser != "" {
		msg.ToolCalls, parseErr = toolparse.Calls(textAction(turn))
		if parseErr != nil {
			rec.ParseError = parseErr.Error()
		}
	}
	seen := map[string]bool{}
	for i := range msg.ToolCalls {
		c := &msg.ToolCalls[i]
		if c.ID == "" || seen[c.ID] {
			c.ID = fmt.Sprintf("call_%d_%d", ep.turn, i)
		}
		if c.Type == "" {
			c.Type = "function"
		}
		seen[c.ID] = true
	}
	turn.Message = msg
	rec.MessageIndex = len(ep.traj.Messages)
	rec.Usage = turn.Usage
	rec.FinishReason = turn.FinishReason
	rec.ToolCalls = len(msg.ToolCalls)
	if turn.ParseError != "" {
		rec.ParseError = turn.ParseError
	}
	ep.traj.Turns = append(ep.traj.Turns, rec)
	ep.traj.Usage.Add(turn.Usage)
	ep.traj.Messages = append(ep.traj.Messages, msg)
	return turn, parseErr, nil
}

// textAction is the action of a text turn: its text and parser.
func textAction(turn gym.Turn) gym.Action {
	return gym.Action{Text: turn.Message.Content, Parser: turn.Parser}
}

// pending is one call of a turn on its way to the environment.
type pending struct {
	call gym.ToolCall
	// orig is the call as the policy made it when a plugin replaced it.
	orig      *gym.ToolCall
	blocked   bool
	blockedBy string
	reason    string
	// limited is set for a call past an action limit that a plugin
	// lowered: the runner does not send it.
	limited bool
}

// step runs the calls of one turn, the last message of the transcript:
// the pre_action plugins decide each call, the allowed ones are stepped
// together, and every call gets its tool message in order. A text turn
// whose calls no plugin touched is stepped as text, so the environment
// parses it and names its calls, exactly as for a remote trainer. It
// returns errStopped when ctx was cancelled.
func (ep *episode) step(ctx context.Context, turn gym.Turn) error {
	r := ep.r
	assistant := len(ep.traj.Messages) - 1
	calls := ep.traj.Messages[assistant].ToolCalls
	ps := make([]pending, len(calls))
	var allowed []gym.ToolCall
	envMax := ep.reset.Limits.MaxActions
	for i, c := range calls {
		ps[i].call = c
		if m := ep.maxActions; m > 0 && m != envMax && ep.actions+i >= m {
			// The environment would run it: its own limit is higher.
			ps[i].limited = true
			continue
		}
		if r.plugins.Wants(plugin.PreAction) {
			out := r.plugins.Fire(ctx, ep.event(plugin.PreAction, func(ev *plugin.Event) { ev.ToolCall = &c }))
			ep.absorb(out)
			if out.Blocked {
				ps[i].blocked, ps[i].blockedBy, ps[i].reason = true, out.BlockedBy, out.Reason
				ep.log.Info("tool call blocked", "plugin", out.BlockedBy, "tool", c.Function.Name, "reason", out.Reason)
				continue
			}
			if out.ToolCall != nil {
				orig := c
				ps[i].call, ps[i].orig = *out.ToolCall, &orig
			}
		}
		if capped, ok := capTimeout(ps[i].call, ep.commandTimeout, time.Duration(ep.reset.Limits.CommandTimeout)); ok {
			if ps[i].orig == nil {
				orig := ps[i].call
				ps[i].orig = &orig
			}
			ps[i].call = capped
		}
		allowed = append(allowed, ps[i].call)
	}
	if ctx.Err() != nil {
		return errStopped
	}
	if m := ep.maxActions; ep.endsEpisode(allowed) || (m > 0 && ep.actions+len(calls) >= m) {
		ep.firePreTest(ctx, false)
	}
	ep.actions += len(calls)

	action := gym.Action{ToolCalls: allowed}
	asText := turn.Parser != "" && len(allowed) == len(calls)
	for _, p := range ps {
		asText = asText && p.orig == nil
	}
	if asText {
		action = textAction(turn)
	}
	var sr gym.StepResult
	if len(allowed) > 0 || asText {
		var err error
		sr, err = ep.sess.Step(ep.hardCtx, action)
		if err != nil {
			if ctx.Err() != nil {
				return errStopped
			}
			if ep.hardCtx.Err() != nil {
				ep.end(gym.ReasonTimeout, gym.ClassSandbox, fmt.Errorf("step: the environment did not answer by the episode's hard deadline: %w", err), true)
			} else {
				class := gym.ClassOf(err)
				if class == gym.ClassInternal || class == gym.ClassEpisodeDone {
					class = gym.ClassSandbox
				}
				ep.end(gym.ReasonSandboxError, class, fmt.Errorf("step: %w", err), true)
			}
			ep.log.Warn("step failed; episode ends", "err", err)
			// The calls still need tool messages for the transcript to
			// stay a valid conversation.
		}
	}
	if asText && len(sr.ToolCalls) == len(ps) {
		// The environment named the calls it parsed.
		for i := range ps {
			ps[i].call = sr.ToolCalls[i]
		}
		ep.traj.Messages[assistant].ToolCalls = slices.Clone(sr.ToolCalls)
	}
	if len(ps) == 0 && sr.Observation.Text != "" {
		// No call ran (the text could not be read): the explanation is
		// the agent's next message.
		ep.traj.Messages = append(ep.traj.Messages, gym.Message{Role: gym.RoleUser, Content: sr.Observation.Text})
	}
	msgs := map[string]gym.Message{}
	for _, m := range sr.Observation.Messages {
		msgs[m.ToolCallID] = m
	}
	infos := map[string]gym.CallInfo{}
	for _, ci := range sr.Info.Calls {
		infos[ci.ID] = ci
	}
	for _, p := range ps {
		var msg gym.Message
		var info gym.CallInfo
		switch m, ok := msgs[p.call.ID]; {
		case p.blocked:
			msg = gym.Message{Content: fmt.Sprintf("Blocked by %s: %s. The call was not executed.", p.blockedBy, p.reason)}
			info = gym.CallInfo{ExitCode: -1, ErrorClass: gym.ClassAgent, Error: "blocked by " + p.blockedBy + ": " + p.reason, Blocked: true}
		case p.limited:
			msg = gym.Message{Content: fmt.Sprintf("Not executed: the action limit (%d) was reached.", ep.maxActions)}
			info = gym.CallInfo{ExitCode: -1, ErrorClass: gym.ClassAgent, Error: "action limit reached"}
		case ok:
			msg, info = m, infos[p.call.ID]
		default:
			msg = gym.Message{Content: "Not executed: the environment failed before running this call."}
			info = gym.CallInfo{ExitCode: -1, ErrorClass: ep.errClass, Error: "no result"}
		}
		msg.Role, msg.ToolCallID, msg.Name = gym.RoleTool, p.call.ID, p.call.Function.Name
		info.ID, info.Name = p.call.ID, p.call.Function.Name
		ep.traj.Messages = append(ep.traj.Messages, msg)
		ep.record(p, msg, info)
		if r.plugins.Wants(plugin.PostAction) {
			res := &plugin.ActionResult{Output: msg.Content, Call: info}
			out := r.plugins.Fire(ctx, ep.event(plugin.PostAction, func(ev *plugin.Event) { ev.ToolCall, ev.Result = &p.call, res }))
			ep.absorb(out)
		}
	}
	if sr.Info.AgentDone {
		ep.agentDone = true
	}
	if ep.ended || !sr.Done() {
		// A predicted end that did not happen (say, mark_done with bad
		// arguments) lets pre_test fire again before the real one.
		ep.preTest = false
		return nil
	}
	if !ep.preTest {
		ep.firePreTest(ctx, true)
	}
	ep.ended, ep.reason, ep.eval = true, sr.Info.TerminationReason, sr.Info.Evaluation
	if ep.reason == gym.ReasonSandboxError {
		ep.errClass, ep.mask = gym.ClassSandbox, true
	}
	ep.firePostTest(ctx)
	return nil
}

// endsEpisode reports whether calls include a well-formed mark_done, after
// which the environment runs the tests.
func (ep *episode) endsEpisode(calls []gym.ToolCall) bool {
	for _, c := range calls {
		if c.Function.Name != gym.ToolMarkDone {
			continue
		}
		var args gym.MarkDoneArgs
		raw := strings.TrimSpace(c.Function.Arguments)
		if raw == "" || json.Unmarshal([]byte(raw), &args) == nil {
			return true
		}
	}
	return false
}

// record appends the seed-shaped step of one call.
func (ep *episode) record(p pending, msg gym.Message, info gym.CallInfo) {
	a := actionOf(p.call)
	a.Turn = ep.turn
	a.OriginalToolCall = p.orig
	// A call that runs a command (execute_command, a custom tool) succeeds
	// when it exits 0; the file tools and mark_done have no exit status.
	runsCommand := p.call.Function.Name == gym.ToolExecuteCommand || !gym.IsStandardTool(p.call.Function.Name)
	success := info.ErrorClass == "" && (info.ExitCode == 0 || !runsCommand)
	ep.traj.Steps = append(ep.traj.Steps, gym.TrajectoryStep{
		StepID:    newID(),
		Timestamp: gym.TimeOf(time.Now()),
		Action:    a,
		Result: gym.TrajectoryResult{
			Success:    success,
			Output:     msg.Content,
			Duration:   info.Duration,
			ExitCode:   info.ExitCode,
			ErrorClass: info.ErrorClass,
			Error:      info.Error,
			Blocked:    info.Blocked,
		},
	})
	if p.call.Function.Name == gym.ToolMarkDone && info.ErrorClass == "" && !info.Blocked {
		var args gym.MarkDoneArgs
		_ = json.Unmarshal([]byte(p.call.Function.Arguments), &args)
		ep.doneMsg = args.Message
	}
}

// actionOf describes a call in the seed's action shape.
func actionOf(c gym.ToolCall) gym.TrajectoryAction {
	a := gym.TrajectoryAction{Type: c.Function.Name, Content: c.Function.Arguments, ToolCall: c}
	raw := []byte(c.Function.Arguments)
	switch c.Function.Name {
	case gym.ToolExecuteCommand:
		var args gym.ExecuteCommandArgs
		a.Type = "command"
		if json.Unmarshal(raw, &args) == nil {
			a.Content, a.Timeout = args.Command, args.Timeout
		}
	case gym.ToolWriteFile:
		var args gym.WriteFileArgs
		a.Type = "file_write"
		if json.Unmarshal(raw, &args) == nil {
			a.Content = args.Filepath
		}
	case gym.ToolReadFile:
		var args gym.ReadFileArgs
		a.Type = "file_read"
		if json.Unmarshal(raw, &args) == nil {
			a.Content = args.Filepath
		}
	case gym.ToolMarkDone:
		var args gym.MarkDoneArgs
		a.Type = "done"
		if json.Unmarshal(raw, &args) == nil {
			a.Content = args.Message
		}
	}
	return a
}

// evaluate ends a running episode from the runner's side (reason is the
// runner's: timeout, max_actions, no_action, budget) and runs the tests. It returns
// errStopped when ctx was cancelled.
func (ep *episode) evaluate(ctx context.Context, reason gym.TerminationReason) error {
	ep.firePreTest(ctx, false)
	ev, err := ep.sess.Evaluate(ep.hardCtx)
	if err != nil {
		if ctx.Err() != nil {
			return errStopped
		}
		class := gym.ClassOf(err)
		if class == gym.ClassInternal || class == gym.ClassEpisodeDone {
			class = gym.ClassSandbox
		}
		ep.end(reason, class, fmt.Errorf("evaluate: %w", err), true)
		return nil
	}
	ep.ended, ep.reason, ep.eval = true, reason, &ev
	ep.firePostTest(ctx)
	return nil
}

// end ends the episode without an evaluation.
func (ep *episode) end(reason gym.TerminationReason, class gym.ErrorClass, err error, mask bool) {
	ep.ended, ep.reason, ep.errClass, ep.mask = true, reason, class, mask
	if err != nil {
		ep.errText = err.Error()
	}
}

// close releases the session, on a fresh context so that it also runs when
// the run was cancelled.
func (ep *episode) close(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	if _, err := ep.sess.Close(cctx); err != nil {
		ep.log.Warn("close session", "err", err)
	}
}

func (ep *episode) firePreTest(ctx context.Context, after bool) {
	ep.preTest = true
	if !ep.r.plugins.Wants(plugin.PreTest) {
		return
	}
	msgs := slices.Clip(ep.traj.Messages)
	out := ep.r.plugins.Fire(ctx, ep.event(plugin.PreTest, func(ev *plugin.Event) { ev.Messages, ev.AfterEvaluation = msgs, after }))
	ep.absorb(out)
}

func (ep *episode) firePostTest(ctx context.Context) {
	if ep.eval == nil || !ep.r.plugins.Wants(plugin.PostTest) {
		return
	}
	ev := *ep.eval
	score := ev.Reward
	// The trajectory so far, for evaluators that look at the steps.
	snapshot := ep.traj
	snapshot.Steps = slices.Clip(snapshot.Steps)
	snapshot.Messages = slices.Clip(snapshot.Messages)
	snapshot.TestResults = ev.Commands
	snapshot.Evaluation = &ev
	snapshot.EpisodeResult = gym.EpisodeResult{Success: ev.Success && !ev.Mask, FinalScore: ev.Reward, TerminatedReason: ep.reason,
		AgentDone: ep.agentDone, Actions: len(ep.traj.Steps), Mask: ev.Mask, Tampered: ev.Tampered,
		TestsPassed: ev.Passed, TestsTotal: ev.Total, DurationSeconds: time.Since(ep.traj.StartTime.Time).Seconds()}
	out := ep.r.plugins.Fire(ctx, ep.event(plugin.PostTest, func(e *plugin.Event) {
		e.Evaluation, e.Reason, e.Score, e.Trajectory = &ev, ep.reason, &score, &snapshot
	}))
	ep.absorb(out)
	if out.Score != nil {
		sc := *out.Score
		ep.score = &sc
		ep.scoredBy = append(ep.scoredBy, out.ScoredBy...)
	}
}

// event returns an event of the episode for hook h, adjusted by set.
func (ep *episode) event(h plugin.Hook, set func(*plugin.Event)) plugin.Event {
	ev := plugin.Event{Hook: h, Env: ep.env.id, Task: ep.traj.TaskID, Episode: ep.index, SessionID: ep.traj.SessionID, Turn: ep.turn}
	if set != nil {
		set(&ev)
	}
	return ev
}

// absorb keeps the plugins' data and failures for the trajectory, and
// passes a stop to the runner.
func (ep *episode) absorb(out plugin.Outcome) {
	ep.pluginData = mergeOutcome(ep.pluginData, out)
	if out.Stop {
		ep.r.stopEnv(ep.env, "plugin "+out.StoppedBy)
	}
	ep.r.moreEpisodes(ep.env, out.MoreEpisodes, strings.Join(out.ScheduledBy, ", "))
	ep.r.setParallel(out.Parallel, out.ParallelBy)
}

// mergeOutcome merges an outcome's data and failures into per-plugin maps.
func mergeOutcome(m map[string]map[string]any, out plugin.Outcome) map[string]map[string]any {
	if len(out.Data) == 0 && len(out.Failures) == 0 {
		return m
	}
	if m == nil {
		m = map[string]map[string]any{}
	}
	for name, d := range out.Data {
		if m[name] == nil {
			m[name] = map[string]any{}
		}
		for k, v := range d {
			if k == "suggestions" {
				// Suggestions add up over the episode's hooks.
				v = append(strs(m[name][k]), strs(v)...)
			}
			m[name][k] = v
		}
	}
	for _, f := range out.Failures {
		if m[f.Plugin] == nil {
			m[f.Plugin] = map[string]any{}
		}
		errs, _ := m[f.Plugin]["errors"].([]string)
		m[f.Plugin]["errors"] = append(errs, string(f.Hook)+": "+f.Error)
	}
	return m
}

// finish completes the trajectory and fires post_episode.
func (ep *episode) finish(ctx context.Context) *gym.Trajectory {
	t := &ep.traj
	t.EndTime = gym.TimeOf(time.Now())
	er := gym.EpisodeResult{
		TerminatedReason: ep.reason,
		AgentDone:        ep.agentDone,
		AgentDoneMessage: ep.doneMsg,
		Actions:          len(t.Steps),
		ErrorClass:       ep.errClass,
		Error:            ep.errText,
		Mask:             ep.mask,
		DurationSeconds:  t.EndTime.Sub(t.StartTime.Time).Seconds(),
	}
	for _, s := range t.Steps {
		if s.Result.ErrorClass != "" {
			er.ActionErrors++
		}
	}
	if ev := ep.eval; ev != nil {
		t.Evaluation = ev
		t.TestResults = ev.Commands
		er.FinalScore = ev.Reward
		if ep.score != nil {
			tests := ev.Reward
			er.FinalScore, er.TestScore, er.ScoreAdjustedBy = *ep.score, &tests, strings.Join(ep.scoredBy, ", ")
		}
		er.TestsPassed, er.TestsTotal = ev.Passed, ev.Total
		if er.ErrorClass == "" && ev.ErrorClass != "" {
			er.ErrorClass, er.Error = ev.ErrorClass, ev.Error
		}
		er.Mask = er.Mask || ev.Mask
		er.Tampered = ev.Tampered
		er.Success = ev.Success && !er.Mask
	}
	if t.TestResults == nil {
		t.TestResults = []gym.TestCommand{}
	}
	t.EpisodeResult = er
	if ep.r.plugins.Wants(plugin.PostEpisode) {
		t.Plugins = pluginMap(ep.pluginData)
		snapshot := *t
		out := ep.r.plugins.Fire(ctx, ep.event(plugin.PostEpisode, func(ev *plugin.Event) { ev.Trajectory, ev.Reason = &snapshot, ep.reason }))
		ep.absorb(out)
	}
	t.Plugins = pluginMap(ep.pluginData)
	return t
}

// strs returns the strings of v: a []string, or a []any of strings (as
// JSON decodes them).
func strs(v any) []string {
	switch v := v.(type) {
	case []string:
		return v
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// capTimeout returns c with its timeout argument lowered to limit, when c
// is an execute_command call whose timeout is absent or larger, and limit
// (a plugin's) is below the environment's own envLimit.
func capTimeout(c gym.ToolCall, limit, envLimit time.Duration) (gym.ToolCall, bool) {
	if limit <= 0 || limit == envLimit || c.Function.Name != gym.ToolExecuteCommand {
		return c, false
	}
	var args map[string]any
	if json.Unmarshal([]byte(c.Function.Arguments), &args) != nil || args == nil {
		return c, false // the environment explains malformed arguments
	}
	secs := limit.Seconds()
	if t, ok := args["timeout"].(float64); ok && t > 0 && t <= secs {
		return c, false
	}
	args["timeout"] = secs
	b, err := json.Marshal(args)
	if err != nil {
		return c, false
	}
	c.Function.Arguments = string(b)
	return c, true
}

func pluginMap(m map[string]map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func toolNames(tools []gym.Tool) []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Function.Name
	}
	return names
}

// newID returns a random identifier.
func newID() string { return strings.ToLower(rand.Text()) }
