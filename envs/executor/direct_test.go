package executor

import (
	"slices"
	"testing"
)

// TestPlainCommand checks which command lines start without the shell:
// only a program and its arguments, every word literal.
func TestPlainCommand(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"/bin/echo hi", []string{"/bin/echo", "hi"}},
		{"  ls\t-la  /tmp ", []string{"ls", "-la", "/tmp"}},
		{"python3 -m pytest -q tests/ -k=x", []string{"python3", "-m", "pytest", "-q", "tests/", "-k=x"}},
		{"", nil},
		{"echo hi", nil},    // a builtin
		{"cd /tmp", nil},    // a builtin
		{"if true", nil},    // a reserved word
		{"A=1 env", nil},    // an assignment
		{"ls *.py", nil},    // a glob
		{"ls ~", nil},       // a tilde
		{"echo $HOME", nil}, // a variable
		{"ls 'a b'", nil},   // quotes
		{"ls > out", nil},   // a redirection
		{"ls; ls", nil},     // two commands
		{"ls | wc", nil},    // a pipe
		{"sleep 1 &", nil},  // background
		{"ls # note", nil},  // a comment
		{"ls\nls", nil},     // two lines
		{"ls \\n", nil},     // a backslash
		{"ls [ab]", nil},    // a bracket glob
	} {
		got, ok := plainCommand(tc.line)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("plainCommand(%q) = %q, %v; want %q", tc.line, got, ok, tc.want)
		}
	}
}
