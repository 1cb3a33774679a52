package policy_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy"
)

// transcript builds messages from a compact form: "s" system, "u" user,
// "a" assistant, "aN" assistant with N tool calls, "t" tool.
func transcript(spec string) []gym.Message {
	var msgs []gym.Message
	for i, f := range strings.Fields(spec) {
		m := gym.Message{Content: f + "#" + string(rune('A'+i))}
		switch f[0] {
		case 's':
			m.Role = gym.RoleSystem
		case 'u':
			m.Role = gym.RoleUser
		case 'a':
			m.Role = gym.RoleAssistant
			for range len(f) - 1 {
				m.ToolCalls = append(m.ToolCalls, gym.NewToolCall("", "execute_command", "{}"))
			}
		case 't':
			m.Role = gym.RoleTool
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// contents names the messages of msgs, as transcript built them.
func contents(msgs []gym.Message) string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Content)
	}
	return strings.Join(out, " ")
}

func TestTrimMessages(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"no limit", "s u a2 t t a", 0, "s#A u#B a2#C t#D t#E a#F"},
		{"fits", "s u a2 t t", 5, "s#A u#B a2#C t#D t#E"},
		{"drops oldest turn", "s u a1 t a1 t", 4, "s#A u#B a1#E t#F"},
		{"keeps as many turns as fit", "s u a1 t a1 t a1 t", 6, "s#A u#B a1#E t#F a1#G t#H"},
		{"never splits tool replies", "s u a2 t t a2 t t", 4, "s#A u#B a2#F t#G t#H"},
		{"a turn that does not fit is dropped whole", "s u a2 t t a1 t", 5, "s#A u#B a1#F t#G"},
		{"last turn kept even when too long", "s u a1 t a3 t t t", 3, "s#A u#B a3#E t#F t#G t#H"},
		{"user feedback belongs to its turn", "s u a u a1 t", 4, "s#A u#B a1#E t#F"},
		{"several system messages", "s s u a1 t a1 t", 5, "s#A s#B u#C a1#F t#G"},
		{"no system message", "u a1 t a1 t", 3, "u#A a1#D t#E"},
		{"messages before the first assistant stay with it", "s u u a1 t a1 t", 5, "s#A u#B a1#F t#G"},
		{"only head", "s u u u", 2, "s#A u#B u#C u#D"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := transcript(tt.in)
			orig := contents(in)
			got := policy.TrimMessages(in, tt.max)
			if diff := cmp.Diff(tt.want, contents(got)); diff != "" {
				t.Errorf("TrimMessages(%q, %d) (-want +got):\n%s", tt.in, tt.max, diff)
			}
			if contents(in) != orig {
				t.Errorf("TrimMessages modified its input")
			}
		})
	}
}

func TestTruncateOutput(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"no limit", "abcdef", 0, "abcdef"},
		{"fits", "abcdef", 6, "abcdef"},
		{"cut", "abcdefghij", 4, "ab\n[... 6 bytes omitted ...]\nij"},
		{"odd max", "abcdefghij", 5, "ab\n[... 5 bytes omitted ...]\nhij"},
		// "é" is two bytes; a cut never splits it.
		{"utf-8", "ééééé", 5, "é\n[... 6 bytes omitted ...]\né"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policy.TruncateOutput(tt.in, tt.max)
			if got != tt.want {
				t.Errorf("TruncateOutput(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("TruncateOutput(%q, %d) is not valid UTF-8", tt.in, tt.max)
			}
		})
	}
}
