package rollout

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows finished episodes, the success rate and the mean reward
// on a progress bar, and for runs over many-task environments the tasks
// solved at least once. Its methods are called with Runner.mu held.
type progress struct {
	bar                     *progressbar.ProgressBar
	done, scored, successes int
	rewards                 float64
	// tasks is the number of tasks of the run, shown when showTasks;
	// solved holds the keys of those with a success.
	tasks     int
	showTasks bool
	solved    map[string]bool
}

func newProgress(w io.Writer, total, tasks int, showTasks bool) *progress {
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("episodes"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	return &progress{bar: bar, tasks: tasks, showTasks: showTasks, solved: map[string]bool{}}
}

// grow adds n episodes to the bar's total.
func (p *progress) grow(n int) {
	p.bar.ChangeMax(p.bar.GetMax() + n)
}

// add counts one finished episode of the task with the given key.
func (p *progress) add(rec Record, task string) {
	p.done++
	if !rec.EpisodeResult.Mask {
		p.scored++
		p.rewards += rec.EpisodeResult.FinalScore
		if rec.EpisodeResult.Success {
			p.successes++
			p.solved[task] = true
		}
	}
	_ = p.bar.Add(1)
	desc := fmt.Sprintf("success %d/%d (%.0f%%) mean reward %.3f", p.successes, p.scored,
		100*div(float64(p.successes), p.scored), div(p.rewards, p.scored))
	if p.showTasks {
		desc += fmt.Sprintf(", tasks solved %d/%d", len(p.solved), p.tasks)
	}
	p.bar.Describe(desc)
}

// finish completes the bar at the number of episodes that ran, which
// episode control may have made smaller than planned.
func (p *progress) finish() {
	if p.done < p.bar.GetMax() {
		p.bar.ChangeMax(p.done)
	}
	_ = p.bar.Finish()
}

// WriteSummary writes a table of the run's stats: one line per environment
// and one for the whole run. When an environment has several tasks, a
// column counts the tasks solved at least once, and tasks stopped early
// are counted by reason.
func WriteSummary(w io.Writer, s *Summary) error {
	many := false
	for _, id := range s.EnvIDs {
		many = many || s.Stats.Environments[id].Tasks > 1
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "ENVIRONMENT\t"
	if many {
		head += "TASKS SOLVED\t"
	}
	fmt.Fprintln(tw, head+"EPISODES\tSCORED\tSUCCESS\tRATE\tMEAN REWARD\tTEST PASS\tACTION ERR\tPOLICY ERR\tMASKED\tMEAN TIME\t")
	line := func(name string, a Aggregate) {
		fmt.Fprintf(tw, "%s\t", name)
		if many {
			fmt.Fprintf(tw, "%d/%d\t", a.TasksSolved, a.Tasks)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f%%\t%.3f\t%.1f%%\t%.1f%%\t%d\t%d\t%s\t\n", a.Episodes, a.Scored, a.Successes,
			100*a.SuccessRate, a.MeanReward, 100*a.TestPassRate, 100*a.ActionErrorRate, a.PolicyErrors, a.Masked,
			(time.Duration(a.MeanDuration * float64(time.Second))).Round(100*time.Millisecond))
	}
	for _, id := range s.EnvIDs {
		line(id, s.Stats.Environments[id])
	}
	line("TOTAL", s.Stats.Overall)
	if err := tw.Flush(); err != nil {
		return err
	}
	run := s.Stats.Run
	if run.Interrupted {
		fmt.Fprintf(w, "interrupted: %d running episode(s) were stopped and not recorded\n", run.Stopped)
	}
	if run.Resumed > 0 {
		fmt.Fprintf(w, "resumed: %d episode(s) read back from earlier trajectories\n", run.Resumed)
	}
	for _, env := range slices.Sorted(maps.Keys(run.StopReasons)) {
		name := env
		if env == "*" {
			name = "run"
		}
		fmt.Fprintf(w, "stopped early: %s: %s\n", name, run.StopReasons[env])
	}
	for _, id := range s.EnvIDs {
		if !many || s.Stats.Environments[id].Tasks < 2 {
			continue
		}
		reasons := map[string]int{}
		n := 0
		for _, ts := range s.Stats.Tasks {
			if ts.EnvironmentID == id && ts.StopReason != "" {
				reasons[ts.StopReason]++
				n++
			}
		}
		if n == 0 {
			continue
		}
		var parts []string
		for _, reason := range slices.Sorted(maps.Keys(reasons)) {
			parts = append(parts, fmt.Sprintf("%s %d", reason, reasons[reason]))
		}
		fmt.Fprintf(w, "tasks stopped early: %s: %d of %d (%s)\n", id, n, s.Stats.Environments[id].Tasks, strings.Join(parts, ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(s.Stats.Plugins)) {
		if ps := s.Stats.Plugins[name]; ps.Failures > 0 {
			fmt.Fprintf(w, "plugin %s: %d of %d calls failed; last error: %s\n", name, ps.Failures, ps.Calls, ps.LastError)
		}
	}
	return nil
}
