package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sync/errgroup"

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

// validateEnv is one environment's line of the report. With --solve it
// holds a line per task checked; the rewards at the top are the task's
// when the environment has one task (the seed's shape), else the lowest
// solved and the highest unsolved reward over its tasks.
type validateEnv struct {
	ID             string         `json:"id"`
	TaskCount      int            `json:"task_count"`
	SolvedReward   *float64       `json:"solved_reward,omitempty"`
	UnsolvedReward *float64       `json:"unsolved_reward,omitempty"`
	TestsTotal     int            `json:"tests_total"`
	TestsPassed    int            `json:"tests_passed,omitempty"`
	Tasks          []validateTask `json:"tasks,omitempty"`
	OK             bool           `json:"ok"`
	Error          string         `json:"error,omitempty"`
}

// validateTask is one task's result with --solve.
type validateTask struct {
	ID             string   `json:"id"`
	SolvedReward   *float64 `json:"solved_reward,omitempty"`
	UnsolvedReward *float64 `json:"unsolved_reward,omitempty"`
	TestsTotal     int      `json:"tests_total"`
	TestsPassed    int      `json:"tests_passed,omitempty"`
	Seconds        float64  `json:"seconds"`
	OK             bool     `json:"ok"`
	Error          string   `json:"error,omitempty"`
	// Output is the end of the test output of the episode that went
	// wrong, so a failing task can be fixed without a rerun.
	Output string `json:"output,omitempty"`
}

// failOutputLimit bounds the test output printed for a failing task.
const failOutputLimit = 4000

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	solve := fs.Bool("solve", false, "run the reference solution and an empty episode per task and check their rewards (needs Docker)")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
	parallel := fs.Int("parallel", runtime.NumCPU(), "tasks checked at once with --solve")
	filter := fs.String("tasks", "", "with --solve, check only the tasks whose ENV/TASK id matches this regular expression")
	quiet := fs.Bool("quiet", false, "no progress bar")
	logLevel := fs.String("log-level", "WARN", "log level: DEBUG, INFO, WARN (or WARNING), ERROR, CRITICAL")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver validate CONFIG.json [--solve [--parallel N] [--tasks REGEXP]] [--json]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, reorderArgs(fs, args), stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if *parallel < 1 {
		fmt.Fprintln(stderr, "gymserver validate: --parallel must be at least 1")
		return 2
	}
	var match *regexp.Regexp
	if *filter != "" {
		var err error
		if match, err = regexp.Compile(*filter); err != nil {
			fmt.Fprintf(stderr, "gymserver validate: --tasks: %v\n", err)
			return 2
		}
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
			report.Environments = append(report.Environments, validateEnv{ID: ec.ID, TaskCount: len(ec.Tasks), OK: true})
		}
	} else {
		reg, closeFn, err := configRegistry(ctx, cfg, logger, loadOptions{})
		if err != nil {
			fmt.Fprintf(stderr, "gymserver validate: %v\n", err)
			return 1
		}
		defer closeFn(context.WithoutCancel(ctx))
		report.Environments = solveAll(ctx, reg, cfg, solveOptions{
			parallel: *parallel, match: match, progress: !*quiet && !*asJSON, stderr: stderr, logger: logger,
		})
		if len(report.Environments) == 0 {
			fmt.Fprintf(stderr, "gymserver validate: --tasks %q matches no task\n", *filter)
			return 1
		}
		for _, l := range report.Environments {
			ok = ok && l.OK
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
		printValidate(stdout, stderr, report, *solve)
	}
	if !ok {
		return 1
	}
	return 0
}

// printValidate prints the report as tables: one line per environment,
// then, with --solve, one per task of environments with several tasks,
// then the test output of every failing task.
func printValidate(stdout, stderr io.Writer, report validateReport, solve bool) {
	for _, w := range report.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if solve {
		fmt.Fprintln(tw, "ENVIRONMENT\tTASKS\tSOLVED\tUNSOLVED\tTESTS\tRESULT")
	} else {
		fmt.Fprintln(tw, "ENVIRONMENT\tTASKS\tRESULT")
	}
	for _, l := range report.Environments {
		verdict := "ok"
		if !l.OK {
			verdict = "FAIL: " + l.Error
		}
		if solve {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", l.ID, len(l.Tasks), fmtReward(l.SolvedReward), fmtReward(l.UnsolvedReward), l.TestsTotal, verdict)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", l.ID, l.TaskCount, verdict)
		}
	}
	tw.Flush()
	if !solve {
		return
	}
	for _, l := range report.Environments {
		if len(l.Tasks) < 2 {
			continue
		}
		fmt.Fprintf(stdout, "\n%s:\n", l.ID)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tSOLVED\tUNSOLVED\tTESTS\tSECONDS\tRESULT")
		for _, t := range l.Tasks {
			verdict := "ok"
			if !t.OK {
				verdict = "FAIL: " + t.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%s\n", t.ID, fmtReward(t.SolvedReward), fmtReward(t.UnsolvedReward), t.TestsTotal, t.Seconds, verdict)
		}
		tw.Flush()
	}
	for _, l := range report.Environments {
		for _, t := range l.Tasks {
			if !t.OK && t.Output != "" {
				fmt.Fprintf(stdout, "\n--- %s/%s: test output ---\n%s\n", l.ID, t.ID, t.Output)
			}
		}
	}
}

// solveOptions are validate --solve's settings.
type solveOptions struct {
	parallel int
	match    *regexp.Regexp
	progress bool
	stderr   io.Writer
	logger   *slog.Logger
}

// solveAll checks every selected task of every environment, opts.parallel
// at a time, and returns a line per environment with a selected task.
func solveAll(ctx context.Context, reg *gym.Registry, cfg *config.Config, opts solveOptions) []validateEnv {
	type job struct {
		env  int
		task config.Task
		slot *validateTask
	}
	lines := make([]validateEnv, len(cfg.Environments))
	var jobs []job
	for i, ec := range cfg.Environments {
		lines[i] = validateEnv{ID: ec.ID, TaskCount: len(ec.Tasks)}
		for _, t := range ec.Tasks {
			if opts.match == nil || opts.match.MatchString(ec.ID+"/"+t.ID) {
				lines[i].Tasks = append(lines[i].Tasks, validateTask{ID: t.ID})
			}
		}
		for j := range lines[i].Tasks {
			t, _ := ec.Task(lines[i].Tasks[j].ID)
			jobs = append(jobs, job{env: i, task: t, slot: &lines[i].Tasks[j]})
		}
	}
	var bar *progressbar.ProgressBar
	if opts.progress && len(jobs) > 1 {
		bar = progressbar.NewOptions(len(jobs), progressbar.OptionSetWriter(opts.stderr),
			progressbar.OptionSetDescription("tasks"), progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish())
	}
	var g errgroup.Group
	g.SetLimit(opts.parallel)
	for _, j := range jobs {
		g.Go(func() error {
			env, err := reg.Lookup(cfg.Environments[j.env].ID)
			if err != nil {
				j.slot.Error = err.Error()
			} else {
				*j.slot = solveTask(ctx, env, j.task, opts.logger)
			}
			if bar != nil {
				_ = bar.Add(1)
			}
			return nil
		})
	}
	_ = g.Wait()
	if bar != nil {
		_ = bar.Finish()
	}
	out := lines[:0]
	for _, l := range lines {
		if len(l.Tasks) == 0 {
			continue
		}
		summarise(&l)
		out = append(out, l)
	}
	return out
}

// summarise fills an environment's line from its tasks' lines.
func summarise(l *validateEnv) {
	l.OK = true
	var failed []string
	for _, t := range l.Tasks {
		if l.SolvedReward == nil || (t.SolvedReward != nil && *t.SolvedReward < *l.SolvedReward) {
			l.SolvedReward = t.SolvedReward
		}
		if l.UnsolvedReward == nil || (t.UnsolvedReward != nil && *t.UnsolvedReward > *l.UnsolvedReward) {
			l.UnsolvedReward = t.UnsolvedReward
		}
		l.TestsTotal += t.TestsTotal
		l.TestsPassed += t.TestsPassed
		if !t.OK {
			l.OK = false
			failed = append(failed, t.ID)
		}
	}
	switch {
	case len(l.Tasks) == 1 && !l.OK:
		l.Error = l.Tasks[0].Error
	case !l.OK:
		l.Error = fmt.Sprintf("%d of %d tasks failed: %s", len(failed), len(l.Tasks), strings.Join(failed, ", "))
	}
}

// solveTask runs the reference episode and the do-nothing episode of one
// task and checks that they score 1.0 and below 1.0.
func solveTask(ctx context.Context, env gym.Env, t config.Task, logger *slog.Logger) (line validateTask) {
	start := time.Now()
	line.ID = t.ID
	defer func() { line.Seconds = time.Since(start).Seconds() }()
	calls, err := envs.ReferenceCalls(t)
	if err != nil {
		line.Error = err.Error()
		return line
	}
	solved, err := runCalls(ctx, env, t.ID, calls)
	if err != nil {
		line.Error = "reference episode: " + err.Error()
		return line
	}
	line.SolvedReward = &solved.Reward
	line.TestsTotal = solved.Total
	line.TestsPassed = solved.Passed
	unsolved, err := runCalls(ctx, env, t.ID, []gym.ToolCall{gym.NewToolCall("noop_0", gym.ToolMarkDone, `{}`)})
	if err != nil {
		line.Error = "empty episode: " + err.Error()
		return line
	}
	line.UnsolvedReward = &unsolved.Reward
	var problems []error
	if solved.ErrorClass != "" {
		problems = append(problems, fmt.Errorf("reference episode: %s: %s", solved.ErrorClass, solved.Error))
		line.Output = testOutput(solved)
	} else if solved.Reward < 1 {
		problems = append(problems, fmt.Errorf("reference solution scores %.3f, not 1.0 (%d/%d tests)", solved.Reward, solved.Passed, solved.Total))
		line.Output = testOutput(solved)
	}
	if unsolved.ErrorClass != "" {
		problems = append(problems, fmt.Errorf("empty episode: %s: %s", unsolved.ErrorClass, unsolved.Error))
		line.Output += testOutput(unsolved)
	} else if unsolved.Reward >= 1 {
		problems = append(problems, errors.New("doing nothing already scores 1.0: the tests do not check the task"))
		line.Output += testOutput(unsolved)
	}
	if err := errors.Join(problems...); err != nil {
		line.Error = strings.ReplaceAll(err.Error(), "\n", "; ")
		return line
	}
	logger.Info("task validated", "task", t.ID, "solved_reward", solved.Reward, "unsolved_reward", unsolved.Reward)
	line.OK = true
	return line
}

// testOutput returns the end of an evaluation's test output.
func testOutput(ev gym.Evaluation) string {
	var b strings.Builder
	for _, c := range ev.Commands {
		fmt.Fprintf(&b, "$ %s  (exit %d)\n%s\n", c.Command, c.ExitCode, c.Output)
	}
	out := b.String()
	if len(out) > failOutputLimit {
		out = "..." + out[len(out)-failOutputLimit:]
	}
	return out
}

// runCalls runs one episode that makes calls one per step, then evaluates
// it and closes it.
func runCalls(ctx context.Context, env gym.Env, task string, calls []gym.ToolCall) (gym.Evaluation, error) {
	sess, _, err := env.Reset(ctx, gym.ResetRequest{Task: task})
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
