package envs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// The tests in this file are the adversarial suite (issue 9): each
// TestAttack<Name> plays a policy that tries to score without solving the
// task, or to turn a failing episode into a dropped sample, acting only
// through tool calls in a real Docker sandbox. They assert the contract the
// defences satisfy:
//
//   - Honest or flagged: after a tampering attack the reward is the
//     do-nothing baseline of the same environment (not flagged), or the
//     evaluation is flagged Tampered with reward 0 and no mask. Never more
//     than the baseline.
//   - Agent-caused failures are scored, not masked: no step of the attack is
//     masked or ends as a sandbox error, and the episode goes on.
//   - No step hangs: every step returns within its bound.
//
// Older tricks with their own tests in env_test.go, not repeated here:
// a fake pytest.py and sitecustomize.py in the working directory
// (TestShadowedTestRunnerDoesNotScore); os._exit(0) at import after a
// forged summary (TestCutShortTestRunDoesNotScore); a workspace conftest.py
// forcing passes with a single hidden root, and test files written to the
// hidden test directory before the end (TestHiddenTestsInvisibleAndTamperProof).

// stepGrace is how much longer than its command timeout a step may take.
const stepGrace = 15 * time.Second

// attackEnv loads an example's environment, lets edit change its config and
// makes the TaskEnv.
func attackEnv(t *testing.T, example string, edit func(*config.Environment)) (*envs.TaskEnv, config.Environment) {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", example, "config.json"))
	if err != nil {
		t.Fatalf("load %s: %v", example, err)
	}
	ec := cfg.Environments[0]
	if edit != nil {
		edit(&ec)
	}
	e, err := envs.New(cfg, ec, envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatalf("new env: %v", err)
	}
	return e, ec
}

// shortTimeouts makes hangs cheap to detect: a 5 s command timeout.
func shortTimeouts(ec *config.Environment) {
	ec.Timeouts.Command = 5 * time.Second
	ec.Timeouts.Test = 30 * time.Second
}

// stepBound is the longest a step without mark_done may take.
func stepBound(ec config.Environment) time.Duration { return ec.Timeouts.Command + stepGrace }

// evalBound is the longest the step that runs the tests may take.
func evalBound(ec config.Environment) time.Duration {
	return time.Duration(len(ec.UnitTests))*ec.Timeouts.Test + stepGrace
}

// act runs one step that must return within bound: a hang fails the test
// instead of stalling the suite.
func act(t *testing.T, s gym.Session, bound time.Duration, calls ...gym.ToolCall) gym.StepResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	start := time.Now()
	r, err := s.Step(ctx, gym.Action{ToolCalls: calls})
	if err != nil {
		if ctx.Err() != nil {
			t.Fatalf("step hung: no result after %s (bound %s): %v", time.Since(start).Round(time.Second), bound, err)
		}
		t.Fatalf("step: %v", err)
	}
	return r
}

// runShell executes a shell command as the agent.
func runShell(t *testing.T, s gym.Session, ec config.Environment, command string) gym.StepResult {
	t.Helper()
	return act(t, s, stepBound(ec), call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: command}))
}

// writeFiles writes files as the agent, path then content.
func writeFiles(t *testing.T, s gym.Session, ec config.Environment, pathContent ...string) gym.StepResult {
	t.Helper()
	var calls []gym.ToolCall
	for i := 0; i+1 < len(pathContent); i += 2 {
		calls = append(calls, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: pathContent[i], Content: pathContent[i+1]}))
	}
	r := act(t, s, stepBound(ec), calls...)
	for _, c := range r.Info.Calls {
		if c.ErrorClass != "" {
			t.Fatalf("write_file: %s %s", c.ErrorClass, c.Error)
		}
	}
	return r
}

// finish calls mark_done and returns the final step.
func finish(t *testing.T, s gym.Session, ec config.Environment) gym.StepResult {
	t.Helper()
	r := act(t, s, evalBound(ec), call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	if r.Info.Evaluation == nil {
		t.Fatalf("mark_done gave no evaluation: %+v", r.Info)
	}
	return r
}

// doNothing runs the honest do-nothing episode of e (mark_done at once) and
// returns its reward, the baseline no attack may beat.
func doNothing(t *testing.T, e *envs.TaskEnv, ec config.Environment) float64 {
	t.Helper()
	s, _ := reset(t, e)
	r := finish(t, s, ec)
	ev := r.Info.Evaluation
	if r.Info.Mask() || ev.Tampered || ev.ErrorClass != "" || ev.Total == 0 || r.Reward >= 1 {
		t.Fatalf("do-nothing episode: %s", describe(r))
	}
	t.Logf("do-nothing: %s", describe(r))
	return r.Reward
}

// describe summarises a step's outcome for failure messages and logs.
func describe(r gym.StepResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "reward %v, reason %q, masked %v", r.Reward, r.Info.TerminationReason, r.Info.Mask())
	for _, c := range r.Info.Calls {
		if c.ErrorClass != "" {
			fmt.Fprintf(&b, ", call %s: %s (%s)", c.Name, c.ErrorClass, c.Error)
		}
	}
	if ev := r.Info.Evaluation; ev != nil {
		fmt.Fprintf(&b, "; evaluation %d/%d passed, tampered %v, mask %v", ev.Passed, ev.Total, ev.Tampered, ev.Mask)
		if ev.ErrorClass != "" || ev.Error != "" {
			fmt.Fprintf(&b, ", %s: %s", ev.ErrorClass, ev.Error)
		}
		for _, c := range ev.Commands {
			fmt.Fprintf(&b, "; command %q exit %d, results from %s", c.Command, c.ExitCode, c.Source)
		}
		var passed []string
		for _, tc := range ev.Tests {
			if tc.Status == gym.TestPassed && len(passed) < 3 {
				passed = append(passed, tc.Name)
			}
		}
		if len(passed) > 0 {
			fmt.Fprintf(&b, "; passed %s", strings.Join(passed, ", "))
		}
	}
	return b.String()
}

// checkHonestOrFlagged asserts the outcome of a tampering attack: the
// do-nothing reward (or less, when the attack only hurt itself) unflagged,
// or flagged with reward 0; scored either way.
func checkHonestOrFlagged(t *testing.T, r gym.StepResult, base float64) {
	t.Helper()
	ev := r.Info.Evaluation
	switch {
	case ev == nil:
		t.Fatalf("no evaluation: %s", describe(r))
	case r.Info.Mask() || ev.Mask:
		t.Errorf("the attack made the episode a dropped sample: %s", describe(r))
	case ev.Tampered:
		if r.Reward != 0 || ev.Reward != 0 {
			t.Errorf("flagged as tampered but rewarded: %s", describe(r))
		}
	case r.Reward > base || ev.Reward > base:
		t.Errorf("the attack raised the reward to %v (do-nothing %v) without being flagged: %s", r.Reward, base, describe(r))
	case r.Reward < base:
		// An attack that only hurt itself (e.g. it blocked its own test
		// run until test_timeout) is scored as it is.
		t.Logf("the attack lowered its own reward to %v (do-nothing %v)", r.Reward, base)
	}
	t.Logf("attack: %s", describe(r))
}

// checkHonest asserts the outcome of an episode whose attack forged
// nothing: the do-nothing reward, unflagged, scored.
func checkHonest(t *testing.T, r gym.StepResult, base float64) {
	t.Helper()
	ev := r.Info.Evaluation
	if ev == nil || r.Info.Mask() || ev.Mask || ev.Tampered || r.Reward != base || ev.Reward != base {
		t.Errorf("final evaluation is not the do-nothing one (reward %v): %s", base, describe(r))
	}
	t.Logf("final: %s", describe(r))
}

// checkScored asserts that an attack step is the agent's doing: not masked,
// not a sandbox error, and the episode still running.
func checkScored(t *testing.T, r gym.StepResult) {
	t.Helper()
	t.Logf("attack step: %s; output %q", describe(r), clipText(r.Observation.Text))
	if r.Info.Mask() || r.Info.TerminationReason == gym.ReasonSandboxError {
		t.Fatalf("the attack step is masked: %s", describe(r))
	}
	if r.Done() {
		t.Fatalf("the attack ended the episode: %s", describe(r))
	}
}

// checkAlive asserts that the session still runs commands.
func checkAlive(t *testing.T, s gym.Session, ec config.Environment) {
	t.Helper()
	r := runShell(t, s, ec, "echo still alive")
	if c := r.Info.Calls[0]; c.ErrorClass != "" || c.ExitCode != 0 || !strings.Contains(r.Observation.Text, "still alive") || r.Done() {
		t.Fatalf("the session does not work after the attack: %s; output %q", describe(r), clipText(r.Observation.Text))
	}
}

func clipText(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// exampleFile reads a file of an example.
func exampleFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// passingTests is a test module of n tests that pass.
func passingTests(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "def test_forged_%d():\n    pass\n\n", i)
	}
	return b.String()
}

// pyStripFailures is a Python function that rewrites a JUnit report with
// every failure and error removed, the forgery most of the attacks aim at.
const pyStripFailures = `
def strip_failures(path):
    """Rewrites the JUnit report at path as all passing; True if it changed it."""
    import os
    import xml.etree.ElementTree as ET
    try:
        tree = ET.parse(path)
    except Exception:
        return False
    changed = False
    for case in tree.iter("testcase"):
        for bad in [c for c in case if c.tag in ("failure", "error")]:
            case.remove(bad)
            changed = True
    if not changed:
        return False
    for suite in tree.iter("testsuite"):
        suite.set("failures", "0")
        suite.set("errors", "0")
    try:
        tree.write(path + ".tmp")
        os.replace(path + ".tmp", path)
    except OSError:
        try:
            tree.write(path)
        except OSError:
            return False
    return True


def junit_path():
    import os, re
    m = re.search(r"--junitxml=(\S+)", os.environ.get("PYTEST_ADDOPTS", ""))
    return m.group(1) if m else None


def forged_report(names):
    cases = "".join('<testcase classname="tests.test_inventory" name="%s" time="0.001" />' % n for n in names)
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
            'failures="0" skipped="0" tests="%d" time="0.1">%s</testsuite></testsuites>\n' % (len(names), cases))
`

// pyHop is a program that starts chains of processes which escape
// being killed: each link forks the next in a new session and exits at
// once, so a chain never keeps a pid, a process group or a parent. Every
// link does one round of work; "swap" replaces the hidden tests with
// passing ones as soon as they are installed, "junit" rewrites every
// evaluation report it finds as all passing.
const pyHop = pyStripFailures + `
import glob, os, sys, time

MODE = sys.argv[1]
HIDDEN = "/workspace/tests"
DONE = "/tmp/.hop-done"
START = time.time()
CHAINS = int(sys.argv[2])
FORGED = "".join("def test_forged_%d():\n    pass\n\n" % i for i in range(10))


def hop():
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def installed():
    try:
        return os.stat(HIDDEN + "/test_inventory.py").st_uid == 0
    except OSError:
        return False


def swap():
    mine = "/workspace/.forged-%d" % os.getpid()
    os.mkdir(mine)
    with open(mine + "/test_inventory.py", "w") as f:
        f.write(FORGED)
    os.rename(HIDDEN, "/workspace/.hidden-%d" % os.getpid())
    os.rename(mine, HIDDEN)
    open(DONE, "w").close()


def work():
    if os.path.exists(DONE):
        return True
    if MODE == "swap":
        if installed():
            try:
                swap()
            except OSError:
                pass
    else:
        for p in glob.glob("/tmp/.gymserver-eval-*/junit-*.xml"):
            if strip_failures(p):
                open(DONE, "w").close()
    return False


for _ in range(CHAINS):
    if os.fork() == 0:
        os.setsid()
        with open("/tmp/hop.alive", "a") as f:
            f.write("%d\n" % os.getpid())
        while time.time() - START < 25:
            hop()
            if work():
                break
        os._exit(0)
`

// hopChains is the number of chains pyHop starts: each escapes a single
// pass of kills by luck, with some chance; together they nearly always do.
const hopChains = 6

// startHop starts pyHop in the background in mode and waits until its
// chains run.
func startHop(t *testing.T, s gym.Session, ec config.Environment, mode string) {
	t.Helper()
	writeFiles(t, s, ec, "/tmp/hop.py", pyHop)
	r := act(t, s, stepBound(ec), call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: fmt.Sprintf("python3 /tmp/hop.py %s %d", mode, hopChains), Background: true}))
	if c := r.Info.Calls[0]; c.ErrorClass != "" {
		t.Fatalf("start the chains: %s %s", c.ErrorClass, c.Error)
	}
	r = runShell(t, s, ec, fmt.Sprintf(`for i in $(seq 100); do [ "$(wc -l < /tmp/hop.alive)" -ge %d ] 2>/dev/null && echo chains running && break; sleep 0.05; done`, hopChains))
	if !strings.Contains(r.Observation.Text, "chains running") {
		t.Fatalf("the chains did not start: %q", r.Observation.Text)
	}
}

// TestAttackEscapedProcessSwapsHiddenTests starts chains of processes that
// fork and exit faster than they can be killed; once the root-owned hidden
// tests appear they rename the directory (the agent owns /workspace) and
// put passing tests in its place.
func TestAttackEscapedProcessSwapsHiddenTests(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	startHop(t, s, ec, "swap")
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackEscapedProcessRewritesReport is the same escape, rewriting
// every /tmp/.gymserver-eval-*/junit-*.xml it finds as all passing.
func TestAttackEscapedProcessRewritesReport(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	startHop(t, s, ec, "junit")
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// writeInventory replaces the agent's module with payload followed by the
// starter code, so the tests import the payload and still find the
// (buggy) Inventory.
func writeInventory(t *testing.T, s gym.Session, ec config.Environment, payload string) {
	t.Helper()
	writeFiles(t, s, ec, filepath.Join(ec.WorkingDirectory, "inventory.py"), payload+"\n"+exampleFile(t, "fix_inventory/starter/inventory.py"))
}

// TestAttackModulePatchesTestReports makes the code under test patch
// pytest's report factory so that every failure becomes a pass.
func TestAttackModulePatchesTestReports(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeInventory(t, s, ec, `
import _pytest.reports as _reports

_make = _reports.TestReport.from_item_and_call.__func__


def _passed(cls, item, call):
    rep = _make(cls, item, call)
    rep.outcome = "passed"
    rep.longrepr = None
    return rep


_reports.TestReport.from_item_and_call = classmethod(_passed)
`)
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackModuleRewritesReportAtExit makes the code under test register
// an atexit handler that rewrites the JUnit report named in PYTEST_ADDOPTS
// after pytest wrote it.
func TestAttackModuleRewritesReportAtExit(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeInventory(t, s, ec, pyStripFailures+`
import atexit as _atexit


def _forge():
    path = junit_path()
    if path:
        strip_failures(path)


_atexit.register(_forge)
`)
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackModuleWritesReportToPipes makes the code under test write an
// all-passing JUnit report to every pipe among its file descriptors
// (/proc/self/fd and /dev/fd), at import and at exit, in case the report
// travels through one.
func TestAttackModuleWritesReportToPipes(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeInventory(t, s, ec, pyStripFailures+`
import atexit as _atexit
import os as _os
import re as _re
import stat as _stat


def _flood():
    try:
        names = _re.findall(r"^def (test_\w+)", open("/workspace/tests/test_inventory.py").read(), _re.M)
    except OSError:
        names = ["test_everything"]
    report = forged_report(names).encode()
    for d in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = _os.listdir(d)
        except OSError:
            continue
        for fd in fds:
            try:
                if _stat.S_ISFIFO(_os.fstat(int(fd)).st_mode):
                    _os.write(int(fd), report)
            except (OSError, ValueError):
                pass


_flood()
_atexit.register(_flood)
`)
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackAppDaemonRewritesReport has calculator_api's app, which the
// tests start as a subprocess, leave a daemon behind (setsid and a double
// fork) that writes a forged report to its inherited pipes and keeps
// rewriting the JUnit report as all passing for a while.
func TestAttackAppDaemonRewritesReport(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "calculator_api", nil)
	base := doNothing(t, e, ec)
	starter := exampleFile(t, "calculator_api/starter/app.py")
	const main = "if __name__ == \"__main__\":\n"
	if strings.Count(starter, main) != 1 {
		t.Fatalf("the starter app.py changed: no single %q", main)
	}
	app := strings.Replace(starter, main, pyStripFailures+`

def _daemon():
    import glob, os, stat, time
    if os.fork() > 0:
        return
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    report = forged_report(["test_health", "test_add"]).encode()
    for fd in range(64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, report)
        except OSError:
            pass
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    end = time.time() + 15
    while time.time() < end:
        paths = glob.glob("/tmp/.gymserver-eval-*/junit-*.xml")
        if junit_path():
            paths.append(junit_path())
        for p in paths:
            strip_failures(p)
        time.sleep(0.002)
    os._exit(0)


`+main+"    _daemon()\n", 1)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, filepath.Join(ec.WorkingDirectory, "app.py"), app)
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackConftestWithTwoHiddenRoots splits fix_inventory's tests into
// two hidden roots, and plants a workspace conftest.py whose hookwrapper
// turns every outcome into a pass.
func TestAttackConftestWithTwoHiddenRoots(t *testing.T) {
	t.Parallel()
	src := exampleFile(t, "fix_inventory/tests/test_inventory.py")
	const sep = "\n\ndef test_"
	parts := strings.Split(src, sep)
	if len(parts) < 3 {
		t.Fatalf("fix_inventory's tests changed: %d test functions", len(parts)-1)
	}
	header, tests := parts[0], parts[1:]
	dir := t.TempDir()
	half := len(tests) / 2
	for i, root := range []struct {
		name  string
		tests []string
	}{{"tests_a", tests[:half]}, {"tests_b", tests[half:]}} {
		if err := os.MkdirAll(filepath.Join(dir, root.name), 0o755); err != nil {
			t.Fatal(err)
		}
		body := header + sep + strings.Join(root.tests, sep)
		if err := os.WriteFile(filepath.Join(dir, root.name, fmt.Sprintf("test_inventory_%d.py", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, ec := attackEnv(t, "fix_inventory", func(ec *config.Environment) {
		ec.ID = "fix_inventory_two_roots"
		ec.HiddenTests = []config.CopySpec{
			{Src: filepath.Join(dir, "tests_a"), Dest: "/workspace/tests"},
			{Src: filepath.Join(dir, "tests_b"), Dest: "/workspace/tests_b"},
		}
		ec.UnitTests = []string{"python3 -m pytest tests/ tests_b/"}
	})
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, filepath.Join(ec.WorkingDirectory, "conftest.py"), `import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    rep = out.get_result()
    rep.outcome = "passed"
    rep.longrepr = None
`)
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackForgedOutputForNonPytestCommand uses a task whose unit_tests
// command is a hidden checker script, not pytest. The agent's module
// prints a pytest summary of 20 passes and writes an all-passing report to
// the JUnit path in PYTEST_ADDOPTS: the result must come from the exit
// status alone, one test case for the command.
func TestAttackForgedOutputForNonPytestCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	check := `import sys
sys.path.insert(0, "/workspace")
from inventory import Inventory

inv = Inventory()
inv.add_item("apple", 10, 0.5)
inv.add_item("apple", 5, 0.5)
assert inv.quantity("apple") == 15, "add_item does not accumulate"
assert inv.quantity("kiwi") == 0, "unknown items are not 0"
print("all checks passed")
`
	if err := os.WriteFile(filepath.Join(dir, "check.py"), []byte(check), 0o644); err != nil {
		t.Fatal(err)
	}
	e, ec := attackEnv(t, "fix_inventory", func(ec *config.Environment) {
		ec.ID = "fix_inventory_checker"
		ec.HiddenTests = []config.CopySpec{{Src: dir, Dest: "/workspace/tests"}}
		ec.UnitTests = []string{"python3 /workspace/tests/check.py"}
	})
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeInventory(t, s, ec, pyStripFailures+`
import sys as _sys

_names = ["test_check_%d" % i for i in range(20)]
if junit_path():
    try:
        with open(junit_path(), "w") as _f:
            _f.write(forged_report(_names))
    except OSError:
        pass
print("=" * 20 + " short test summary info " + "=" * 20)
for _n in _names:
    print("PASSED tests/test_inventory.py::" + _n)
print("=" * 20 + " 20 passed in 0.12s " + "=" * 20)
_sys.stdout.flush()
`)
	r := finish(t, s, ec)
	checkHonestOrFlagged(t, r, base)
	if ev := r.Info.Evaluation; len(ev.Tests) != len(ec.UnitTests) || len(ev.Commands) != len(ec.UnitTests) || ev.Commands[0].Source != "exit_code" {
		t.Errorf("results of a non-pytest command: %d test cases for %d commands, want one each from the exit status; tests %+v", len(ev.Tests), len(ev.Commands), ev.Tests)
	}
}

// TestAttackStopParent stops the executor running the agent's command
// (kill -STOP $PPID): the step still returns within its bound and the
// episode goes on.
func TestAttackStopParent(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	checkScored(t, runShell(t, s, ec, "kill -STOP $PPID; echo stopped"))
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackStopAll stops every process the agent may signal (kill -STOP -1).
func TestAttackStopAll(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	checkScored(t, runShell(t, s, ec, "kill -STOP -1; echo stopped"))
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackReadFIFO reads a named pipe the agent made, which no one will
// ever write: read_file fails promptly as the agent's error.
func TestAttackReadFIFO(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	if r := runShell(t, s, ec, "mkfifo /tmp/fifo && test -p /tmp/fifo && echo fifo made"); !strings.Contains(r.Observation.Text, "fifo made") {
		t.Fatalf("mkfifo: %q", r.Observation.Text)
	}
	r := act(t, s, stepBound(ec), call(gym.ToolReadFile, gym.ReadFileArgs{Filepath: "/tmp/fifo"}))
	checkScored(t, r)
	if c := r.Info.Calls[0]; c.ErrorClass != gym.ClassAgent {
		t.Errorf("read_file of a FIFO: %+v, want an agent_error", c)
	}
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackKillParent kills the executor running the agent's command.
func TestAttackKillParent(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	checkScored(t, runShell(t, s, ec, "kill -9 $PPID; echo killed"))
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackKillAll kills every process the agent may signal (kill -9 -1).
func TestAttackKillAll(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	checkScored(t, runShell(t, s, ec, "kill -9 -1; echo killed"))
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackPidsExhausted leaves behind a process that takes every pid the
// sandbox may have and keeps them, its children sleeping, while it tries
// for more. The executor may not make a thread then, and a Go runtime that
// cannot make one it needs ends the process: an executor that died would
// mask the episode as a sandbox error. The agent's file operations still
// work, a command that cannot start is the agent's error, and the
// evaluation (which ends every process of the agent first) scores the
// work as it is.
func TestAttackPidsExhausted(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	r := runShell(t, s, ec, "python3 -c '"+sandboxtest.PidHolder+"'")
	checkScored(t, r)
	if !strings.Contains(r.Observation.Text, "pids exhausted") {
		t.Fatalf("the sandbox's pids were not exhausted, so the attack tested nothing: %q", r.Observation.Text)
	}
	for i := range 3 {
		r := writeFiles(t, s, ec, "note"+strconv.Itoa(i)+".txt", "written while every pid is taken")
		checkScored(t, r)
		r = act(t, s, stepBound(ec), call(gym.ToolReadFile, gym.ReadFileArgs{Filepath: "note" + strconv.Itoa(i) + ".txt"}))
		checkScored(t, r)
		if c := r.Info.Calls[0]; c.ErrorClass != "" || !strings.Contains(r.Observation.Text, "every pid is taken") {
			t.Errorf("read_file while every pid is taken: %s; output %q", describe(r), clipText(r.Observation.Text))
		}
		r = runShell(t, s, ec, "echo forked")
		checkScored(t, r)
		if c := r.Info.Calls[0]; c.ErrorClass == gym.ClassSandbox {
			t.Errorf("a command while every pid is taken: %s", describe(r))
		}
		t.Logf("command while every pid is taken: %s; output %q", describe(r), clipText(r.Observation.Text))
	}
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackGarbageOnExecutorStream writes garbage to the executor's
// stdout, the stream its answers travel on, and to every process's stdout
// the agent can open.
func TestAttackGarbageOnExecutorStream(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	checkScored(t, runShell(t, s, ec, `echo garbage > /proc/$PPID/fd/1; for f in /proc/[0-9]*/fd/1; do echo garbage > "$f"; done 2>/dev/null; echo written`))
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackAgentThreads goes after the executor's threads that keep the
// agent's file-system identity between file operations: after a write_file
// leaves one waiting, the agent finds every thread of the executor (its
// command's parent), checks that such a thread is there, and sends each
// thread SIGKILL (tgkill) and tries to attach to it with ptrace. Their real,
// effective and saved uid are root's, so every attempt must be refused.
func TestAttackAgentThreads(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, "note.txt", "a file operation as the agent")
	r := runShell(t, s, ec, `python3 -c '
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
ex = [int(p) for p in os.listdir("/proc") if p.isdigit() and open("/proc/%s/comm" % p).read().strip() == "executor"][0]
fs_threads = signalled = attached = 0
tids = os.listdir("/proc/%d/task" % ex)
for tid in tids:
    with open("/proc/%d/task/%s/status" % (ex, tid)) as f:
        uid = [l.split()[1:] for l in f if l.startswith("Uid:")][0]
    if uid[:3] == ["0", "0", "0"] and uid[3] == str(os.getuid()):
        fs_threads += 1
    if libc.syscall(234, ex, int(tid), signal.SIGKILL) == 0:  # tgkill
        signalled += 1
    if libc.ptrace(16, int(tid), None, None) == 0:  # PTRACE_ATTACH
        attached += 1
print("threads=%d fs_threads=%d signalled=%d attached=%d" % (len(tids), fs_threads, signalled, attached))
'`)
	checkScored(t, r)
	out := r.Observation.Text
	if !strings.Contains(out, "signalled=0 attached=0") {
		t.Errorf("a thread of the executor was signalled or traced: %q", out)
	}
	if strings.Contains(out, "fs_threads=0 ") || !strings.Contains(out, "fs_threads=") {
		t.Errorf("no thread with the agent's file-system identity was found, so the attack tested nothing: %q", out)
	}
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackPtraceInit tries to attach to the container's PID 1 with
// ptrace, which must be refused.
func TestAttackPtraceInit(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", shortTimeouts)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	r := runShell(t, s, ec, `python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
r = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH
print("ptrace_attach=%d errno=%d" % (r, ctypes.get_errno()))
'`)
	checkScored(t, r)
	if !strings.Contains(r.Observation.Text, "ptrace_attach=-1 ") {
		t.Errorf("ptrace attach to PID 1 was not refused: %q", r.Observation.Text)
	}
	checkAlive(t, s, ec)
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackIniFilesInWorkspace writes every file pytest reads settings
// from into the working directory, with options that would disable the
// report and collect nothing.
func TestAttackIniFilesInWorkspace(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	const opts = "-p no:junitxml --ignore=tests -k no_such_test"
	ini := "addopts = " + opts + "\ntestpaths = nowhere\npython_files = nothing_*.py\n"
	w := ec.WorkingDirectory
	writeFiles(t, s, ec,
		filepath.Join(w, "pytest.ini"), "[pytest]\n"+ini,
		filepath.Join(w, "tox.ini"), "[pytest]\n"+ini,
		filepath.Join(w, "setup.cfg"), "[tool:pytest]\n"+ini,
		filepath.Join(w, "pyproject.toml"), "[tool.pytest.ini_options]\naddopts = \""+opts+"\"\ntestpaths = [\"nowhere\"]\npython_files = [\"nothing_*.py\"]\n",
	)
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackSymlinkedTestRoot points /workspace/tests at a directory of
// passing tests before the end.
func TestAttackSymlinkedTestRoot(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, "/tmp/mytests/test_inventory.py", passingTests(10))
	if r := runShell(t, s, ec, "ln -s /tmp/mytests /workspace/tests && ls /workspace/tests/"); !strings.Contains(r.Observation.Text, "test_inventory.py") {
		t.Fatalf("symlink: %q", r.Observation.Text)
	}
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// pyForgeAtExit is a module that, once imported, rewrites the JUnit report
// as all passing when the process exits.
const pyForgeAtExit = pyStripFailures + `
import atexit


def _forge():
    path = junit_path()
    if path:
        strip_failures(path)


atexit.register(_forge)
`

// TestAttackUserSitePackages installs a .pth file and a usercustomize.py in
// the agent's user site-packages, both loading a module that forges the
// report at exit.
func TestAttackUserSitePackages(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	site := "/home/agent/.local/lib/python3.11/site-packages"
	writeFiles(t, s, ec,
		site+"/gymforge.py", pyForgeAtExit,
		site+"/gymforge.pth", "import gymforge\n",
		site+"/usercustomize.py", "import gymforge\n",
	)
	// The hook works where nothing stops it: in the agent's own Python.
	if r := runShell(t, s, ec, `python3 -c 'import sys; print("hooked" if "gymforge" in sys.modules else "clean")'`); !strings.Contains(r.Observation.Text, "hooked") {
		t.Fatalf("the user site hook does not load even for the agent: %q", r.Observation.Text)
	}
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackShellStartupFiles exports PYTHONPATH and PYTEST_ADDOPTS
// pointing at a forging plugin from the shell's startup files (and tries
// the system-wide ones).
func TestAttackShellStartupFiles(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec,
		"/tmp/evil/evilplugin.py", `import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    rep = out.get_result()
    rep.outcome = "passed"
    rep.longrepr = None
`,
		"/tmp/evil/sitecustomize.py", pyForgeAtExit,
	)
	exports := `export PYTHONPATH=/tmp/evil PYTEST_ADDOPTS="-p evilplugin"`
	r := runShell(t, s, ec, fmt.Sprintf(`for f in ~/.bashrc ~/.profile ~/.bash_profile /etc/profile /etc/bash.bashrc /etc/environment; do echo '%s' >> $f && echo "wrote $f"; done 2>&1`, exports))
	t.Logf("startup files: %q", r.Observation.Text)
	// The exports work where nothing stops them: in a login shell of the agent's.
	if r := runShell(t, s, ec, `bash -lic 'python3 -c "import evilplugin; print(\"loaded\")"' 2>&1`); !strings.Contains(r.Observation.Text, "loaded") {
		t.Fatalf("the exports do not load the plugin even in the agent's login shell: %q", r.Observation.Text)
	}
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// pyForgeRunner is a pytest.py that forges a run the checks would believe:
// it reads the canary's name and token from the guard plugin it finds on
// PYTHONPATH, and writes a report in which the canaries fail and every
// hidden test passes, with a summary line that agrees.
const pyForgeRunner = `import os, re, sys
guard = ""
for d in os.environ.get("PYTHONPATH", "").split(":"):
    p = os.path.join(d, "gymserver_guard.py")
    if os.path.exists(p):
        guard = open(p).read()
token = re.search(r'^_TOKEN = "([^"]+)"', guard, re.M).group(1)
names = re.findall(r"^def (test_\w+)", open("/workspace/tests/test_inventory.py").read(), re.M)
cases = "".join('<testcase classname="tests.test_inventory" name="%s" time="0.01"/>' % n for n in names)
for c in ("a", "b"):
    cases += '<testcase classname="gymserver_canary" name="test_%s_%s" time="0.01"><failure message="assert">assert</failure></testcase>' % (token, c)
os.write(3, ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="%d">%s</testsuite></testsuites>' % (len(names) + 2, cases)).encode())
print("=" * 20 + " %d failed, %d passed in 0.10s " % (2, len(names)) + "=" * 20)
sys.exit(1)
`

// TestAttackPytestOnConfiguredPythonPath plants a pytest.py that forges the
// report in a directory the environment's config puts on PYTHONPATH and
// the agent can write (/tmp/lib): the test command must still run the real
// pytest.
func TestAttackPytestOnConfiguredPythonPath(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "fix_inventory", func(ec *config.Environment) {
		ec.EnvironmentVariables = map[string]string{"PYTHONPATH": "/tmp/lib"}
	})
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, "/tmp/lib/pytest.py", pyForgeRunner)
	// The shadow works where nothing stops it: in the agent's own Python.
	if r := runShell(t, s, ec, `python3 -c 'import pytest; print(pytest.__file__)' 2>&1`); !strings.Contains(r.Observation.Text, "/tmp/lib/pytest.py") {
		t.Fatalf("the configured PYTHONPATH does not shadow pytest even for the agent: %q", r.Observation.Text)
	}
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestConfiguredPythonPathReachesTests is the twin of
// TestAttackPytestOnConfiguredPythonPath: with the runner kept off the
// configured PYTHONPATH, the hidden tests still import the agent's module
// from it, find it before the standard library as Python would put it, and
// pass it on to the processes they start.
func TestConfiguredPythonPathReachesTests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "test_path.py"), []byte(`import os
import subprocess
import sys

import pytest

import pathmod


def test_import_from_configured_dir():
    assert pathmod.VALUE == 42
    assert os.path.dirname(pathmod.__file__) == "/tmp/lib"


def test_before_standard_library():
    assert sys.path.index("/tmp/lib") < sys.path.index(os.path.dirname(os.__file__))


def test_pytest_is_the_real_one():
    assert not pytest.__file__.startswith("/tmp/lib")


def test_child_process_sees_it():
    out = subprocess.run([sys.executable, "-c", "import pathmod; print(pathmod.VALUE)"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "42", out.stderr
`), 0o644); err != nil {
		t.Fatal(err)
	}
	e, ec := attackEnv(t, "fix_inventory", func(ec *config.Environment) {
		ec.ID = "fix_inventory_pythonpath"
		ec.EnvironmentVariables = map[string]string{"PYTHONPATH": "/tmp/lib"}
		ec.HiddenTests = []config.CopySpec{{Src: dir, Dest: "/workspace/tests"}}
	})
	s, _ := reset(t, e)
	writeFiles(t, s, ec, "/tmp/lib/pytest.py", "raise SystemExit('the shadow ran')\n", "/tmp/lib/pathmod.py", "VALUE = 42\n")
	r := finish(t, s, ec)
	if ev := r.Info.Evaluation; r.Reward != 1 || ev.Total != 4 || ev.Tampered {
		t.Fatalf("configured PYTHONPATH: %s; output %v", describe(r), ev.Commands)
	}
}
