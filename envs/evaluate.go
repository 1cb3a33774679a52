package envs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/testresult"
	"github.com/gymserver/gymserver/gym"
)

// testOutputLimit caps the test output kept per unit_tests command.
const testOutputLimit = 64 << 10

// junitLimit caps the JUnit XML read back from the sandbox.
const junitLimit = 16 << 20

// evaluate kills the agent's processes, installs the hidden tests, runs the
// unit_tests commands and scores the test cases. Infrastructure failures
// come back as an evaluation with an error class and the mask hint, not as
// an error; an error is returned only when ctx ends.
func (e *TaskEnv) evaluate(ctx context.Context, sb sandbox.Sandbox) (gym.Evaluation, error) {
	start := time.Now()
	ev := gym.Evaluation{Mode: e.cfg.Reward.Mode, Tests: []gym.TestCase{}, Commands: []gym.TestCommand{}}
	fail := func(class gym.ErrorClass, err error) (gym.Evaluation, error) {
		if ctx.Err() != nil {
			return gym.Evaluation{}, ctx.Err()
		}
		ev.Reward = 0
		ev.Success = false
		ev.ErrorClass = class
		ev.Error = err.Error()
		ev.Mask = gym.Masked(class)
		ev.Duration = gym.Duration(time.Since(start))
		return ev, nil
	}

	if err := sb.KillAll(ctx); err != nil {
		return fail(gym.ClassSandbox, fmt.Errorf("stop agent processes: %w", err))
	}
	for _, root := range e.hiddenRoots {
		if err := sb.Remove(ctx, root); err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("clear %s: %w", root, err))
		}
	}
	if len(e.hidden) > 0 {
		if err := sb.CopyIn(ctx, e.hidden); err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("install hidden tests: %w", err))
		}
	}
	// The report directory has a random name made after the agent's
	// processes are gone, so nothing of the agent's can be waiting there.
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	reportDir := "/tmp/.gymserver-eval-" + hex.EncodeToString(rnd[:])
	// pytest reads its settings from a file of ours (or the task's own
	// hidden pytest.ini), never from ini files the agent wrote.
	iniPath := e.hiddenIni()
	if iniPath == "" {
		iniPath = path.Join(reportDir, "pytest.ini")
		if err := sb.WriteFile(ctx, iniPath, []byte("[pytest]\n"), 0o644); err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("make report directory: %w", err))
		}
	} else if err := sb.WriteFile(ctx, path.Join(reportDir, ".keep"), nil, 0o644); err != nil {
		return fail(gym.ClassSandbox, fmt.Errorf("make report directory: %w", err))
	}

	for i, cmd := range e.cfg.UnitTests {
		junitPath := path.Join(reportDir, fmt.Sprintf("junit-%d.xml", i))
		r, err := sb.Exec(ctx, sandbox.ExecRequest{
			Argv:      []string{"/bin/sh", "-c", cmd},
			Dir:       e.cfg.WorkingDirectory,
			Env:       e.testEnv(junitPath, iniPath, e.hiddenIni() != ""),
			Timeout:   e.cfg.Timeouts.Test,
			MaxOutput: testOutputLimit,
		})
		if err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("run test command %d (%s): %w", i, cmd, err))
		}
		tc := gym.TestCommand{
			Command:  cmd,
			ExitCode: r.ExitCode,
			Output:   formatExec(r, testOutputLimit),
			Duration: gym.Duration(r.Duration),
			TimedOut: r.TimedOut,
			Success:  r.ExitCode == 0 && !r.TimedOut,
		}
		// Nothing the tests started may outlive them and rewrite the
		// report before it is read.
		if err := sb.KillAll(ctx); err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("stop processes after test command %d: %w", i, err))
		}
		pytest := strings.Contains(cmd, "pytest")
		cases, source, err := e.parseResults(ctx, sb, junitPath, r, !pytest)
		if err != nil {
			return fail(gym.ClassSandbox, err)
		}
		tc.Source = source
		if len(cases) == 0 {
			// pytest exits 5 when it collected nothing: the task's tests are
			// missing, which is the task's fault, not the agent's.
			if r.ExitCode == 5 && !r.TimedOut {
				ev.Commands = append(ev.Commands, tc)
				return fail(gym.ClassVerifier, fmt.Errorf("test command %d (%s) collected no tests", i, cmd))
			}
			status, msg := gym.TestPassed, ""
			if !tc.Success {
				status = gym.TestFailed
				msg = fmt.Sprintf("exit code %d", r.ExitCode)
				if r.TimedOut {
					msg = "timed out after " + e.cfg.Timeouts.Test.String()
				}
			}
			if pytest && !r.TimedOut {
				// pytest always writes its report when it finishes, so a
				// pytest run without one was cut short (os._exit in the
				// code under test, a crash, a signal): its exit status
				// and output prove nothing.
				status = gym.TestError
				msg = fmt.Sprintf("pytest exited with code %d without writing its JUnit report: it did not finish", r.ExitCode)
			}
			cases = []gym.TestCase{{Name: cmd, Status: status, Message: msg}}
			tc.Source = "exit_code"
		}
		for j := range cases {
			cases[j].Command = i
		}
		ev.Tests = append(ev.Tests, cases...)
		ev.Commands = append(ev.Commands, tc)
	}

	ev.Passed, ev.Failed, ev.Errors, ev.Skipped = testresult.Summarize(ev.Tests)
	ev.Total = ev.Passed + ev.Failed + ev.Errors
	ev.Duration = gym.Duration(time.Since(start))
	if ev.Total == 0 {
		return fail(gym.ClassVerifier, errors.New("no test case ran (all were skipped)"))
	}
	switch ev.Mode {
	case "binary":
		if ev.Passed == ev.Total {
			ev.Reward = 1
		}
	default:
		ev.Mode = "pass_rate"
		ev.Reward = float64(ev.Passed) / float64(ev.Total)
	}
	threshold := e.cfg.Reward.SuccessThreshold
	if threshold <= 0 {
		threshold = 1
	}
	ev.Success = ev.Reward >= threshold-1e-9
	return ev, nil
}

// hiddenIni returns the path of a pytest.ini among the hidden files, if any.
func (e *TaskEnv) hiddenIni() string {
	for _, f := range e.hidden {
		if path.Base(f.Path) == "pytest.ini" {
			return f.Path
		}
	}
	return ""
}

// testEnv is the environment of a test command: pytest writes JUnit XML to
// junitPath and a full summary, takes its settings from iniPath (not from
// ini files the agent may have written), loads no user site-packages,
// writes no cache, and collects conftest files only inside the hidden test
// directory. Python does not put the working directory first on sys.path
// (PYTHONSAFEPATH), so a pytest.py or sitecustomize.py the agent wrote
// cannot stand in for the real ones; pytest adds the working directory
// itself once it runs (its pythonpath setting), so the tests still import
// the agent's modules.
func (e *TaskEnv) testEnv(junitPath, iniPath string, hiddenIni bool) []string {
	opts := []string{"--junitxml=" + junitPath, "-rA", "-p", "no:cacheprovider",
		"-c", iniPath, "--rootdir=" + e.cfg.WorkingDirectory}
	if !hiddenIni {
		opts = append(opts, "-o", "pythonpath="+e.cfg.WorkingDirectory)
	}
	if len(e.hiddenRoots) == 1 {
		opts = append(opts, "--confcutdir="+e.hiddenRoots[0])
	}
	if prev := e.cfg.EnvironmentVariables["PYTEST_ADDOPTS"]; prev != "" {
		opts = append([]string{prev}, opts...)
	}
	return []string{
		"PYTEST_ADDOPTS=" + strings.Join(opts, " "),
		"PYTHONNOUSERSITE=1",
		"PYTHONSAFEPATH=1",
		"PYTHONDONTWRITEBYTECODE=1",
	}
}

// parseResults finds per-test results: JUnit XML first, then, when
// textOK, pytest's -rA summary in the output. Output is not trusted for a
// pytest command: the code under test can print anything. No cases and no
// error means none were found.
func (e *TaskEnv) parseResults(ctx context.Context, sb sandbox.Sandbox, junitPath string, r sandbox.ExecResult, textOK bool) ([]gym.TestCase, string, error) {
	data, err := sb.ReadFile(ctx, junitPath, junitLimit)
	switch {
	case err == nil:
		cases, perr := testresult.ParseJUnit(data)
		if perr == nil && len(cases) > 0 {
			return cases, "junit", nil
		}
		if perr != nil {
			e.log.Warn("junit report unreadable; falling back to output", "err", perr)
		}
	case errors.Is(err, sandbox.ErrNotExist), errors.Is(err, sandbox.ErrTooLarge), errors.Is(err, sandbox.ErrIsDir):
	default:
		return nil, "", fmt.Errorf("read test report: %w", err)
	}
	if !textOK {
		return nil, "", nil
	}
	if cases := testresult.ParsePytest(string(r.Stdout) + "\n" + string(r.Stderr)); len(cases) > 0 {
		return cases, "pytest", nil
	}
	return nil, "", nil
}

// formatExec renders a command's result for the agent: exit status, then
// stdout and stderr, each with a marker where the middle was cut.
func formatExec(r sandbox.ExecResult, maxOutput int) string {
	var b strings.Builder
	if r.Signal != "" && r.ExitCode < 0 {
		fmt.Fprintf(&b, "Exit code: -1 (killed by %s)\n", r.Signal)
	} else {
		fmt.Fprintf(&b, "Exit code: %d\n", r.ExitCode)
	}
	writeStream(&b, "stdout", r.Stdout, r.StdoutDropped, maxOutput)
	writeStream(&b, "stderr", r.Stderr, r.StderrDropped, maxOutput)
	return strings.TrimRight(b.String(), "\n")
}

func writeStream(b *strings.Builder, name string, data []byte, dropped int64, maxOutput int) {
	if len(data) == 0 && dropped == 0 {
		return
	}
	fmt.Fprintf(b, "%s:\n", name)
	if dropped > 0 {
		// The executor keeps the first and last halves of the cap.
		if maxOutput <= 0 {
			maxOutput = len(data)
		}
		head := min(maxOutput/2, len(data))
		b.Write(data[:head])
		fmt.Fprintf(b, "\n[... %d bytes omitted ...]\n", dropped)
		b.Write(data[head:])
	} else {
		b.Write(data)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		b.WriteByte('\n')
	}
}

// capMiddle keeps the first and last halves of s within max bytes and
// reports how many bytes were cut; max <= 0 keeps everything.
func capMiddle(s string, max int) (string, int) {
	if max <= 0 || len(s) <= max {
		return s, 0
	}
	head, tail := max/2, max-max/2
	dropped := len(s) - head - tail
	return s[:head] + fmt.Sprintf("\n[... %d bytes omitted ...]\n", dropped) + s[len(s)-tail:], dropped
}
