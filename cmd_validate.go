package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/gymserver/gymserver/policy/plugin"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// validateReport is what `validate --json` prints.
type validateReport struct {
	Environments []validateEnv `json:"environments"`
	Warnings     []string      `json:"warnings,omitempty"`
}

// validateEnv is one environment's line of the report; the rewards are set
// with --solve only.
type validateEnv struct {
	ID             string   `json:"id"`
	SolvedReward   *float64 `json:"solved_reward,omitempty"`
	UnsolvedReward *float64 `json:"unsolved_reward,omitempty"`
	TestsTotal     int      `json:"tests_total"`
	TestsPassed    int      `json:"tests_passed,omitempty"`
	OK             bool     `json:"ok"`
	Error          string   `json:"error,omitempty"`
}

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	solve := fs.Bool("solve", false, "run the reference solution and an empty episode per environment and check their rewards (needs Docker)")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
	logLevel := fs.String("log-level", "WARN", "log level: DEBUG, INFO, WARN, ERROR")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gymserver validate CONFIG.json [--solve] [--json]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(reorderArgs(fs, args)); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "gymserver validate:", err)
		return 2
	}
	path := fs.Arg(0)
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(stderr, "gymserver validate: %v\n", err)
		return 1
	}
	// The plugins are checked as `rollout --dry-run` checks them: names,
	// settings, external commands. Nothing runs.
	if _, err := plugin.Load(cfg.Plugins, cfg.Dir, logger); err != nil {
		fmt.Fprintf(stderr, "gymserver validate: %v\n", err)
		return 1
	}
	report := validateReport{Warnings: cfg.Warnings}
	ok := true
	if !*solve {
		for _, ec := range cfg.Environments {
			report.Environments = append(report.Environments, validateEnv{ID: ec.ID, OK: true})
		}
	} else {
		reg, closeFn, err := loadRegistry(ctx, path, logger, loadOptions{})
		if err != nil {
			fmt.Fprintf(stderr, "gymserver validate: %v\n", err)
			return 1
		}
		defer closeFn(context.WithoutCancel(ctx))
		for _, ec := range cfg.Environments {
			line := solveEnv(ctx, reg, ec, logger)
			ok = ok && line.OK
			report.Environments = append(report.Environments, line)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			fmt.Fprintln(stderr, "gymserver validate:", err)
			return 1
		}
	} else {
		for _, w := range report.Warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		if *solve {
			fmt.Fprintln(tw, "ENVIRONMENT\tSOLVED\tUNSOLVED\tTESTS\tRESULT")
		} else {
			fmt.Fprintln(tw, "ENVIRONMENT\tRESULT")
		}
		for _, l := range report.Environments {
			verdict := "ok"
			if !l.OK {
				verdict = "FAIL: " + l.Error
			}
			if *solve {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", l.ID, fmtReward(l.SolvedReward), fmtReward(l.UnsolvedReward), l.TestsTotal, verdict)
			} else {
				fmt.Fprintf(tw, "%s\t%s\n", l.ID, verdict)
			}
		}
		tw.Flush()
	}
	if !ok {
		return 1
	}
	return 0
}

// solveEnv runs the reference episode and the do-nothing episode of one
// environment and checks that they score 1.0 and below 1.0.
func solveEnv(ctx context.Context, reg *gym.Registry, ec config.Environment, logger *slog.Logger) validateEnv {
	line := validateEnv{ID: ec.ID}
	env, err := reg.Lookup(ec.ID)
	if err != nil {
		line.Error = err.Error()
		return line
	}
	calls, err := envs.ReferenceCalls(ec)
	if err != nil {
		line.Error = err.Error()
		return line
	}
	solved, err := runCalls(ctx, env, calls)
	if err != nil {
		line.Error = "reference episode: " + err.Error()
		return line
	}
	line.SolvedReward = &solved.Reward
	line.TestsTotal = solved.Total
	line.TestsPassed = solved.Passed
	unsolved, err := runCalls(ctx, env, []gym.ToolCall{gym.NewToolCall("noop_0", gym.ToolMarkDone, `{}`)})
	if err != nil {
		line.Error = "empty episode: " + err.Error()
		return line
	}
	line.UnsolvedReward = &unsolved.Reward
	var problems []error
	if solved.ErrorClass != "" {
		problems = append(problems, fmt.Errorf("reference episode: %s: %s", solved.ErrorClass, solved.Error))
	} else if solved.Reward < 1 {
		problems = append(problems, fmt.Errorf("reference solution scores %.3f, not 1.0 (%d/%d tests)", solved.Reward, solved.Passed, solved.Total))
	}
	if unsolved.ErrorClass != "" {
		problems = append(problems, fmt.Errorf("empty episode: %s: %s", unsolved.ErrorClass, unsolved.Error))
	} else if unsolved.Reward >= 1 {
		problems = append(problems, errors.New("doing nothing already scores 1.0: the tests do not check the task"))
	}
	if err := errors.Join(problems...); err != nil {
		line.Error = err.Error()
		return line
	}
	logger.Info("environment validated", "env", ec.ID, "solved_reward", solved.Reward, "unsolved_reward", unsolved.Reward)
	line.OK = true
	return line
}

// runCalls runs one episode that makes calls one per step, then evaluates
// it and closes it.
func runCalls(ctx context.Context, env gym.Env, calls []gym.ToolCall) (gym.Evaluation, error) {
	sess, _, err := env.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		return gym.Evaluation{}, err
	}
	defer sess.Close(context.WithoutCancel(ctx))
	for i, c := range calls {
		r, err := sess.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{c}})
		if err != nil {
			return gym.Evaluation{}, fmt.Errorf("step %d: %w", i+1, err)
		}
		for _, ci := range r.Info.Calls {
			if ci.ErrorClass != "" && ci.ErrorClass != gym.ClassAgent {
				return gym.Evaluation{}, fmt.Errorf("step %d (%s): %s: %s", i+1, ci.Name, ci.ErrorClass, ci.Error)
			}
		}
		if r.Done() {
			break
		}
	}
	return sess.Evaluate(ctx)
}

func fmtReward(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *r)
}

// reorderArgs moves flags before positional arguments so that
// "validate CONFIG --json" parses like "validate --json CONFIG". A flag of fs
// that takes a value keeps the argument after it unless written as -f=v.
func reorderArgs(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && i+1 < len(args) {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				continue
			}
			i++
			flags = append(flags, args[i])
		}
	}
	return append(flags, pos...)
}
