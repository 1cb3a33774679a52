package rollout

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows finished episodes, the success rate and the mean reward
// on a progress bar. Its methods are called with Runner.mu held.
type progress struct {
	bar                     *progressbar.ProgressBar
	done, scored, successes int
	rewards                 float64
}

func newProgress(w io.Writer, total int) *progress {
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
	return &progress{bar: bar}
}

// add counts one finished episode.
func (p *progress) add(rec Record) {
	p.done++
	if !rec.EpisodeResult.Mask {
		p.scored++
		p.rewards += rec.EpisodeResult.FinalScore
		if rec.EpisodeResult.Success {
			p.successes++
		}
	}
	_ = p.bar.Add(1)
	p.bar.Describe(fmt.Sprintf("success %d/%d (%.0f%%) mean reward %.3f", p.successes, p.scored,
		100*div(float64(p.successes), p.scored), div(p.rewards, p.scored)))
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
// and one for the whole run.
func WriteSummary(w io.Writer, s *Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ENVIRONMENT\tEPISODES\tSCORED\tSUCCESS\tRATE\tMEAN REWARD\tTEST PASS\tACTION ERR\tPOLICY ERR\tMASKED\tMEAN TIME\t")
	line := func(name string, a Aggregate) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f%%\t%.3f\t%.1f%%\t%.1f%%\t%d\t%d\t%s\t\n", name, a.Episodes, a.Scored, a.Successes,
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
	for _, name := range slices.Sorted(maps.Keys(s.Stats.Plugins)) {
		if ps := s.Stats.Plugins[name]; ps.Failures > 0 {
			fmt.Fprintf(w, "plugin %s: %d of %d calls failed; last error: %s\n", name, ps.Failures, ps.Calls, ps.LastError)
		}
	}
	return nil
}
