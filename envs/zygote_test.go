package envs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// pathProvider records, for every test command (an exec with a report),
// whether it ran through the verifier zygote.
type pathProvider struct {
	sandbox.Provider
	// mu guards the fields below.
	mu    sync.Mutex
	execs []sandbox.ExecResult
	last  *pathSandbox
}

func (p *pathProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	ps := &pathSandbox{Sandbox: sb, p: p}
	p.mu.Lock()
	p.last = ps
	p.mu.Unlock()
	if a, ok := sb.(sandbox.Archiver); ok {
		// Snapshots and forks need it.
		return archivingSandbox{ps, a}, nil
	}
	return ps, nil
}

// archivingSandbox is a pathSandbox of a sandbox that can also be saved
// and restored as an archive.
type archivingSandbox struct {
	*pathSandbox
	sandbox.Archiver
}

// lastSandbox returns the sandbox made last.
func (p *pathProvider) lastSandbox() *pathSandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// zygoteReady waits until the zygote of the last sandbox is ready, as it
// is when the agent's turns outlast its start (they do not in a test).
func (p *pathProvider) zygoteReady(t *testing.T) {
	t.Helper()
	sb := p.lastSandbox()
	st, err := sb.StartZygote(t.Context(), sandbox.ZygoteOptions{Wait: true})
	if err != nil || !st.Ready {
		t.Fatalf("zygote: %+v %v", st, err)
	}
}

// take returns the recorded test commands and forgets them.
func (p *pathProvider) take() []sandbox.ExecResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.execs
	p.execs = nil
	return out
}

type pathSandbox struct {
	sandbox.Sandbox
	p *pathProvider
}

func (s *pathSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	r, err := s.Sandbox.Exec(ctx, req)
	if err == nil && req.Report {
		s.p.mu.Lock()
		s.p.execs = append(s.p.execs, r)
		s.p.mu.Unlock()
	}
	return r, err
}

func (s *pathSandbox) StartZygote(ctx context.Context, opts sandbox.ZygoteOptions) (sandbox.ZygoteStatus, error) {
	return s.Sandbox.(sandbox.ZygoteStarter).StartZygote(ctx, opts)
}

// zygoteEnv makes an environment of an example on a provider that records
// the test commands' path, with the verifier zygote on or off.
func zygoteEnv(t *testing.T, example string, on bool, edit func(*config.Environment)) (*envs.TaskEnv, config.Environment, *pathProvider) {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", example, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ec := cfg.Environments[0]
	if edit != nil {
		edit(&ec)
	}
	ec.VerifierZygote = &on
	p := &pathProvider{Provider: testProvider(t)}
	e, err := envs.New(cfg, ec, envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	return e, ec, p
}

// checkPath asserts that every test command took the wanted path.
func checkPath(t *testing.T, p *pathProvider, viaZygote bool, commands int) {
	t.Helper()
	execs := p.take()
	if len(execs) != commands {
		t.Fatalf("%d test commands ran, want %d", len(execs), commands)
	}
	for i, r := range execs {
		if r.ViaZygote != viaZygote {
			t.Errorf("test command %d: via the zygote %v, want %v (%s)", i, r.ViaZygote, viaZygote, r.ZygoteMiss)
		}
	}
}

// verdicts is an evaluation's test-by-test result, without timings.
func verdicts(ev *gym.Evaluation) []string {
	var out []string
	for _, c := range ev.Tests {
		out = append(out, c.Name+" "+string(c.Status)+" "+firstLine(c.Message))
	}
	for _, c := range ev.Commands {
		out = append(out, c.Command+" "+c.Source+" "+strings.Join([]string{
			boolWord(c.Success, "success"), boolWord(c.TimedOut, "timed_out")}, " "))
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func boolWord(b bool, w string) string {
	if b {
		return w
	}
	return "not_" + w
}

// TestZygoteTwinEvaluation runs the same task with the same agent actions
// with the verifier zygote and without: every test's verdict and every
// command's outcome must be the same, whether tests pass, fail, error, are
// skipped, or the run ends by os._exit, a crash, a signal or its timeout.
func TestZygoteTwinEvaluation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"test_mix.py": `import os, sys
import pytest
import inventory

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_pass():
    assert inventory is not None

def test_fail():
    assert 1 + 1 == 3

def test_error(broken):
    pass

@pytest.mark.skip(reason="not today")
def test_skip():
    pass

@pytest.mark.xfail
def test_xfail():
    assert False

def test_env():
    assert os.environ["PWD"] == os.getcwd() == "/workspace"
    assert os.getuid() != 0 and "PYTHONPATH" in os.environ
`,
		"test_exit.py":   "import os\n\ndef test_pass():\n    pass\n\ndef test_exit():\n    os._exit(0)\n",
		"test_crash.py":  "import ctypes\n\ndef test_crash():\n    ctypes.string_at(0)\n",
		"test_signal.py": "import os, signal\n\ndef test_term():\n    os.kill(os.getpid(), signal.SIGTERM)\n",
		"test_hang.py":   "import time\n\ndef test_hang():\n    time.sleep(1000)\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(ec *config.Environment) {
		ec.HiddenTests = []config.CopySpec{{Src: dir, Dest: "/workspace/tests"}}
		ec.UnitTests = []string{"python3 -m pytest tests/test_mix.py", "pytest tests/test_exit.py",
			"python3 -m pytest tests/test_crash.py", "python3 -m pytest tests/test_signal.py",
			"python3 -m pytest tests/test_hang.py", "python -m pytest tests/test_mix.py"}
		ec.Timeouts.Test = 20 * time.Second
	}
	var got [2][]string
	for i, on := range []bool{true, false} {
		e, ec, p := zygoteEnv(t, "fix_inventory", on, func(ec *config.Environment) {
			edit(ec)
			ec.ID = "fix_inventory_twin_" + boolWord(on, "zygote")
		})
		s, _ := reset(t, e)
		if on {
			p.zygoteReady(t)
		}
		runShell(t, s, ec, "echo hello > notes.txt")
		r := finish(t, s, ec)
		ev := r.Info.Evaluation
		if ev.Tampered || ev.Mask || ev.ErrorClass != "" {
			t.Fatalf("zygote %v: %s", on, describe(r))
		}
		// python is not in the base image: that command runs the usual way
		// (and fails alike).
		execs := p.take()
		for j, x := range execs {
			want := on && j != 5
			if x.ViaZygote != want {
				t.Errorf("zygote %v: test command %d via the zygote %v (%s)", on, j, x.ViaZygote, x.ZygoteMiss)
			}
		}
		got[i] = verdicts(ev)
		t.Logf("zygote %v: %s\n%s", on, describe(r), strings.Join(got[i], "\n"))
	}
	if diff := cmp.Diff(got[1], got[0]); diff != "" {
		t.Errorf("verdicts with the zygote differ from those without (-without +with):\n%s", diff)
	}
}

// TestAttackPlantedRunnerFilesWithZygote plants, in every directory the
// agent can write (the working directory, /tmp, its home, its user site
// directory, and a directory the config puts on PYTHONPATH), a pytest.py, a
// _pytest package, a conftest.py, sitecustomize.py, usercustomize.py and a
// .pth file, each of which ends the process that loads it. The reference
// solution must still score 1, test by test as without the zygote.
func TestAttackPlantedRunnerFilesWithZygote(t *testing.T) {
	t.Parallel()
	var got [2][]string
	for i, on := range []bool{true, false} {
		e, ec, p := zygoteEnv(t, "fix_inventory", on, func(ec *config.Environment) {
			ec.ID = "fix_inventory_planted_" + boolWord(on, "zygote")
			ec.EnvironmentVariables = map[string]string{"PYTHONPATH": "/tmp/lib"}
		})
		s, _ := reset(t, e)
		ref, err := envs.ReferenceCalls(ec.Tasks[0])
		if err != nil {
			t.Fatal(err)
		}
		act(t, s, stepBound(ec), ref[:len(ref)-1]...)
		kill := "import os, sys\nsys.stderr.write('planted %s ran\\n')\nos._exit(5)\n"
		var files []string
		for _, d := range []string{"/workspace", "/tmp", "/tmp/lib", "/home/agent", "/home/agent/.local/lib/python3.11/site-packages"} {
			for _, f := range []string{"pytest.py", "_pytest/__init__.py", "conftest.py", "sitecustomize.py", "usercustomize.py"} {
				files = append(files, d+"/"+f, strings.Replace(kill, "%s", d+"/"+f, 1))
			}
			files = append(files, d+"/zz_planted.pth", "import os; os._exit(6)\n")
		}
		writeFiles(t, s, ec, files...)
		if on {
			p.zygoteReady(t)
		}
		// The plants work where nothing stops them: in the agent's own
		// Python.
		if r := runShell(t, s, ec, "python3 -c pass; echo rc=$?"); !strings.Contains(r.Observation.Text, "rc=6") && !strings.Contains(r.Observation.Text, "rc=5") {
			t.Fatalf("the planted files do not reach even the agent's own Python: %q", r.Observation.Text)
		}
		r := finish(t, s, ec)
		if ev := r.Info.Evaluation; r.Reward != 1 || ev.Tampered || ev.Mask {
			t.Fatalf("zygote %v: %s; %v", on, describe(r), ev.Commands)
		}
		checkPath(t, p, on, len(ec.UnitTests))
		got[i] = verdicts(r.Info.Evaluation)
	}
	if diff := cmp.Diff(got[1], got[0]); diff != "" {
		t.Errorf("verdicts with the zygote differ from those without (-without +with):\n%s", diff)
	}
}

// TestAttackLurkerWaitsForZygoteChild leaves a process of the agent's
// that waits for a new process of its uid (the test run, forked by the
// zygote) to appear, and kills it, stops it, or writes to its report
// pipe. KillAll before evaluation must end it first: the reference
// solution scores 1 through the zygote. (Without the KillAll the stopped
// test run times out and scores 0.)
func TestAttackLurkerWaitsForZygoteChild(t *testing.T) {
	t.Parallel()
	e, ec, p := zygoteEnv(t, "fix_inventory", true, nil)
	s, _ := reset(t, e)
	ref, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	act(t, s, stepBound(ec), ref[:len(ref)-1]...)
	writeFiles(t, s, ec, "/tmp/lurk.py", `import os, signal, time
me = os.getpid()
seen = set(p for p in os.listdir("/proc") if p.isdigit())
open("/tmp/lurking", "w").close()
while True:
    for p in os.listdir("/proc"):
        if not p.isdigit() or p in seen or int(p) == me:
            continue
        try:
            if os.stat("/proc/" + p).st_uid != os.getuid():
                continue
            cmd = open("/proc/%s/cmdline" % p, "rb").read()
            if b"pytest" not in cmd and b"zygote" not in cmd:
                continue
            seen.add(p)
            try:
                with open("/proc/%s/fd/3" % p, "w") as f:
                    f.write("<testsuites><testsuite tests='99'/></testsuites>")
            except OSError:
                pass
            os.kill(int(p), signal.SIGSTOP)
        except OSError:
            pass
    time.sleep(0.001)
`)
	p.zygoteReady(t)
	runShell(t, s, ec, "setsid python3 /tmp/lurk.py > /dev/null 2>&1 < /dev/null & sleep 1; ls /tmp/lurking")
	r := finish(t, s, ec)
	if ev := r.Info.Evaluation; r.Reward != 1 || ev.Tampered || ev.Mask {
		t.Fatalf("%s; %v", describe(r), ev.Commands)
	}
	checkPath(t, p, true, len(ec.UnitTests))
}

// zygoteRunning reports whether sb runs a verifier zygote: a root process
// whose command line is the zygote's program (the listing runs as root).
func zygoteRunning(t *testing.T, sb sandbox.Sandbox) bool {
	t.Helper()
	// "[ ]" keeps the listing's own command line from matching.
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Priv: true, Timeout: 10 * time.Second, Argv: []string{"/bin/sh", "-c",
		`for d in /proc/[0-9]*; do [ "$(stat -c %u $d 2>/dev/null)" = 0 ] && tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q "verifier[ ]zygote" && echo "${d#/proc/}"; done; true`}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("list the sandbox's processes: %v %s", err, formatResult(r))
	}
	return strings.TrimSpace(string(r.Stdout)) != ""
}

func formatResult(r sandbox.ExecResult) string {
	return "exit " + strconv.Itoa(r.ExitCode) + ": " + string(r.Stdout) + string(r.Stderr)
}

// TestForkZygoteStartsAtFirstStep forks a snapshot of calculator_api's
// solved state: no fork runs a verifier zygote until its first step; one
// that steps has one from that step on and its tests run through it; one
// evaluated before any step runs them the usual way. Both score 1, test by
// test alike, as does a fork whose first step is mark_done. Steps,
// evaluations and closes of a fork that race each other end cleanly.
func TestForkZygoteStartsAtFirstStep(t *testing.T) {
	t.Parallel()
	e, ec, p := zygoteEnv(t, "calculator_api", true, func(ec *config.Environment) { ec.ID = "calculator_api_fork_zygote" })
	s, _ := reset(t, e)
	ref, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	act(t, s, stepBound(ec), ref[:len(ref)-1]...)
	snap, err := s.(gym.Snapshotter).Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.DropSnapshot(context.Background(), snap.ID) })
	if snap.Mode != gym.SnapshotArchive {
		t.Fatalf("snapshot mode %q (fallback %q), want an archive", snap.Mode, snap.Fallback)
	}
	fork := func(t *testing.T) (gym.Session, *pathSandbox) {
		t.Helper()
		f, _, err := e.Fork(t.Context(), snap.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close(context.Background()) })
		sb := p.lastSandbox()
		if zygoteRunning(t, sb) {
			t.Fatal("the fork runs a verifier zygote before its first step")
		}
		return f, sb
	}
	var stepped, unstepped, doneFirst []string

	t.Run("step", func(t *testing.T) {
		f, sb := fork(t)
		runShell(t, f, ec, "true")
		// The step starts it without waiting, when the provider's turn
		// for a zygote's imports comes.
		waittest.For(t, "a verifier zygote after the fork's first step", 30*time.Second, func() bool { return zygoteRunning(t, sb) })
		p.zygoteReady(t)
		r := finish(t, f, ec)
		if ev := r.Info.Evaluation; r.Reward != 1 || ev.Mask || ev.ErrorClass != "" {
			t.Fatalf("%s; %v", describe(r), ev.Commands)
		}
		checkPath(t, p, true, len(ec.UnitTests))
		stepped = verdicts(r.Info.Evaluation)
	})
	if t.Failed() {
		return
	}

	t.Run("evaluate_without_step", func(t *testing.T) {
		f, sb := fork(t)
		ctx, cancel := context.WithTimeout(t.Context(), evalBound(ec))
		defer cancel()
		ev, err := f.Evaluate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Reward != 1 || ev.Mask || ev.ErrorClass != "" {
			t.Fatalf("reward %v, error %s %s; %v", ev.Reward, ev.ErrorClass, ev.Error, ev.Commands)
		}
		execs := p.take()
		if len(execs) != len(ec.UnitTests) {
			t.Fatalf("%d test commands ran, want %d", len(execs), len(ec.UnitTests))
		}
		for i, x := range execs {
			if x.ViaZygote || x.ZygoteMiss != "no zygote started" {
				t.Errorf("test command %d: via the zygote %v, miss %q; want the usual way, no zygote started", i, x.ViaZygote, x.ZygoteMiss)
			}
		}
		if zygoteRunning(t, sb) {
			t.Error("the evaluation of a fork without a step started a verifier zygote")
		}
		unstepped = verdicts(&ev)
	})

	t.Run("mark_done_first", func(t *testing.T) {
		f, _ := fork(t)
		r := finish(t, f, ec)
		if ev := r.Info.Evaluation; r.Reward != 1 || ev.Mask || ev.ErrorClass != "" {
			t.Fatalf("%s; %v", describe(r), ev.Commands)
		}
		// The zygote starts at this step; whether the tests wait for it
		// (at most 5 s) or not depends on the machine's load.
		for i, x := range p.take() {
			t.Logf("test command %d: via the zygote %v (%s, waited %s)", i, x.ViaZygote, x.ZygoteMiss, x.ZygoteWait)
		}
		doneFirst = verdicts(r.Info.Evaluation)
	})

	if diff := cmp.Diff(unstepped, stepped); diff != "" {
		t.Errorf("verdicts via the zygote after a step differ from those of a fork evaluated without a step (-without +after a step):\n%s", diff)
	}
	if diff := cmp.Diff(unstepped, doneFirst); diff != "" {
		t.Errorf("verdicts of a fork whose first step is mark_done differ from those of a fork evaluated without a step (-without +mark_done first):\n%s", diff)
	}

	t.Run("race_close", func(t *testing.T) {
		for range 3 {
			f, _, err := e.Fork(t.Context(), snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), evalBound(ec))
			var wg sync.WaitGroup
			var stepErr, evalErr, closeErr error
			var ev gym.Evaluation
			wg.Go(func() {
				_, stepErr = f.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "true"})}})
			})
			wg.Go(func() { ev, evalErr = f.Evaluate(ctx) })
			wg.Go(func() { _, closeErr = f.Close(ctx) })
			wg.Wait()
			cancel()
			if closeErr != nil {
				t.Errorf("close: %v", closeErr)
			}
			for name, err := range map[string]error{"step": stepErr, "evaluate": evalErr} {
				if err != nil && !errors.Is(err, gym.ErrEpisodeDone) && !errors.Is(err, context.Canceled) {
					t.Errorf("%s racing close: %v", name, err)
				}
			}
			if evalErr == nil && (ev.Reward != 1 || ev.ErrorClass != "") {
				t.Errorf("evaluation racing close: reward %v, error %s %s", ev.Reward, ev.ErrorClass, ev.Error)
			}
			t.Logf("step: %v; evaluate: %v", stepErr, evalErr)
			p.take()
		}
	})
}
