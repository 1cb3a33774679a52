package view

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gymserver/gymserver/policy/rollout"
)

// plot is an SVG chart laid out in Go; the template draws it, so every
// label is escaped like the rest of the page.
type plot struct {
	Width, Height int
	Bars          []bar
	Labels        []label
	// Empty is true when there is nothing to draw.
	Empty bool
}

// bar is one rectangle; Title is its tooltip.
type bar struct {
	X, Y, W, H string
	Title      string
	// Class is an extra CSS class (a colour).
	Class string
}

// label is one piece of text; Anchor is its text-anchor.
type label struct {
	X, Y   string
	Text   string
	Anchor string
}

func f1(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// histogram bins rewards (in [0, 1]; others are clamped) into n equal bins
// and draws their counts as vertical bars.
func histogram(rewards []float64, n int) plot {
	counts := make([]int, n)
	for _, r := range rewards {
		i := int(r * float64(n))
		i = min(max(i, 0), n-1)
		counts[i]++
	}
	titles := make([]string, n)
	ticks := map[int]string{}
	for i := range counts {
		titles[i] = fmt.Sprintf("reward %.2f–%.2f: %d episodes", float64(i)/float64(n), float64(i+1)/float64(n), counts[i])
	}
	for i := 0; i <= n; i += max(n/5, 1) {
		ticks[i] = strconv.FormatFloat(float64(i)/float64(n), 'f', 1, 64)
	}
	p := columns(counts, titles, ticks)
	p.Empty = len(rewards) == 0
	return p
}

// columns draws counts as vertical bars with their counts above them;
// ticks label the bar edges: ticks[i] is drawn at the left edge of bar i
// (i == len(counts): the right edge of the last).
func columns(counts []int, titles []string, ticks map[int]string) plot {
	const w, h, left, bottom, top = 600, 220, 40, 30, 20
	p := plot{Width: w, Height: h}
	most := 1
	for _, c := range counts {
		most = max(most, c)
	}
	n := max(len(counts), 1)
	// Room on the right for the last tick's label.
	bw := float64(w-left-30) / float64(n)
	ph := float64(h - bottom - top)
	for i, c := range counts {
		bh := ph * float64(c) / float64(most)
		x := float64(left) + float64(i)*bw
		p.Bars = append(p.Bars, bar{X: f1(x + 1), Y: f1(float64(top) + ph - bh), W: f1(bw - 2), H: f1(bh), Title: titles[i]})
		if c > 0 {
			p.Labels = append(p.Labels, label{X: f1(x + bw/2), Y: f1(float64(top) + ph - bh - 4), Text: strconv.Itoa(c), Anchor: "middle"})
		}
	}
	for i := 0; i <= len(counts); i++ {
		if t, ok := ticks[i]; ok {
			p.Labels = append(p.Labels, label{X: f1(float64(left) + float64(i)*bw), Y: f1(float64(h - bottom + 16)), Text: t, Anchor: "middle"})
		}
	}
	p.Labels = append(p.Labels, label{X: f1(float64(left - 6)), Y: f1(float64(top + 4)), Text: strconv.Itoa(most), Anchor: "end"})
	return p
}

// latencyBounds are the upper bounds of the step-latency bins, in
// seconds; one more bin holds the longer steps.
var latencyBounds = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 300}

// latencyHistogram bins the durations of tool calls (seconds) by
// latencyBounds, from the first bin used to the last one used.
func latencyHistogram(secs []float64) plot {
	counts := make([]int, len(latencyBounds)+1)
	for _, s := range secs {
		i, _ := slices.BinarySearch(latencyBounds, s)
		counts[i]++
	}
	lo, hi := len(counts), -1
	for i, c := range counts {
		if c > 0 {
			lo, hi = min(lo, i), max(hi, i)
		}
	}
	if hi < 0 {
		return plot{Empty: true}
	}
	// At least six bins, so a run of equal steps still reads as a
	// distribution.
	hi = min(max(hi, lo+5), len(counts)-1)
	lo = max(min(lo, hi-5), 0)
	edge := func(i int) string {
		if i == 0 {
			return "0"
		}
		if i > len(latencyBounds) {
			return "∞"
		}
		return durLabel(latencyBounds[i-1])
	}
	var titles []string
	ticks := map[int]string{}
	for i := lo; i <= hi; i++ {
		titles = append(titles, fmt.Sprintf("%s–%s: %d tool calls", edge(i), edge(i+1), counts[i]))
		ticks[i-lo] = edge(i)
	}
	ticks[hi-lo+1] = edge(hi + 1)
	return columns(counts[lo:hi+1], titles, ticks)
}

// durLabel is a short label of a duration in seconds.
func durLabel(s float64) string {
	switch {
	case s < 1:
		return strconv.FormatFloat(s*1000, 'f', -1, 64) + "ms"
	case s < 60:
		return strconv.FormatFloat(s, 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(s/60, 'f', -1, 64) + "min"
}

// The parts of an episode's time, in the order of timeParts.
const (
	partReset = iota
	partPolicy
	partTools
	partEval
	partOther
	nParts
)

// timeParts names the parts of an episode's time; the page's legend and
// the bars' classes use them.
var timeParts = [nParts]string{"reset", "policy", "tools", "evaluation", "other"}

// breakdown is an episode's time split into timeParts, in seconds.
type breakdown [nParts]float64

// timeRow is one labelled bar of a time breakdown.
type timeRow struct {
	Label string
	Parts breakdown
}

// timeBars draws each row as a horizontal bar of its parts, to one scale.
func timeBars(rows []timeRow) plot {
	const w, row, labelW, barW = 760, 18, 200, 440
	p := plot{Width: w, Height: row*len(rows) + 10, Empty: len(rows) == 0}
	most := 0.0
	for _, r := range rows {
		total := 0.0
		for _, v := range r.Parts {
			total += v
		}
		most = max(most, total)
	}
	if most == 0 {
		most = 1
	}
	for i, r := range rows {
		y := float64(5 + i*row)
		x, total := float64(labelW), 0.0
		for k, v := range r.Parts {
			total += v
			if v <= 0 {
				continue
			}
			bw := barW * v / most
			p.Bars = append(p.Bars, bar{X: f1(x), Y: f1(y + 3), W: f1(max(bw, 0.5)), H: f1(row - 6), Class: "part-" + timeParts[k],
				Title: fmt.Sprintf("%s: %s %s", r.Label, timeParts[k], secsLabel(v))})
			x += bw
		}
		name := r.Label
		if rs := []rune(name); len(rs) > 32 {
			name = "…" + string(rs[len(rs)-31:])
		}
		p.Labels = append(p.Labels,
			label{X: f1(labelW - 6), Y: f1(y + 13), Text: name, Anchor: "end"},
			label{X: f1(x + 6), Y: f1(y + 13), Text: secsLabel(total), Anchor: "start"})
	}
	return p
}

// secsLabel formats seconds with millisecond precision below 10s.
func secsLabel(f float64) string {
	prec := 1
	if f < 10 {
		prec = 3
	}
	return strconv.FormatFloat(f, 'f', prec, 64) + "s"
}

// taskSuccess draws each task's success rate (over scored episodes) as a
// horizontal bar.
func taskSuccess(tasks []rollout.TaskStats) plot {
	const w, row, labelW, barW = 700, 20, 260, 360
	p := plot{Width: w, Height: row*len(tasks) + 10, Empty: len(tasks) == 0}
	for i, t := range tasks {
		y := float64(5 + i*row)
		name := t.EnvironmentID + "/" + t.TaskID
		if r := []rune(name); len(r) > 40 {
			name = "…" + string(r[len(r)-39:])
		}
		p.Bars = append(p.Bars, bar{
			X: f1(labelW), Y: f1(y + 3), W: f1(max(barW*t.SuccessRate, 1)), H: f1(row - 6),
			Title: fmt.Sprintf("%s/%s: %d of %d scored episodes succeeded", t.EnvironmentID, t.TaskID, t.Successes, t.Scored),
		})
		p.Labels = append(p.Labels,
			label{X: f1(labelW - 6), Y: f1(y + 14), Text: name, Anchor: "end"},
			label{X: f1(labelW + barW + 6), Y: f1(y + 14), Text: fmt.Sprintf("%.0f%% (%d/%d)", 100*t.SuccessRate, t.Successes, t.Scored), Anchor: "start"})
	}
	return p
}
