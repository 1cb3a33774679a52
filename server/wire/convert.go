package wire

import (
	"fmt"
	"math"
	"time"

	"github.com/gymserver/gymserver/gym"
)

// The conversions below are the only place where gym types meet wire
// types: durations become float seconds, times Unix seconds, nil slices
// empty lists where PROTOCOL.md promises a list.

// seconds converts a gym duration to float seconds.
func seconds(d gym.Duration) float64 { return time.Duration(d).Seconds() }

// duration converts float seconds to a gym duration.
func duration(s float64) gym.Duration { return gym.Duration(s * float64(time.Second)) }

// unix converts a time to Unix seconds; the zero time is 0.
func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// fromUnix converts Unix seconds to a time; 0 is the zero time.
func fromUnix(s float64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(s*1e9)).UTC()
}

// FromEnvSpec converts an environment spec.
func FromEnvSpec(s gym.EnvSpec) EnvSpec {
	return EnvSpec{ID: s.ID, Description: s.Description, Tasks: FromTaskSpecs(s.Tasks), TaskCount: s.TaskCount, Tools: FromTools(s.Tools)}
}

// ToEnvSpec converts an environment spec.
func ToEnvSpec(s EnvSpec) gym.EnvSpec {
	out := gym.EnvSpec{ID: s.ID, Description: s.Description, TaskCount: s.TaskCount, Tools: ToTools(s.Tools)}
	if len(s.Tasks) > 0 {
		out.Tasks = ToTaskSpecs(s.Tasks)
	}
	return out
}

// FromTaskSpecs converts task specs; the result is never nil. Integral
// numbers in metadata become integers, so that msgpack readers see the
// 3 a JSON config holds, not 3.0.
func FromTaskSpecs(ts []gym.TaskSpec) []TaskSpec {
	out := make([]TaskSpec, len(ts))
	for i, t := range ts {
		out[i] = TaskSpec{ID: t.ID, Prompt: t.Prompt, TestCommands: t.TestCommands, HasReference: t.HasReference}
		if t.Metadata != nil {
			out[i].Metadata = wireValue(t.Metadata).(map[string]any)
		}
	}
	return out
}

// ToTaskSpecs converts task specs; the result is never nil. Metadata
// values become what encoding/json would produce (see JSONValue).
func ToTaskSpecs(ts []TaskSpec) []gym.TaskSpec {
	out := make([]gym.TaskSpec, len(ts))
	for i, t := range ts {
		out[i] = gym.TaskSpec{ID: t.ID, Prompt: t.Prompt, TestCommands: t.TestCommands, HasReference: t.HasReference,
			Metadata: JSONMap(t.Metadata)}
	}
	return out
}

// maxExactInt is 2^53: integral float64 values below it are exact integers.
const maxExactInt = 1 << 53

// wireValue returns a JSON-decoded value with integral numbers as int64.
func wireValue(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < maxExactInt {
			return int64(x)
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = wireValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = wireValue(e)
		}
		return out
	}
	return v
}

// JSONMap converts a msgpack-decoded map to the values encoding/json would
// produce (see JSONValue); nil stays nil.
func JSONMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = JSONValue(v)
	}
	return out
}

// JSONValue converts a msgpack-decoded value to the value encoding/json
// would produce for it: numbers become float64, bin strings, maps
// map[string]any. Its depth is bounded by the frame's (MaxDepth).
func JSONValue(v any) any {
	switch x := v.(type) {
	case int8:
		return float64(x)
	case int16:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case int:
		return float64(x)
	case uint8:
		return float64(x)
	case uint16:
		return float64(x)
	case uint32:
		return float64(x)
	case uint64:
		return float64(x)
	case uint:
		return float64(x)
	case float32:
		return float64(x)
	case []byte:
		return string(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = JSONValue(e)
		}
		return out
	case map[string]any:
		return JSONMap(x)
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = JSONValue(e)
		}
		return out
	}
	return v
}

// FromTools converts tool schemas.
func FromTools(ts []gym.Tool) []Tool {
	out := make([]Tool, len(ts))
	for i, t := range ts {
		props := make(map[string]Property, len(t.Function.Parameters.Properties))
		for k, p := range t.Function.Parameters.Properties {
			props[k] = fromProperty(p)
		}
		req := t.Function.Parameters.Required
		if req == nil {
			req = []string{}
		}
		out[i] = Tool{Type: t.Type, Function: FunctionSpec{
			Name:        t.Function.Name,
			Description: t.Function.Description,
			Parameters: Schema{
				Type:                 t.Function.Parameters.Type,
				Properties:           props,
				Required:             req,
				AdditionalProperties: t.Function.Parameters.AdditionalProperties,
			},
		}}
	}
	return out
}

// fromProperty converts a parameter's schema.
func fromProperty(p gym.Property) Property {
	out := Property{Type: p.Type, Description: p.Description, Enum: p.Enum}
	if p.Items != nil {
		it := fromProperty(*p.Items)
		out.Items = &it
	}
	return out
}

// toProperty converts a parameter's schema.
func toProperty(p Property) gym.Property {
	out := gym.Property{Type: p.Type, Description: p.Description, Enum: p.Enum}
	if p.Items != nil {
		it := toProperty(*p.Items)
		out.Items = &it
	}
	return out
}

// ToTools converts tool schemas.
func ToTools(ts []Tool) []gym.Tool {
	out := make([]gym.Tool, len(ts))
	for i, t := range ts {
		props := make(map[string]gym.Property, len(t.Function.Parameters.Properties))
		for k, p := range t.Function.Parameters.Properties {
			props[k] = toProperty(p)
		}
		req := t.Function.Parameters.Required
		if req == nil {
			req = []string{}
		}
		out[i] = gym.Tool{Type: t.Type, Function: gym.FunctionSpec{
			Name:        t.Function.Name,
			Description: t.Function.Description,
			Parameters: gym.Schema{
				Type:                 t.Function.Parameters.Type,
				Properties:           props,
				Required:             req,
				AdditionalProperties: t.Function.Parameters.AdditionalProperties,
			},
		}}
	}
	return out
}

// FromToolCalls converts tool calls; nil stays nil.
func FromToolCalls(cs []gym.ToolCall) []ToolCall {
	if cs == nil {
		return nil
	}
	out := make([]ToolCall, len(cs))
	for i, c := range cs {
		out[i] = ToolCall{ID: c.ID, Type: c.Type, Function: FunctionCall{Name: c.Function.Name, Arguments: Arguments(c.Function.Arguments)}}
	}
	return out
}

// ToToolCalls converts tool calls, defaulting Type to "function"; nil
// stays nil.
func ToToolCalls(cs []ToolCall) []gym.ToolCall {
	if cs == nil {
		return nil
	}
	out := make([]gym.ToolCall, len(cs))
	for i, c := range cs {
		typ := c.Type
		if typ == "" {
			typ = "function"
		}
		out[i] = gym.ToolCall{ID: c.ID, Type: typ, Function: gym.FunctionCall{Name: c.Function.Name, Arguments: string(c.Function.Arguments)}}
	}
	return out
}

// FromMessages converts chat messages; the result is never nil.
func FromMessages(ms []gym.Message) []Message {
	out := make([]Message, len(ms))
	for i, m := range ms {
		out[i] = Message{Role: m.Role, Content: m.Content, ToolCalls: FromToolCalls(m.ToolCalls), ToolCallID: m.ToolCallID, Name: m.Name}
	}
	return out
}

// ToMessages converts chat messages; the result is never nil.
func ToMessages(ms []Message) []gym.Message {
	out := make([]gym.Message, len(ms))
	for i, m := range ms {
		out[i] = gym.Message{Role: m.Role, Content: m.Content, ToolCalls: ToToolCalls(m.ToolCalls), ToolCallID: m.ToolCallID, Name: m.Name}
	}
	return out
}

// FromReset converts the initial observation of an episode.
func FromReset(r gym.Reset) ResetResult {
	return ResetResult{
		SessionID:    r.SessionID,
		Env:          r.EnvID,
		Task:         r.TaskID,
		SystemPrompt: r.SystemPrompt,
		Prompt:       r.Prompt,
		Tools:        FromTools(r.Tools),
		Messages:     FromMessages(r.Messages),
		Limits: EpisodeLimits{
			MaxActions:     r.Limits.MaxActions,
			GlobalTimeout:  seconds(r.Limits.GlobalTimeout),
			CommandTimeout: seconds(r.Limits.CommandTimeout),
		},
		ForkOf:  r.ForkOf,
		Steps:   r.Steps,
		Actions: r.Actions,
	}
}

// ToReset converts the initial observation of an episode.
func ToReset(r ResetResult) gym.Reset {
	return gym.Reset{
		SessionID:    r.SessionID,
		EnvID:        r.Env,
		TaskID:       r.Task,
		SystemPrompt: r.SystemPrompt,
		Prompt:       r.Prompt,
		Tools:        ToTools(r.Tools),
		Messages:     ToMessages(r.Messages),
		Limits: gym.EpisodeLimits{
			MaxActions:     r.Limits.MaxActions,
			GlobalTimeout:  duration(r.Limits.GlobalTimeout),
			CommandTimeout: duration(r.Limits.CommandTimeout),
		},
		ForkOf:  r.ForkOf,
		Steps:   r.Steps,
		Actions: r.Actions,
	}
}

// FromStepResult converts the outcome of a step; Info.Mask is
// gym.StepInfo.Mask.
func FromStepResult(r gym.StepResult) StepResult {
	out := StepResult{
		Observation: Observation{Messages: FromMessages(r.Observation.Messages), Text: r.Observation.Text},
		Reward:      r.Reward,
		Terminated:  r.Terminated,
		Truncated:   r.Truncated,
		Info: StepInfo{
			Step:              r.Info.Step,
			Actions:           r.Info.Actions,
			Calls:             make([]CallInfo, len(r.Info.Calls)),
			TerminationReason: string(r.Info.TerminationReason),
			AgentDone:         r.Info.AgentDone,
			Mask:              r.Info.Mask(),
		},
	}
	for i, c := range r.Info.Calls {
		out.Info.Calls[i] = CallInfo{
			ID:            c.ID,
			Name:          c.Name,
			ExitCode:      c.ExitCode,
			Duration:      seconds(c.Duration),
			ErrorClass:    string(c.ErrorClass),
			Error:         c.Error,
			OutputDropped: c.OutputDropped,
			Blocked:       c.Blocked,
		}
	}
	if r.Info.Evaluation != nil {
		ev := FromEvaluation(*r.Info.Evaluation)
		out.Info.Evaluation = &ev
	}
	out.ToolCalls = FromToolCalls(r.ToolCalls)
	return out
}

// ToStepResult converts the outcome of a step.
func ToStepResult(r StepResult) gym.StepResult {
	out := gym.StepResult{
		Observation: gym.Observation{Messages: ToMessages(r.Observation.Messages), Text: r.Observation.Text},
		Reward:      r.Reward,
		Terminated:  r.Terminated,
		Truncated:   r.Truncated,
		Info: gym.StepInfo{
			Step:              r.Info.Step,
			Actions:           r.Info.Actions,
			TerminationReason: gym.TerminationReason(r.Info.TerminationReason),
			AgentDone:         r.Info.AgentDone,
		},
	}
	if r.Info.Calls != nil {
		out.Info.Calls = make([]gym.CallInfo, len(r.Info.Calls))
	}
	for i, c := range r.Info.Calls {
		out.Info.Calls[i] = gym.CallInfo{
			ID:            c.ID,
			Name:          c.Name,
			ExitCode:      c.ExitCode,
			Duration:      duration(c.Duration),
			ErrorClass:    gym.ErrorClass(c.ErrorClass),
			Error:         c.Error,
			OutputDropped: c.OutputDropped,
			Blocked:       c.Blocked,
		}
	}
	if r.Info.Evaluation != nil {
		ev := ToEvaluation(*r.Info.Evaluation)
		out.Info.Evaluation = &ev
	}
	out.ToolCalls = ToToolCalls(r.ToolCalls)
	return out
}

// FromEvaluation converts an evaluation.
func FromEvaluation(e gym.Evaluation) Evaluation {
	out := Evaluation{
		Reward:     e.Reward,
		Success:    e.Success,
		Mode:       e.Mode,
		Passed:     e.Passed,
		Failed:     e.Failed,
		Errors:     e.Errors,
		Skipped:    e.Skipped,
		Total:      e.Total,
		Tests:      make([]TestCase, len(e.Tests)),
		Commands:   make([]TestCommand, len(e.Commands)),
		Duration:   seconds(e.Duration),
		ErrorClass: string(e.ErrorClass),
		Error:      e.Error,
		Mask:       e.Mask,
		Tampered:   e.Tampered,
		Metrics:    e.Metrics,
		RewardKey:  e.RewardKey,
	}
	for i, t := range e.Tests {
		out.Tests[i] = TestCase{Name: t.Name, Status: t.Status, Message: t.Message, Command: t.Command}
	}
	for i, c := range e.Commands {
		out.Commands[i] = TestCommand{Command: c.Command, ExitCode: c.ExitCode, Output: c.Output,
			Duration: seconds(c.Duration), TimedOut: c.TimedOut, Source: c.Source, Success: c.Success}
	}
	return out
}

// ToEvaluation converts an evaluation.
func ToEvaluation(e Evaluation) gym.Evaluation {
	out := gym.Evaluation{
		Reward:     e.Reward,
		Success:    e.Success,
		Mode:       e.Mode,
		Passed:     e.Passed,
		Failed:     e.Failed,
		Errors:     e.Errors,
		Skipped:    e.Skipped,
		Total:      e.Total,
		Tests:      make([]gym.TestCase, len(e.Tests)),
		Commands:   make([]gym.TestCommand, len(e.Commands)),
		Duration:   duration(e.Duration),
		ErrorClass: gym.ErrorClass(e.ErrorClass),
		Error:      e.Error,
		Mask:       e.Mask,
		Tampered:   e.Tampered,
		Metrics:    e.Metrics,
		RewardKey:  e.RewardKey,
	}
	for i, t := range e.Tests {
		out.Tests[i] = gym.TestCase{Name: t.Name, Status: t.Status, Message: t.Message, Command: t.Command}
	}
	for i, c := range e.Commands {
		out.Commands[i] = gym.TestCommand{Command: c.Command, ExitCode: c.ExitCode, Output: c.Output,
			Duration: duration(c.Duration), TimedOut: c.TimedOut, Source: c.Source, Success: c.Success}
	}
	return out
}

// FromResult converts the final record of a session.
func FromResult(r gym.Result) Result {
	out := Result{
		SessionID:         r.SessionID,
		Env:               r.EnvID,
		Task:              r.TaskID,
		Steps:             r.Steps,
		Actions:           r.Actions,
		TerminationReason: string(r.TerminationReason),
		AgentDone:         r.AgentDone,
		StartTime:         unix(r.StartTime),
		EndTime:           unix(r.EndTime),
	}
	if r.Evaluation != nil {
		ev := FromEvaluation(*r.Evaluation)
		out.Evaluation = &ev
	}
	return out
}

// ToResult converts the final record of a session.
func ToResult(r Result) gym.Result {
	out := gym.Result{
		SessionID:         r.SessionID,
		EnvID:             r.Env,
		TaskID:            r.Task,
		Steps:             r.Steps,
		Actions:           r.Actions,
		TerminationReason: gym.TerminationReason(r.TerminationReason),
		AgentDone:         r.AgentDone,
		StartTime:         fromUnix(r.StartTime),
		EndTime:           fromUnix(r.EndTime),
	}
	if r.Evaluation != nil {
		ev := ToEvaluation(*r.Evaluation)
		out.Evaluation = &ev
	}
	return out
}

// FromSnapshot converts a snapshot description.
func FromSnapshot(s gym.Snapshot) Snapshot {
	return Snapshot{
		ID:        s.ID,
		Env:       s.EnvID,
		Task:      s.TaskID,
		SessionID: s.SessionID,
		Steps:     s.Steps,
		Actions:   s.Actions,
		Elapsed:   seconds(s.Elapsed),
		Created:   unix(s.Created),
		Mode:      s.Mode,
		Fallback:  s.Fallback,
		Bytes:     s.Bytes,
	}
}

// ToSnapshot converts a snapshot description.
func ToSnapshot(s Snapshot) gym.Snapshot {
	return gym.Snapshot{
		ID:        s.ID,
		EnvID:     s.Env,
		TaskID:    s.Task,
		SessionID: s.SessionID,
		Steps:     s.Steps,
		Actions:   s.Actions,
		Elapsed:   duration(s.Elapsed),
		Created:   fromUnix(s.Created),
		Mode:      s.Mode,
		Fallback:  s.Fallback,
		Bytes:     s.Bytes,
	}
}
