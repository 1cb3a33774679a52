package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy"
)

// play runs p for n turns, answering every call with "ok", and returns the
// assistant messages.
func play(t *testing.T, p gym.Policy, n int) []gym.Message {
	t.Helper()
	msgs := start()
	var got []gym.Message
	for range n {
		turn, err := p.Act(t.Context(), msgs, gym.StandardTools())
		if err != nil {
			t.Fatalf("Act: %v", err)
		}
		got = append(got, turn.Message)
		msgs = append(msgs, turn.Message)
		for _, c := range turn.Message.ToolCalls {
			msgs = append(msgs, gym.Message{Role: gym.RoleTool, ToolCallID: c.ID, Content: "ok"})
		}
	}
	return got
}

func TestScripted(t *testing.T) {
	calls := []gym.ToolCall{
		{Function: gym.FunctionCall{Name: "write_file", Arguments: `{"filepath":"a.py","content":"x = 1\n"}`}},
		gym.NewToolCall("mine", "execute_command", `{"command": "python a.py"`),
		gym.NewToolCall("", "mark_done", `{}`),
	}
	p := policy.NewScripted(calls)
	calls[0].Function.Name = "changed after the fact"

	want := []gym.Message{
		{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("call_0", "write_file", `{"filepath":"a.py","content":"x = 1\n"}`)}},
		{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("mine", "execute_command", `{"command": "python a.py"`)}},
		{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("call_2", "mark_done", `{}`)}},
		{Role: gym.RoleAssistant},
	}
	if diff := cmp.Diff(want, play(t, p, 4)); diff != "" {
		t.Errorf("scripted turns (-want +got):\n%s", diff)
	}
	// Stateless: a second episode starts over.
	if diff := cmp.Diff(want[:1], play(t, p, 1)); diff != "" {
		t.Errorf("second episode (-want +got):\n%s", diff)
	}
}

func TestScriptedHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := policy.NewScripted([]gym.ToolCall{gym.NewToolCall("", "mark_done", "{}")}).Act(ctx, start(), nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Act with a cancelled context = %v, want context.Canceled", err)
	}
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trajectory.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadReplay(t *testing.T) {
	turn1 := gym.Message{Role: gym.RoleAssistant, Content: "Two at once.", ToolCalls: []gym.ToolCall{
		gym.NewToolCall("c1", "execute_command", `{"command":"ls"}`),
		gym.NewToolCall("c2", "read_file", `{"filepath":"README"`),
	}}
	turn2 := gym.Message{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("c3", "mark_done", `{}`)}}
	tr := gym.Trajectory{
		TrajectoryID: "t1",
		Messages: append(start(), turn1,
			gym.Message{Role: gym.RoleTool, ToolCallID: "c1", Content: "README"},
			gym.Message{Role: gym.RoleTool, ToolCallID: "c2", Content: "error"},
			turn2,
			gym.Message{Role: gym.RoleTool, ToolCallID: "c3", Content: "done"},
		),
		// Steps are ignored when the transcript is there.
		Steps: []gym.TrajectoryStep{{Action: gym.TrajectoryAction{ToolCall: gym.NewToolCall("x", "execute_command", "{}")}}},
	}
	p, err := policy.LoadReplay(writeJSON(t, tr))
	if err != nil {
		t.Fatalf("LoadReplay: %v", err)
	}
	want := []gym.Message{turn1, turn2, {Role: gym.RoleAssistant}}
	if diff := cmp.Diff(want, play(t, p, 3)); diff != "" {
		t.Errorf("replayed turns (-want +got):\n%s", diff)
	}
}

func TestLoadReplayFromSteps(t *testing.T) {
	tr := gym.Trajectory{Steps: []gym.TrajectoryStep{
		{Action: gym.TrajectoryAction{Type: "command", ToolCall: gym.NewToolCall("s1", "execute_command", `{"command":"ls"}`)}},
		{Action: gym.TrajectoryAction{Type: "done", ToolCall: gym.NewToolCall("s2", "mark_done", `{}`)}},
	}}
	p, err := policy.LoadReplay(writeJSON(t, tr))
	if err != nil {
		t.Fatalf("LoadReplay: %v", err)
	}
	want := []gym.Message{
		{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("s1", "execute_command", `{"command":"ls"}`)}},
		{Role: gym.RoleAssistant, ToolCalls: []gym.ToolCall{gym.NewToolCall("s2", "mark_done", `{}`)}},
	}
	if diff := cmp.Diff(want, play(t, p, 2)); diff != "" {
		t.Errorf("replayed turns (-want +got):\n%s", diff)
	}
}

func TestLoadReplayErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"messages": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		path  string
		class gym.ErrorClass
	}{
		{"missing", filepath.Join(dir, "missing.json"), gym.ClassNotFound},
		{"malformed", bad, gym.ClassInvalidArgument},
		{"empty", writeJSON(t, gym.Trajectory{TrajectoryID: "t"}), gym.ClassInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.LoadReplay(tt.path)
			if err == nil || gym.ClassOf(err) != tt.class {
				t.Errorf("LoadReplay(%s) = %v (class %q), want class %q", tt.path, err, gym.ClassOf(err), tt.class)
			}
		})
	}
}
