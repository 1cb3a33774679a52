package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/gymserver/gymserver/gym"
)

// scripted answers the n-th turn of an episode with turns[n]. It keeps no
// state: n is the number of assistant messages in the transcript, so one
// value serves any number of concurrent episodes.
type scripted struct {
	turns []gym.Message
}

var _ gym.Policy = (*scripted)(nil)

// NewScripted returns a policy that makes the given calls one per turn, in
// order: an oracle when calls is a task's reference solution. A call without
// an id gets "call_N", N its index. Once the calls are used up it answers
// without tool calls, which drivers take as the end of the episode. It never
// uses the network.
func NewScripted(calls []gym.ToolCall) gym.Policy {
	turns := make([]gym.Message, len(calls))
	for i, c := range calls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d", i)
		}
		if c.Type == "" {
			c.Type = "function"
		}
		turns[i] = gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{c}}
	}
	return &scripted{turns: turns}
}

// LoadReplay returns a policy that replays the assistant messages of the
// trajectory file at path (gym.Trajectory JSON) in order, tool calls and
// text as recorded. A trajectory without a transcript is replayed from its
// steps, one call per turn. Like NewScripted it answers without tool calls
// once the recording is used up, and never uses the network.
func LoadReplay(path string) (gym.Policy, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, gym.Classify(fmt.Errorf("replay: %w", err), gym.ClassNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	var tr gym.Trajectory
	if err := json.Unmarshal(b, &tr); err != nil {
		return nil, gym.Classify(fmt.Errorf("replay %s: decode trajectory: %w", path, err), gym.ClassInvalidArgument)
	}
	var turns []gym.Message
	for _, m := range tr.Messages {
		if m.Role == gym.RoleAssistant {
			m.ToolCalls = slices.Clone(m.ToolCalls)
			turns = append(turns, m)
		}
	}
	if len(turns) > 0 {
		return &scripted{turns: turns}, nil
	}
	var calls []gym.ToolCall
	for _, st := range tr.Steps {
		if st.Action.ToolCall.Function.Name != "" {
			calls = append(calls, st.Action.ToolCall)
		}
	}
	if len(calls) == 0 {
		return nil, gym.Errorf(gym.ClassInvalidArgument, "replay %s: the trajectory has no assistant messages and no steps with tool calls", path)
	}
	return NewScripted(calls), nil
}

// Act returns the recorded turn for the transcript's position.
func (s *scripted) Act(ctx context.Context, msgs []gym.Message, _ []gym.Tool) (gym.Turn, error) {
	if err := ctx.Err(); err != nil {
		return gym.Turn{}, err
	}
	n := 0
	for _, m := range msgs {
		if m.Role == gym.RoleAssistant {
			n++
		}
	}
	if n >= len(s.turns) {
		return gym.Turn{Message: gym.Message{Role: gym.RoleAssistant}, FinishReason: "stop"}, nil
	}
	m := s.turns[n]
	m.ToolCalls = slices.Clone(m.ToolCalls)
	reason := "stop"
	if len(m.ToolCalls) > 0 {
		reason = "tool_calls"
	}
	return gym.Turn{Message: m, FinishReason: reason}, nil
}
