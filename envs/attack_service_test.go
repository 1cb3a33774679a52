package envs_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// The attacks on service tasks (config.Service): calculator_service's
// evaluator starts the agent's app.py before the tests, which call it over
// HTTP. The service is the agent's code running next to the test command;
// these tests hold it to the same contract as the rest of the suite
// (honest or flagged, scored, no hang), and check that nothing the agent
// started during the episode takes the service's place.

// serviceApp returns calculator_service's starter app.py with payload
// defined before its main block and called first thing in it, before the
// server listens (so before the tests start).
func serviceApp(t *testing.T, payload string) string {
	t.Helper()
	starter := exampleFile(t, "calculator_service/starter/app.py")
	const main = "if __name__ == \"__main__\":\n"
	if strings.Count(starter, main) != 1 {
		t.Fatalf("the starter app.py changed: no single %q", main)
	}
	return strings.Replace(starter, main, payload+"\n\n"+main+"    _attack()\n", 1)
}

// TestAttackServiceLeftoverServerAnswersTests has the agent leave a
// correct calculator (the reference solution, copied outside the
// workspace) running as a daemon on the service's port, with app.py still
// the starter. Were it kept alive, the evaluator's app.py could not bind
// the port and the tests would score the daemon: it must be gone, and the
// starter scored.
func TestAttackServiceLeftoverServerAnswersTests(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "calculator_service", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, "/tmp/ref/app.py", exampleFile(t, "calculator_service/solution/app.py"))
	r := runShell(t, s, ec, `cd /tmp/ref && setsid sh -c 'PORT=8000 python3 app.py & exit' </dev/null >/dev/null 2>&1;
for i in $(seq 100); do python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/health")' 2>/dev/null && echo daemon up && break; sleep 0.1; done`)
	checkScored(t, r)
	if !strings.Contains(r.Observation.Text, "daemon up") {
		t.Fatalf("the leftover server did not start: %q", r.Observation.Text)
	}
	checkHonest(t, finish(t, s, ec), base)
}

// TestAttackServiceForgesReportFromOutside makes the service, a process
// apart from pytest, watch for the test run and write an all-passing JUnit
// report into every pipe it can open on fd 3 of another process
// (/proc/PID/fd/3, the report pipe), and rewrite any JUnit file it finds.
func TestAttackServiceForgesReportFromOutside(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "calculator_service", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, filepath.Join(ec.WorkingDirectory, "app.py"), serviceApp(t, pyStripFailures+`

def _attack():
    import glob, os, re, stat, threading, time

    def forge():
        try:
            names = re.findall(r"^def (test_\w+)", open("/tests/test_api.py").read(), re.M)
        except OSError:
            names = ["test_health"]
        report = forged_report(names).encode()
        done = set()
        end = time.time() + 60
        while time.time() < end:
            for fd in glob.glob("/proc/[0-9]*/fd/3"):
                if fd in done or fd.startswith("/proc/%d/" % os.getpid()):
                    continue
                try:
                    if stat.S_ISFIFO(os.stat(fd).st_mode):
                        w = os.open(fd, os.O_WRONLY | os.O_NONBLOCK)
                        os.write(w, report)
                        os.close(w)
                        done.add(fd)
                except OSError:
                    pass
            for p in glob.glob("/tmp/.gymserver-eval-*/*.xml"):
                strip_failures(p)
            time.sleep(0.005)

    threading.Thread(target=forge, daemon=True).start()
`))
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestAttackServiceReplacesHiddenTests makes the service, before it
// listens, overwrite the hidden test files (all but the canary) with
// passing tests. Run with the machinery's rights (root with
// DAC_OVERRIDE) it would score 1 unflagged; as the agent's uid it changes
// nothing.
func TestAttackServiceReplacesHiddenTests(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "calculator_service", nil)
	base := doNothing(t, e, ec)
	s, _ := reset(t, e)
	writeFiles(t, s, ec, filepath.Join(ec.WorkingDirectory, "app.py"), serviceApp(t, `
def _attack():
    import glob
    forged = "".join("def test_forged_%d():\n    pass\n\n" % i for i in range(20))
    for p in glob.glob("/tests/*.py"):
        if "gymserver_canary_" in p:
            continue
        try:
            with open(p, "w") as f:
                f.write(forged)
        except OSError:
            pass
`))
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// inWorkspace moves calculator_service's hidden tests into the working
// directory, which Load refuses for an environment with services: the
// agent owns the directory above them there.
func inWorkspace(ec *config.Environment) {
	ec.ID = "calculator_service_in_workspace"
	for i := range ec.HiddenTests {
		ec.HiddenTests[i].Dest = "/workspace/tests"
	}
	ec.UnitTests = []string{"python3 -m pytest tests/"}
}

// TestAttackServiceSwapsHiddenTestsBeforeCollection runs a service whose
// hidden tests sit in a directory the agent owns (Load refuses that; the
// test edits the loaded config): before pytest collects, the service
// renames the hidden test directory away and puts in its place one of its
// own with passing tests and a copy of the canary file, which still fails
// as a canary must. The guard finds a directory of the agent's above the
// hidden tests and the run is flagged, whether or not a swap happened:
// the do-nothing run is flagged too.
func TestAttackServiceSwapsHiddenTestsBeforeCollection(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "calculator_service", inWorkspace)
	s, _ := reset(t, e)
	r := finish(t, s, ec)
	if ev := r.Info.Evaluation; !ev.Tampered || !strings.Contains(ev.Error, "the guard stopped the run: /workspace, on the way to the hidden tests") {
		t.Fatalf("do-nothing run with the hidden tests below the working directory: %s", describe(r))
	}
	const base = 0.0
	s, _ = reset(t, e)
	writeFiles(t, s, ec, filepath.Join(ec.WorkingDirectory, "app.py"), serviceApp(t, `
def _attack():
    import glob, os, shutil
    mine = "/workspace/.forged"
    os.makedirs(mine, exist_ok=True)
    with open(mine + "/test_api.py", "w") as f:
        f.write("".join("def test_forged_%d():\n    pass\n\n" % i for i in range(16)))
    for canary in glob.glob("/workspace/tests/gymserver_canary_*.py"):
        shutil.copy(canary, mine)
    os.rename("/workspace/tests", "/workspace/.hidden")
    os.rename(mine, "/workspace/tests")
`))
	checkHonestOrFlagged(t, finish(t, s, ec), base)
}

// TestServiceRestartsForEachTestCommand runs the reference solution with
// two unit_tests commands: the first command's end kills the service with
// everything else, so the second passes only if it is started again.
func TestServiceRestartsForEachTestCommand(t *testing.T) {
	t.Parallel()
	e, ec := attackEnv(t, "calculator_service", func(ec *config.Environment) {
		ec.ID = "calculator_service_twice"
		ec.UnitTests = append(ec.UnitTests, ec.UnitTests[0])
	})
	s, _ := reset(t, e)
	writeFiles(t, s, ec, filepath.Join(ec.WorkingDirectory, "app.py"), exampleFile(t, "calculator_service/solution/app.py"))
	r := finish(t, s, ec)
	ev := r.Info.Evaluation
	if r.Reward != 1 || ev.Total < 4 || len(ev.Commands) != 2 {
		t.Fatalf("reference solution over two test commands: %s", describe(r))
	}
	for i, c := range ev.Commands {
		if !strings.HasPrefix(c.Output, "service calculator: listening on port 8000 after ") {
			t.Errorf("command %d output does not say the service listened: %q", i, clipText(c.Output))
		}
	}
	if r.Info.TerminationReason != gym.ReasonCompleted {
		t.Errorf("termination %q", r.Info.TerminationReason)
	}
}
