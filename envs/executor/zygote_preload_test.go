package executor_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// TestZygotePreloadOp checks the zygote op's module names on the wire: a
// real executor refuses names that are not module names, and too many,
// as invalid arguments; names passed on before any zygote runs (NoStart)
// start none, and reach the zygote started later, whose test runs hold
// them.
func TestZygotePreloadOp(t *testing.T) {
	work := agentWorkDir(t, "preload-")
	test := "import sys\nHELD = 'http.server' in sys.modules\n\ndef test_held():\n    print('HELD', HELD)\n"
	if err := os.WriteFile(work+"/test_held.py", []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gymexecBinary(t), "serve", "--workdir", work, "--agent", "1000:1000")
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin") // Debian's python3 and pytest
	c, _ := serveWith(t, cmd, (*exec.Cmd).Start)
	ctx := t.Context()

	tooMany := make([]string, 257)
	for i := range tooMany {
		tooMany[i] = "m"
	}
	for _, bad := range [][]string{{""}, {"os;import this"}, {"a..b"}, {"1abc"}, {".rel"}, {strings.Repeat("a", 129)}, tooMany} {
		if err := c.PreloadZygote(ctx, bad); !errors.Is(err, gym.ErrInvalidArgument) {
			t.Errorf("preload %.40q (%d names): %v, want an invalid-argument error", bad[0], len(bad), err)
		}
	}
	if err := c.PreloadZygote(ctx, []string{"http.server"}); err != nil {
		t.Fatal(err)
	}
	// The environment of a test run (see envs.testRun.env).
	env := []string{"PYTHONNOUSERSITE=1", "PYTHONSAFEPATH=1", "PYTHONDONTWRITEBYTECODE=1"}
	r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 -m pytest -s -q -p no:cacheprovider test_held.py"},
		Env: env, Zygote: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.ViaZygote || r.ZygoteMiss != "no zygote started" {
		t.Fatalf("a preload started a zygote: via %v, miss %q", r.ViaZygote, r.ZygoteMiss)
	}
	if st, err := c.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true}); err != nil || !st.Ready {
		t.Fatalf("zygote: %+v %v", st, err)
	}
	r, err = c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 -m pytest -s -q -p no:cacheprovider test_held.py"},
		Env: env, Zygote: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.ViaZygote || r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "HELD True") {
		t.Fatalf("via the zygote %v (%s), exit %d:\n%s%s", r.ViaZygote, r.ZygoteMiss, r.ExitCode, r.Stdout, r.Stderr)
	}
}
