package executor_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// TestRootLinks runs the executor on the host as in a sandbox (an agent
// to act for; the host's / is root's, with /bin and /lib links into /usr):
// a program named through /bin is started by its path under /usr, a
// script through /lib by the path as written (its $0), argv[0] stays as
// written, and after a command with the machinery's rights the executor
// no longer takes the links' word for it.
func TestRootLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act for the agent")
	}
	for link, want := range map[string]string{"/bin": "usr/bin", "/lib": "usr/lib"} {
		if got, err := os.Readlink(link); err != nil || got != want {
			t.Skipf("the host's %s is not a link to %s (%q, %v)", link, want, got, err)
		}
	}
	if fi, err := os.Stat("/usr/bin/python3"); err != nil || fi.Mode()&0o111 == 0 {
		t.Skip("no /usr/bin/python3")
	}
	work := agentWorkDir(t, "rootlinks-")
	execFn, err := os.ReadFile("testdata/execfn.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "execfn.py"), execFn, 0o644); err != nil {
		t.Fatal(err)
	}
	// A script reached through /lib, the host's link to /usr/lib.
	dir, err := os.MkdirTemp("/usr/lib", "gymserver-rootlinks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "/lib/" + filepath.Base(dir) + "/argv0"
	if err := os.WriteFile(filepath.Join(dir, "argv0"), []byte("#!/bin/sh\necho \"$0\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gymexecBinary(t), "serve", "--workdir", work, "--agent", "1000:1000")
	c, _ := serveWith(t, cmd, (*exec.Cmd).Start)
	ctx := t.Context()
	run := func(req sandbox.ExecRequest) string {
		t.Helper()
		r, err := c.Exec(ctx, req)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: exit %d, stderr %q, %v", req.Argv, r.ExitCode, r.Stderr, err)
		}
		return strings.TrimSpace(string(r.Stdout))
	}
	line := func(l string) sandbox.ExecRequest { return sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", l}} }
	for _, tc := range []struct {
		what string
		req  sandbox.ExecRequest
		want string
	}{
		{"a line of a program and its arguments", line("/bin/python3 execfn.py"), "/usr/bin/python3"},
		{"an argv", sandbox.ExecRequest{Argv: []string{"/bin/python3", "execfn.py"}}, "/usr/bin/python3"},
		{"a program found on PATH", sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 execfn.py"}, Env: []string{"PATH=/bin"}}, "/usr/bin/python3"},
		{"the shell's $0", line("echo $0"), "/bin/sh"},
		{"a script's $0", line(script), script},
		{"a script's $0 through the shell", line(script + " | cat"), script},
	} {
		if got := run(tc.req); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.what, got, tc.want)
		}
	}
	run(sandbox.ExecRequest{Argv: []string{"/bin/true"}, Priv: true})
	if got := run(line("/bin/python3 execfn.py")); got != "/bin/python3" {
		t.Errorf("after a command with the machinery's rights: %q, want /bin/python3 (the links dropped)", got)
	}
}
