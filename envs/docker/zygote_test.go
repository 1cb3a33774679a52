package docker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// zygoteSandbox starts a sandbox of the base image with tests/ holding
// files, and its verifier zygote, ready.
func zygoteSandbox(t *testing.T, files map[string]string) *docker.Sandbox {
	t.Helper()
	p, _ := newProvider(t)
	ctx := t.Context()
	var fs []sandbox.File
	for name, data := range files {
		fs = append(fs, sandbox.File{Path: "/workspace/" + name, Data: []byte(data), Mode: 0o644})
	}
	sb := baseSandbox(t, p, sandbox.Spec{Files: fs, Env: map[string]string{"PYTHONUNBUFFERED": "1"}})
	ds := sb.(*docker.Sandbox)
	st, err := ds.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true})
	if err != nil || !st.Ready {
		t.Fatalf("zygote: %+v %v", st, err)
	}
	t.Logf("zygote ready in %s, RSS %d KiB, pytest %s", st.ReadyIn, st.RSS>>10, st.PytestVersion)
	return ds
}

// testEnv is the environment of a pytest test command as the evaluator
// gives it (see envs.testRun.env), its report pipe included.
var testEnv = []string{"PYTHONNOUSERSITE=1", "PYTHONSAFEPATH=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=/tmp",
	"PYTEST_ADDOPTS=-p no:cacheprovider -rA --junitxml=/dev/fd/3"}

// twin runs cmd through the zygote and the usual way, checks which way
// each ran, and returns both results.
func twin(t *testing.T, sb sandbox.Sandbox, cmd string, timeout time.Duration) (z, fresh sandbox.ExecResult) {
	t.Helper()
	for _, viaZygote := range []bool{true, false} {
		r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}, Dir: "/workspace",
			Env: testEnv, Timeout: timeout, Report: true, Zygote: viaZygote})
		if err != nil {
			t.Fatalf("%s (zygote %v): %v", cmd, viaZygote, err)
		}
		if r.ViaZygote != viaZygote {
			t.Fatalf("%s: ran via the zygote %v, want %v (%s)", cmd, r.ViaZygote, viaZygote, r.ZygoteMiss)
		}
		if viaZygote {
			z = r
		} else {
			fresh = r
		}
	}
	return z, fresh
}

// probeTest prints what a test process is: identity, capabilities,
// limits, process group, descriptors, directory, environment and Python's
// settings. Only the parent process differs between the two ways (the
// shell, or the zygote), and so which process leads the group, so they
// are left out.
const probeTest = `import os, resource, sys

def test_probe():
    st = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k.startswith("Cap") or k in ("Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "Seccomp_filters", "SigBlk", "SigIgn"):
            st[k] = v.strip()
    print("STATUS", sorted(st.items()))
    print("IDS", os.getresuid(), os.getresgid(), os.getgroups())
    # A group of its own (the shell's, or its own), in the executor's session.
    print("PGRP", os.getpgrp() != os.getsid(0), os.getsid(0) == os.getsid(1))
    print("OOM", open("/proc/self/oom_score_adj").read().strip())
    print("NICE", os.getpriority(os.PRIO_PROCESS, 0))
    print("UMASK", os.umask(0o22))
    print("RLIMITS", [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")])
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[int(fd)] = os.readlink("/proc/self/fd/" + fd).split("[")[0]
        except OSError:
            pass
    print("FDS", sorted((k, v) for k, v in fds.items() if k <= 3))
    print("CWD", os.getcwd())
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    print("ENV", sorted(env.items()))
    print("PATH", sys.path)
    print("ARGV", sys.argv)
    print("FLAGS", sys.flags)
    print("ENC", sys.getfilesystemencoding(), sys.stdout.encoding, sys.stdout.line_buffering)
`

// TestZygoteChildIsTheUsualProcess checks that a test command forked by
// the zygote is the process the executor starts otherwise: the agent's
// uid and gid with no groups and no capabilities, the same limits,
// process group, descriptors, directory, environment and Python settings,
// the same report.
func TestZygoteChildIsTheUsualProcess(t *testing.T) {
	sb := zygoteSandbox(t, map[string]string{"tests/test_probe.py": probeTest})
	for _, cmd := range []string{"python3 -m pytest -s tests/test_probe.py", "pytest -s tests/test_probe.py"} {
		z, fresh := twin(t, sb, cmd, time.Minute)
		probe := func(r sandbox.ExecResult) []string {
			var lines []string
			for _, l := range strings.Split(string(r.Stdout), "\n") {
				for _, k := range []string{"STATUS", "IDS", "PGRP", "OOM", "NICE", "UMASK", "RLIMITS", "FDS", "CWD", "ENV", "PATH", "ARGV", "FLAGS", "ENC"} {
					if strings.HasPrefix(l, k+" ") || strings.Contains(l, ".py "+k+" ") {
						lines = append(lines, l[strings.Index(l, k+" "):])
					}
				}
			}
			return lines
		}
		zp, fp := probe(z), probe(fresh)
		if len(fp) != 14 {
			t.Fatalf("%s: the usual way printed %d probe lines, want 14:\n%s\n%s", cmd, len(fp), fresh.Stdout, fresh.Stderr)
		}
		for i := range fp {
			if i >= len(zp) || zp[i] != fp[i] {
				got := "(none)"
				if i < len(zp) {
					got = zp[i]
				}
				t.Errorf("%s: via the zygote\n  %s\nthe usual way\n  %s", cmd, got, fp[i])
			}
		}
		if !strings.Contains(zp[0], "('CapEff', '0000000000000000')") || !strings.Contains(zp[1], "(1000, 1000, 1000) (1000, 1000, 1000) []") {
			t.Errorf("%s: the forked test process is not the agent without capabilities: %s %s", cmd, zp[0], zp[1])
		}
		if z.ExitCode != 0 || fresh.ExitCode != 0 {
			t.Errorf("%s: exit %d via the zygote, %d the usual way", cmd, z.ExitCode, fresh.ExitCode)
		}
		if !strings.Contains(string(z.Report), `tests="1"`) || !strings.Contains(string(fresh.Report), `tests="1"`) {
			t.Errorf("%s: reports\n%s\n%s", cmd, z.Report, fresh.Report)
		}
	}
}

// TestZygoteEndings checks that every way a test run ends is reported
// the same through the zygote as the usual way: exit codes, os._exit, a
// crash, a signal, a timeout (the whole group killed), output past the
// cap.
func TestZygoteEndings(t *testing.T) {
	sb := zygoteSandbox(t, map[string]string{
		"tests/test_pass.py":    "def test_a():\n    pass\n",
		"tests/test_fail.py":    "def test_a():\n    assert 1 == 2\n",
		"tests/test_exit.py":    "import os\n\ndef test_a():\n    os._exit(3)\n",
		"tests/test_crash.py":   "import ctypes\n\ndef test_a():\n    ctypes.string_at(0)\n",
		"tests/test_signal.py":  "import os, signal\n\ndef test_a():\n    os.kill(os.getpid(), signal.SIGTERM)\n",
		"tests/test_hang.py":    "import subprocess, time\n\ndef test_a():\n    subprocess.Popen(['sleep', '1000'])\n    time.sleep(1000)\n",
		"tests/test_chatty.py":  "def test_a():\n    print('x' * 300000)\n",
		"tests/test_collect.py": "import no_such_module\n",
	})
	for _, name := range []string{"pass", "fail", "exit", "crash", "signal", "hang", "chatty", "collect"} {
		cmd := "python3 -m pytest -q tests/test_" + name + ".py"
		z, fresh := twin(t, sb, cmd, 20*time.Second)
		type ending struct {
			Exit            int
			Signal          string
			TimedOut, OOM   bool
			Dropped, Report bool
		}
		end := func(r sandbox.ExecResult) ending {
			return ending{r.ExitCode, r.Signal, r.TimedOut, r.OOMKilled, r.StdoutDropped > 0, len(r.Report) > 0}
		}
		if end(z) != end(fresh) {
			t.Errorf("%s: via the zygote %+v, the usual way %+v\nzygote stderr: %s", name, end(z), end(fresh), z.Stderr)
		} else {
			t.Logf("%s: %+v", name, end(z))
		}
	}
}

// TestZygoteOutOfAgentReach is an attack: the agent finds the zygote and
// tries to kill, stop and read it (its descriptors, its memory, its
// environment), and to kill every process it can. All of it must fail,
// and the next test command must still run through the zygote.
func TestZygoteOutOfAgentReach(t *testing.T) {
	sb := zygoteSandbox(t, map[string]string{"tests/test_pass.py": "def test_a():\n    pass\n",
		"attack.py": `import os, signal
found = 0
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        cmd = open("/proc/%s/cmdline" % p, "rb").read()
    except OSError:
        continue
    if b"verifier zygote" not in cmd:
        continue
    found += 1
    for what, act in [
        ("kill", lambda: os.kill(int(p), signal.SIGKILL)),
        ("stop", lambda: os.kill(int(p), signal.SIGSTOP)),
        ("fds", lambda: os.listdir("/proc/%s/fd" % p)),
        ("channel", lambda: open("/proc/%s/fd/3" % p, "rb")),
        ("mem", lambda: open("/proc/%s/mem" % p, "rb")),
        ("environ", lambda: open("/proc/%s/environ" % p, "rb").read()),
    ]:
        try:
            act()
            print("DID", what, p)
        except OSError as e:
            print("REFUSED", what, p, type(e).__name__)
print("FOUND", found)
`})
	ctx := t.Context()
	r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"python3", "attack.py"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Stdout)
	if !strings.Contains(out, "FOUND 1") || strings.Contains(out, "DID ") || strings.Count(out, "REFUSED ") != 6 {
		t.Fatalf("the agent's attack on the zygote:\n%s%s", out, r.Stderr)
	}
	for _, c := range []string{"kill -9 -1", "pkill -9 python3", "pkill -9 -f zygote"} {
		_, _ = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", c}, Timeout: time.Minute})
	}
	if err := sb.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	z, _ := twin(t, sb, "python3 -m pytest -q tests/test_pass.py", time.Minute)
	if z.ExitCode != 0 {
		t.Errorf("after the attack: exit %d %s %s", z.ExitCode, z.Stdout, z.Stderr)
	}
}

// TestZygoteFallsBack checks that commands the zygote does not take run
// the usual way and say why.
func TestZygoteFallsBack(t *testing.T) {
	sb := zygoteSandbox(t, map[string]string{"tests/test_pass.py": "def test_a():\n    pass\n",
		"bin/pytest": "#!/bin/sh\necho fake pytest\n"})
	ctx := t.Context()
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"chmod", "+x", "bin/pytest"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd string
		env []string
	}{
		{cmd: "python3 -m pytest -q 'tests/test_pass.py'"},
		{cmd: "python3 -m pytest -q tests/*.py"},
		{cmd: "cd /workspace && python3 -m pytest -q tests"},
		{cmd: "python3 -m pytest -q $DIR"},
		{cmd: "PYTHONPATH=. python3 -m pytest -q tests"},
		{cmd: "python3 -m pytest -q tests > /dev/null"},
		{cmd: "python3 -m pytest -q tests", env: []string{"PYTHONHASHSEED=1"}},
		{cmd: "python3 -m pytest -q tests", env: []string{"LANG=C"}},
		// A pytest of the agent's first on PATH is what the shell runs.
		{cmd: "pytest -q tests", env: []string{"PATH=/workspace/bin:/usr/bin:/bin"}},
	} {
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", c.cmd}, Dir: "/workspace",
			Env: append(append([]string(nil), testEnv...), c.env...), Timeout: time.Minute, Report: true, Zygote: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.ViaZygote || r.ZygoteMiss == "" {
			t.Errorf("%q %v: via the zygote %v (%q), want the usual way", c.cmd, c.env, r.ViaZygote, r.ZygoteMiss)
		}
		t.Logf("%q %v: %s", c.cmd, c.env, r.ZygoteMiss)
	}
}

// TestZygoteDeadFallsBack kills the zygote (as root, as the out-of-memory
// killer would): test commands run the usual way, and a new zygote op
// starts a new one.
func TestZygoteDeadFallsBack(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	sb := baseSandbox(t, p, sandbox.Spec{
		Files: []sandbox.File{{Path: "/workspace/tests/test_pass.py", Data: []byte("def test_a():\n    pass\n"), Mode: 0o644}}})
	ds := sb.(*docker.Sandbox)
	if st, err := ds.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true}); err != nil || !st.Ready {
		t.Fatalf("zygote: %+v %v", st, err)
	}
	killed, err := dockerExec(ctx, cli, sb.ID(), []string{"/bin/sh", "-c",
		`for p in /proc/[0-9]*; do if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q "verifier zygote"; then kill -9 ${p#/proc/} && echo $p; fi; done`})
	if err != nil || killed == "" {
		t.Fatalf("kill the zygote: %q %v", killed, err)
	}
	cmd := sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 -m pytest -q tests"}, Env: testEnv,
		Timeout: time.Minute, Report: true, Zygote: true}
	r, err := sb.Exec(ctx, cmd)
	if err != nil || r.ExitCode != 0 || r.ViaZygote || r.ZygoteMiss == "" {
		t.Fatalf("with the zygote dead: exit %d via zygote %v (%s) %v", r.ExitCode, r.ViaZygote, r.ZygoteMiss, err)
	}
	if st, err := ds.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true}); err != nil || !st.Ready {
		t.Fatalf("zygote again: %+v %v", st, err)
	}
	if r, err = sb.Exec(ctx, cmd); err != nil || r.ExitCode != 0 || !r.ViaZygote {
		t.Fatalf("with a new zygote: exit %d via zygote %v (%s) %v", r.ExitCode, r.ViaZygote, r.ZygoteMiss, err)
	}
}

// zygoteProcess reports whether sb runs a verifier zygote process, as its
// machinery sees the process list ("[ ]" keeps the listing's own command
// line from matching).
func zygoteProcess(t *testing.T, sb sandbox.Sandbox) bool {
	t.Helper()
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Priv: true, Timeout: 10 * time.Second, Argv: []string{"/bin/sh", "-c",
		`for d in /proc/[0-9]*; do tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q "verifier[ ]zygote" && echo "${d#/proc/}"; done; true`}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("list processes: %v %s %s", err, r.Stdout, r.Stderr)
	}
	return strings.TrimSpace(string(r.Stdout)) != ""
}

// TestZygoteTurns checks the turns of a provider that lets one verifier
// zygote import at a time. While the turn is taken, zygotes started
// without waiting do not start. A sandbox that runs a pytest command that
// may use its zygote before its turn came runs it the usual way, and
// never starts that zygote. Once the turn is free, the others start one
// after the other and end ready.
func TestZygoteTurns(t *testing.T) {
	p, _ := dockertest.NewWith(t, docker.Options{ZygoteImports: 1})
	ctx := t.Context()
	boxes := make([]*docker.Sandbox, 3)
	for i := range boxes {
		boxes[i] = baseSandbox(t, p, sandbox.Spec{}).(*docker.Sandbox)
	}
	release := docker.HoldZygoteTurn(p)
	for _, sb := range boxes {
		if _, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, sb := range boxes {
		if zygoteProcess(t, sb) {
			t.Errorf("sandbox %d started its zygote while the only turn was taken", i)
		}
	}
	if n := p.ZygotesPending(); n != 3 {
		t.Errorf("%d zygotes pending while the turn is held, want 3", n)
	}
	r, err := boxes[2].Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 -m pytest --version"}, Zygote: true, Timeout: time.Minute})
	if err != nil || r.ExitCode != 0 || r.ViaZygote || r.ZygoteMiss == "" {
		t.Errorf("a pytest command before the zygote's turn: %+v %v", r, err)
	}
	release()
	waittest.For(t, "the other two zygotes to start", time.Minute, func() bool {
		return zygoteProcess(t, boxes[0]) && zygoteProcess(t, boxes[1])
	})
	for i, sb := range boxes[:2] {
		if st, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true}); err != nil || !st.Ready {
			t.Errorf("sandbox %d: zygote %+v %v", i, st, err)
		}
	}
	// Its turn comes by now or right after the others' (both are ready).
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if zygoteProcess(t, boxes[2]) {
			t.Error("the sandbox that evaluated before its zygote's turn started it anyway")
			break
		}
	}
	waittest.For(t, "no zygote pending", time.Minute, func() bool { return p.ZygotesPending() == 0 })
}

// preloadTest reports, before it imports anything, which of the modules
// the zygote may be asked to preload the test process holds already, and
// then where hmac comes from.
const preloadTest = `import sys
HELD = sorted(n for n in ("urllib.request", "http.server", "multiprocessing", "this", "hmac", "shadowed") if n in sys.modules)
import hmac

def test_held():
    print("HELD", HELD)
    print("HMAC", hmac.__file__)
`

// TestZygotePreload checks that the zygote imports the standard library
// modules it is asked to preload, those it allows and only those: it
// takes a list while it runs (as a pooled sandbox's zygote gets its
// session's), and a test run forked after holds them. Attack: a module of
// the agent's with a preloaded module's name, next to the tests (where
// the test run finds it first), is never imported by the zygote, which is
// root: only the test run, as the agent, may import it.
func TestZygotePreload(t *testing.T) {
	shadow := `import os
open("/tmp/shadow-imported-by-%d" % os.geteuid(), "w").close()
`
	sb := zygoteSandbox(t, map[string]string{"tests/test_preload.py": preloadTest, "tests/hmac.py": shadow,
		"tests/shadowed.py": shadow})
	ctx := t.Context()
	run := func() (held, hmacFile string) {
		t.Helper()
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 -m pytest -s -q tests/test_preload.py"},
			Dir: "/workspace", Env: testEnv, Timeout: time.Minute, Report: true, Zygote: true})
		if err != nil {
			t.Fatal(err)
		}
		if !r.ViaZygote || r.ExitCode != 0 {
			t.Fatalf("via the zygote %v (%s), exit %d:\n%s%s", r.ViaZygote, r.ZygoteMiss, r.ExitCode, r.Stdout, r.Stderr)
		}
		for _, l := range strings.Split(string(r.Stdout), "\n") {
			if i := strings.Index(l, "HELD "); i >= 0 {
				held = l[i+5:]
			}
			if i := strings.Index(l, "HMAC "); i >= 0 {
				hmacFile = l[i+5:]
			}
		}
		return held, hmacFile
	}
	held, hmacFile := run()
	if held != "[]" || hmacFile != "/workspace/tests/hmac.py" {
		t.Fatalf("before any preload the test run held %s and imported hmac from %s", held, hmacFile)
	}
	// As a session does with a pooled sandbox whose zygote runs.
	if _, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{Preload: []string{"urllib.request", "http.server", "multiprocessing",
		"this", "hmac", "shadowed", "tests.hmac"}}); err != nil {
		t.Fatal(err)
	}
	held, hmacFile = run()
	if held != "['hmac', 'http.server', 'urllib.request']" {
		t.Errorf("the test run held %s, want the three allowed modules", held)
	}
	if !strings.HasPrefix(hmacFile, "/usr/lib/python3") {
		t.Errorf("the preloaded hmac is %s, not the standard library's", hmacFile)
	}
	r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "ls /tmp | grep shadow-imported || true"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(r.Stdout)); got != "shadow-imported-by-1000" {
		t.Errorf("the agent's modules were imported by: %q, want the first test run (the agent) only", got)
	}
	// Bad names are refused, and the zygote still works.
	if _, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{Preload: []string{"os; import this"}}); err == nil || !errors.Is(err, gym.ErrInvalidArgument) {
		t.Errorf("a bad module name: %v, want an invalid-argument error", err)
	}
	if held, _ := run(); held != "['hmac', 'http.server', 'urllib.request']" {
		t.Errorf("after a refused preload the test run held %s", held)
	}
}

// TestZygotePreloadAtStart checks a zygote given modules to preload as it
// starts: it is ready only once it imported them, and the names, which say
// what the hidden tests import, are not on its command line, which the
// agent can read.
func TestZygotePreloadAtStart(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	sb := baseSandbox(t, p, sandbox.Spec{Files: []sandbox.File{{Path: "/workspace/tests/test_preload.py", Data: []byte(preloadTest), Mode: 0o644}},
		Env: map[string]string{"PYTHONUNBUFFERED": "1"}}).(*docker.Sandbox)
	st, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true, Preload: []string{"http.server", "multiprocessing"}})
	if err != nil || !st.Ready {
		t.Fatalf("zygote: %+v %v", st, err)
	}
	// The zygote's command line is python3 -c and its source, which lists
	// every module it may preload: nothing more. Its environment is not
	// readable (TestZygoteOutOfAgentReach).
	look := `import os
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == os.getpid():
        continue
    try:
        args = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")[:-1]
    except OSError:
        continue
    if any(b"verifier zygote" in a for a in args):
        print("ZYGOTE", len(args), [a for a in args if len(a) < 100])
`
	r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", look}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out := strings.TrimSpace(string(r.Stdout)); out != "ZYGOTE 3 [b'/usr/bin/python3', b'-c']" {
		t.Errorf("the zygote's command line as the agent reads it: %q, want python3 -c and its source only (%s)", out, r.Stderr)
	}
	r, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 -m pytest -s -q tests/test_preload.py"},
		Dir: "/workspace", Env: testEnv, Timeout: time.Minute, Report: true, Zygote: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.ViaZygote || !strings.Contains(string(r.Stdout), "HELD ['http.server']") {
		t.Errorf("via the zygote %v (%s): %s%s", r.ViaZygote, r.ZygoteMiss, r.Stdout, r.Stderr)
	}
}
