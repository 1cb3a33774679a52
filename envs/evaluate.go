package envs

import (
	"context"
	"errors"
	"fmt"
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
// unit_tests commands (each after starting the environment's services
// afresh) and scores the test cases. Infrastructure failures
// come back as an evaluation with an error class and the mask hint, not as
// an error; an error is returned only when ctx ends.
func (t *task) evaluate(ctx context.Context, sb sandbox.Sandbox) (gym.Evaluation, error) {
	if t.src.HarborTask != nil {
		return t.evaluateHarbor(ctx, sb)
	}
	start := time.Now()
	ev := gym.Evaluation{Mode: t.cfg.Reward.Mode, Tests: []gym.TestCase{}, Commands: []gym.TestCommand{}}
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
	// tampered ends the evaluation with reward 0, unmasked: the code under
	// test lied about its results.
	tampered := func(err error) (gym.Evaluation, error) {
		ev, rerr := fail(gym.ClassAgent, fmt.Errorf("tampered: %w", err))
		ev.Tampered = true
		ev.Mask = false
		t.log.Warn("test run tampered with", "err", err)
		return ev, rerr
	}

	if err := sb.KillAll(ctx); err != nil {
		return fail(gym.ClassSandbox, fmt.Errorf("stop agent processes: %w", err))
	}
	run := t.newTestRun()
	for _, p := range run.clear {
		if err := sb.Remove(ctx, p); err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("clear %s: %w", p, err))
		}
	}
	if err := sb.CopyIn(ctx, append(append([]sandbox.File(nil), t.hidden...), run.files...)); err != nil {
		return fail(gym.ClassSandbox, fmt.Errorf("install hidden tests: %w", err))
	}

	for i, cmd := range t.cfg.UnitTests {
		pytest := strings.Contains(cmd, "pytest")
		notes, err := t.startServices(ctx, sb)
		if err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("before test command %d: %w", i, err))
		}
		r, err := sb.Exec(ctx, sandbox.ExecRequest{
			Argv:      []string{"/bin/sh", "-c", cmd},
			Dir:       t.cfg.WorkingDirectory,
			Env:       run.env(t.cfg, pytest),
			Timeout:   t.cfg.Timeouts.Test,
			MaxOutput: testOutputLimit,
			Report:    pytest,
			ReportMax: junitLimit,
			Zygote:    pytest && t.useZygote(),
		})
		if err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("run test command %d (%s): %w", i, cmd, err))
		}
		if r.ZygoteMiss != "" {
			t.log.Debug("test command ran without the verifier zygote", "command", i, "reason", r.ZygoteMiss)
		}
		tc := gym.TestCommand{
			Command:  cmd,
			ExitCode: r.ExitCode,
			Output:   notes + formatExec(r, testOutputLimit),
			Duration: gym.Duration(r.Duration),
			TimedOut: r.TimedOut,
			Success:  r.ExitCode == 0 && !r.TimedOut,
		}
		// Nothing the tests or the services started may outlive them.
		if err := sb.KillAll(ctx); err != nil {
			return fail(gym.ClassSandbox, fmt.Errorf("stop processes after test command %d: %w", i, err))
		}
		var cases []gym.TestCase
		if pytest {
			v := run.verdict(r, t.cfg.Timeouts.Test)
			ev.Commands = append(ev.Commands, tc)
			switch {
			case v.tampered != "":
				return tampered(fmt.Errorf("test command %d (%s): %s", i, cmd, v.tampered))
			case v.verifierErr != nil:
				return fail(gym.ClassVerifier, fmt.Errorf("test command %d (%s): %w", i, cmd, v.verifierErr))
			}
			// pytest exits 1 for the canaries' failures: the command
			// succeeded when every hidden test passed.
			ev.Commands[len(ev.Commands)-1].Source = v.source
			ev.Commands[len(ev.Commands)-1].Success = v.allPassed()
			cases = v.cases
		} else {
			// Output and files are the code under test's to write; only
			// the exit status of the command itself is trusted.
			tc.Source = "exit_code"
			ev.Commands = append(ev.Commands, tc)
			cases = []gym.TestCase{exitCase(cmd, r, t.cfg.Timeouts.Test)}
		}
		for j := range cases {
			cases[j].Command = i
		}
		ev.Tests = append(ev.Tests, cases...)
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
	threshold := t.cfg.Reward.SuccessThreshold
	if threshold <= 0 {
		threshold = 1
	}
	ev.Success = ev.Reward >= threshold-1e-9
	return ev, nil
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
