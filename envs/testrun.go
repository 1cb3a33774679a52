package envs

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"path"
	"sort"
	"strings"
	"text/template"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/testresult"
	"github.com/gymserver/gymserver/gym"
)

var (
	//go:embed guard.py.tmpl
	guardSource string
	guardTmpl   = template.Must(template.New("guard").Parse(guardSource))
	//go:embed canary.py.tmpl
	canarySource string
	canaryTmpl   = template.Must(template.New("canary").Parse(canarySource))
)

// canaryCases is the number of tests in the canary file.
const canaryCases = 2

// testRun is what one evaluation installs next to the hidden tests, and
// how it reads the results: a directory of its own (random name, made by
// root after every agent process is gone) with the pytest settings and the
// guard plugin, and a canary file among the hidden tests.
type testRun struct {
	dir string
	// token is in the canary tests' names; nothing else is.
	token string
	// confcutdir: pytest loads no conftest.py above it.
	confcutdir string
	// ini is the pytest settings file: the task's hidden pytest.ini, or
	// an empty one of ours, never one the agent wrote.
	ini       string
	hiddenIni bool
	// clear are removed before the files are installed: the hidden test
	// roots (nothing the agent left there counts) and every conftest.py
	// on the way from confcutdir to a root.
	clear []string
	// files are installed with the hidden tests.
	files []sandbox.File
}

// newTestRun plans one evaluation's test run.
func (t *task) newTestRun() *testRun {
	run := &testRun{dir: "/tmp/.gymserver-eval-" + randomHex(8), token: "gs" + randomHex(8)}
	for _, f := range t.hidden {
		if path.Base(f.Path) == "pytest.ini" && run.ini == "" {
			run.ini, run.hiddenIni = f.Path, true
		}
	}
	if run.ini == "" {
		run.ini = path.Join(run.dir, "pytest.ini")
		run.files = append(run.files, sandbox.File{Path: run.ini, Data: []byte("[pytest]\n"), Mode: 0o644})
	}

	// The hidden roots that are directories hold the canary (so that the
	// conftest.py files that apply to the tests apply to it too); without
	// one it goes in the run's own directory.
	var dirRoots, searchDirs []string
	for _, r := range t.hiddenRoots {
		if t.hiddenDir(r) {
			dirRoots = append(dirRoots, r)
			searchDirs = append(searchDirs, r)
		} else {
			searchDirs = append(searchDirs, path.Dir(r))
		}
	}
	canaryDir := run.dir
	if len(dirRoots) > 0 {
		canaryDir = dirRoots[0]
	}
	canary := path.Join(canaryDir, "gymserver_canary_"+run.token+".py")
	searchDirs = append(searchDirs, canaryDir)
	run.confcutdir = commonDir(searchDirs)

	// pytest loads the conftest.py of confcutdir and of every directory
	// between it and a collected file; those outside the hidden roots may
	// be the agent's, so they go.
	seen := map[string]bool{}
	for _, d := range searchDirs {
		for ; ; d = path.Dir(d) {
			if !underAny(d, dirRoots) && d != run.dir && !seen[d] {
				seen[d] = true
				run.clear = append(run.clear, path.Join(d, "conftest.py"))
			}
			if d == run.confcutdir || d == "/" {
				break
			}
		}
	}
	sort.Strings(run.clear)
	run.clear = append(append([]string(nil), t.hiddenRoots...), run.clear...)

	a, b := randomInt(), randomInt()
	for a == b {
		b = randomInt()
	}
	var buf bytes.Buffer
	if err := canaryTmpl.Execute(&buf, map[string]any{"Token": run.token, "A": a, "B": b}); err != nil {
		panic(err) // the template is ours
	}
	run.files = append(run.files, sandbox.File{Path: canary, Data: bytes.Clone(buf.Bytes()), Mode: 0o644})
	buf.Reset()
	roots := dirRoots
	for _, r := range t.hiddenRoots {
		if !t.hiddenDir(r) {
			roots = append(roots, r)
		}
	}
	if len(roots) > 0 {
		roots = append(roots, canaryDir)
	}
	if err := guardTmpl.Execute(&buf, map[string]any{
		"Roots": pyList(roots), "WorkDir": pyString(t.cfg.WorkingDirectory), "Canary": pyString(canary),
		"Token": pyString(run.token), "Sealed": pyBool(len(t.cfg.Services) > 0),
		"PythonPath": pyList(pythonPath(t.cfg)),
	}); err != nil {
		panic(err) // the template is ours
	}
	run.files = append(run.files, sandbox.File{Path: path.Join(run.dir, "gymserver_guard.py"), Data: buf.Bytes(), Mode: 0o644})
	return run
}

// hiddenDir reports whether the hidden root r is a directory (it has files
// below it) rather than a single file.
func (t *task) hiddenDir(r string) bool {
	for _, f := range t.hidden {
		if strings.HasPrefix(f.Path, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}

// pythonPath returns the non-empty entries of the environment's
// PYTHONPATH setting.
func pythonPath(cfg config.Environment) []string {
	var dirs []string
	for _, d := range strings.Split(cfg.EnvironmentVariables["PYTHONPATH"], ":") {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// env is the environment of a test command. For pytest: the JUnit report
// goes to the report pipe, settings come from the run's ini file, conftest
// files only from confcutdir down, the guard plugin is loaded first, no
// user site-packages and no cache. Python does not put the working
// directory first on sys.path (PYTHONSAFEPATH), and PYTHONPATH is the
// run's directory alone, so a pytest.py or sitecustomize.py the agent
// wrote, in the working directory or in a directory of the environment's
// PYTHONPATH, cannot stand in for the real ones, nor can a plugin of
// theirs be loaded by its entry point; once pytest has loaded its plugins,
// the guard puts the environment's PYTHONPATH back (sys.path and the
// variable) and pytest adds the working directory (its pythonpath
// setting), so the tests still import the agent's modules. Other commands
// get the same settings without the report, the guard and the canary: a
// pytest they run inside still ignores the agent's ini and conftest files.
func (run *testRun) env(cfg config.Environment, pytest bool) []string {
	opts := []string{"-p", "no:cacheprovider", "-c", run.ini, "--rootdir=" + cfg.WorkingDirectory,
		"--confcutdir=" + run.confcutdir}
	if !run.hiddenIni {
		opts = append(opts, "-o", "pythonpath="+cfg.WorkingDirectory)
	}
	env := []string{"PYTHONNOUSERSITE=1", "PYTHONSAFEPATH=1", "PYTHONDONTWRITEBYTECODE=1"}
	if pytest {
		opts = append(opts, "-rA", "--junitxml=/dev/fd/3", "-p", "gymserver_guard")
		env = append(env, "PYTHONPATH="+run.dir)
	}
	if prev := cfg.EnvironmentVariables["PYTEST_ADDOPTS"]; prev != "" {
		opts = append([]string{prev}, opts...)
	}
	return append(env, "PYTEST_ADDOPTS="+strings.Join(opts, " "))
}

// verdict is what a pytest command's report says.
type verdict struct {
	cases  []gym.TestCase
	source string
	// tampered says why the report cannot be believed.
	tampered string
	// verifierErr is a failure of the tests themselves.
	verifierErr error
}

// allPassed reports whether every counted test case passed.
func (v verdict) allPassed() bool {
	_, failed, errored, _ := testresult.Summarize(v.cases)
	return len(v.cases) > 0 && failed == 0 && errored == 0
}

// verdict reads a pytest command's report. Only pytest's JUnit report on
// the pipe counts; the output is the code under test's to print. The
// report must be one document and nothing else (anything written to the
// pipe besides pytest's report makes it two), hold every canary test as
// failed, and claim no more passes than pytest's own summary line.
func (run *testRun) verdict(r sandbox.ExecResult, timeout time.Duration) verdict {
	if r.ReportDropped > 0 {
		return verdict{verifierErr: fmt.Errorf("the JUnit report is larger than %d bytes", junitLimit)}
	}
	if r.TimedOut {
		return verdict{source: "exit_code", cases: []gym.TestCase{{Name: "(test run)", Status: gym.TestFailed,
			Message: fmt.Sprintf("timed out after %s (test_timeout): pytest was stopped before it wrote its report, so the whole command counts as one failed test", timeout)}}}
	}
	if reason := run.guardRefused(r.Stderr); reason != "" {
		return verdict{tampered: reason}
	}
	if len(bytes.TrimSpace(r.Report)) == 0 {
		// pytest always writes its report when it finishes, so a run
		// without one was cut short (os._exit in the code under test, a
		// crash, a signal): its exit status and output prove nothing.
		return verdict{source: "exit_code", cases: []gym.TestCase{{Name: "(test run)", Status: gym.TestError,
			Message: fmt.Sprintf("pytest exited with code %d without writing its JUnit report: it did not finish", r.ExitCode)}}}
	}
	all, err := testresult.ParseJUnit(r.Report)
	var extra *testresult.ExtraContentError
	switch {
	case errors.As(err, &extra):
		return verdict{tampered: "something besides pytest wrote to the report pipe (" + extra.Error() + ")"}
	case err != nil:
		return verdict{source: "exit_code", cases: []gym.TestCase{{Name: "(test run)", Status: gym.TestError,
			Message: fmt.Sprintf("pytest (exit code %d) left an unreadable JUnit report: %v", r.ExitCode, err)}}}
	}
	var cases []gym.TestCase
	canaries := 0
	for _, c := range all {
		if !strings.Contains(c.Name, run.token) {
			cases = append(cases, c)
			continue
		}
		canaries++
		if c.Status != gym.TestFailed {
			return verdict{tampered: fmt.Sprintf("a canary test that must fail is %s (%s)", c.Status, c.Name)}
		}
	}
	if canaries != canaryCases {
		return verdict{tampered: fmt.Sprintf("the report holds %d of the %d canary tests", canaries, canaryCases)}
	}
	if len(cases) == 0 {
		return verdict{verifierErr: errors.New("collected no hidden test")}
	}
	passed, _, _, _ := testresult.Summarize(cases)
	if n, ok := testresult.SummaryPassed(string(r.Stdout)); ok && passed > n {
		return verdict{tampered: fmt.Sprintf("the report has %d passing tests but pytest's summary line says %d", passed, n)}
	}
	return verdict{cases: cases, source: "junit"}
}

// guardRefused returns the guard's reason when it stopped the run because
// the hidden tests could have been swapped (see _SEALED in guard.py.tmpl).
// The code under test could print the same line, but only to have its own
// run flagged.
func (run *testRun) guardRefused(stderr []byte) string {
	marker := "gymserver guard " + run.token + ": "
	_, rest, ok := bytes.Cut(stderr, []byte(marker))
	if !ok {
		return ""
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	return "the guard stopped the run: " + string(line)
}

// exitCase is the one test case of a command that is not pytest: its exit
// status alone.
func exitCase(cmd string, r sandbox.ExecResult, timeout time.Duration) gym.TestCase {
	tc := gym.TestCase{Name: cmd, Status: gym.TestPassed}
	switch {
	case r.TimedOut:
		tc.Status, tc.Message = gym.TestFailed, fmt.Sprintf("timed out after %s (test_timeout)", timeout)
	case r.ExitCode != 0:
		tc.Status, tc.Message = gym.TestFailed, fmt.Sprintf("exit code %d", r.ExitCode)
	}
	return tc
}

// commonDir returns the deepest directory that holds every one of dirs.
func commonDir(dirs []string) string {
	if len(dirs) == 0 {
		return "/"
	}
	c := path.Clean(dirs[0])
	for _, d := range dirs[1:] {
		d = path.Clean(d)
		for c != "/" && d != c && !strings.HasPrefix(d, c+"/") {
			c = path.Dir(c)
		}
	}
	return c
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randomInt returns a random number below 10^12.
func randomInt() int64 {
	n, _ := rand.Int(rand.Reader, big.NewInt(1e12))
	return n.Int64()
}

// pyString and pyList write Python literals; JSON strings are valid ones.
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func pyList(items []string) string {
	if items == nil {
		items = []string{}
	}
	b, _ := json.Marshal(items)
	return string(b)
}
