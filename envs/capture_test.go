package envs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/config"
)

// TestCaptureInMemoryFiles runs hidden tests that look at where pytest
// captures their output, with the verifier zygote and without: file
// descriptors 1 and 2 of a test are anonymous memory files (the guard's
// stand-in for the temporary files in /tmp) that the code under test
// cannot seal against pytest's writes, and what a failing test
// printed, through Python, a child process and the descriptor itself,
// still reaches the command's output; a passing test's output reaches it
// too (-rA), and the verdicts are the same both ways.
func TestCaptureInMemoryFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := `import fcntl, os, subprocess, sys

def _target(fd):
    return os.readlink("/proc/self/fd/%d" % fd)

def test_memory_capture():
    print("passing-output")
    for fd in (1, 2):
        assert _target(fd).startswith("/memfd:pytest-capture"), _target(fd)
        # Code under test may not seal them: pytest writes and truncates
        # them after the test.
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK)
        except PermissionError:
            pass
        else:
            raise AssertionError("sealed capture file %d" % fd)

def test_output_reaches_report():
    print("from-" + "print")
    sys.stdout.flush()
    subprocess.run(["/bin/echo", "from-" + "child"], check=True)
    os.write(2, b"from-" + b"fd-2\n")
    assert False
`
	if err := os.WriteFile(filepath.Join(dir, "test_capture.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got [2][]string
	for i, on := range []bool{true, false} {
		e, ec, p := zygoteEnv(t, "fix_inventory", on, func(ec *config.Environment) {
			ec.HiddenTests = []config.CopySpec{{Src: dir, Dest: "/workspace/tests"}}
			ec.UnitTests = []string{"python3 -m pytest tests/test_capture.py"}
			ec.ID = "fix_inventory_capture_" + boolWord(on, "zygote")
		})
		s, _ := reset(t, e)
		if on {
			p.zygoteReady(t)
		}
		r := finish(t, s, ec)
		checkPath(t, p, on, 1)
		ev := r.Info.Evaluation
		if ev.Tampered || ev.Mask || ev.ErrorClass != "" || ev.Passed != 1 || ev.Failed != 1 || ev.Total != 2 {
			t.Fatalf("zygote %v: %s; %v", on, describe(r), ev.Commands)
		}
		out := ev.Commands[0].Output
		for _, want := range []string{"from-print", "from-child", "from-fd-2", "passing-output"} {
			if !strings.Contains(out, want) {
				t.Errorf("zygote %v: %q is not in the test command's output:\n%s", on, want, out)
			}
		}
		got[i] = verdicts(ev)
	}
	if strings.Join(got[0], "\n") != strings.Join(got[1], "\n") {
		t.Errorf("verdicts differ: with the zygote %q, without %q", got[0], got[1])
	}
}
