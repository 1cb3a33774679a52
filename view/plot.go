package view

import (
	"fmt"
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
	const w, h, left, bottom, top = 600, 220, 40, 30, 20
	p := plot{Width: w, Height: h, Empty: len(rewards) == 0}
	counts := make([]int, n)
	for _, r := range rewards {
		i := int(r * float64(n))
		i = min(max(i, 0), n-1)
		counts[i]++
	}
	most := 1
	for _, c := range counts {
		most = max(most, c)
	}
	bw := float64(w-left-10) / float64(n)
	ph := float64(h - bottom - top)
	for i, c := range counts {
		bh := ph * float64(c) / float64(most)
		x := float64(left) + float64(i)*bw
		lo, hi := float64(i)/float64(n), float64(i+1)/float64(n)
		p.Bars = append(p.Bars, bar{
			X: f1(x + 1), Y: f1(float64(top) + ph - bh), W: f1(bw - 2), H: f1(bh),
			Title: fmt.Sprintf("reward %.2f–%.2f: %d episodes", lo, hi, c),
		})
		if c > 0 {
			p.Labels = append(p.Labels, label{X: f1(x + bw/2), Y: f1(float64(top) + ph - bh - 4), Text: strconv.Itoa(c), Anchor: "middle"})
		}
	}
	for i := 0; i <= n; i += max(n/5, 1) {
		p.Labels = append(p.Labels, label{X: f1(float64(left) + float64(i)*bw), Y: f1(float64(h - bottom + 16)), Text: strconv.FormatFloat(float64(i)/float64(n), 'f', 1, 64), Anchor: "middle"})
	}
	p.Labels = append(p.Labels, label{X: f1(float64(left - 6)), Y: f1(float64(top + 4)), Text: strconv.Itoa(most), Anchor: "end"})
	return p
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
