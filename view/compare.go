package view

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"

	"github.com/gymserver/gymserver/policy/rollout"
)

//go:embed compare.html.tmpl
var compareHTML string

var compareTmpl = template1("compare", compareHTML)

// WriteCompare renders two runs side by side as one self-contained HTML
// page to w: their stats, and every task of either run with its success
// rate and mean reward in each and the difference (B − A) where both ran
// it.
func WriteCompare(w io.Writer, a, b *Run) error {
	var buf bytes.Buffer
	if err := compareTmpl.Execute(&buf, compareOf(a, b)); err != nil {
		return fmt.Errorf("render comparison: %w", err)
	}
	_, err := buf.WriteTo(w)
	return err
}

// comparePage is the comparison template's data.
type comparePage struct {
	A, B  page
	Tasks []taskPair
	// Common counts the tasks both runs have.
	Common int
}

// taskPair is one task in the two runs; A or B is nil when that run does
// not have it. The deltas are B − A, set when Comparable.
type taskPair struct {
	Key        string
	A, B       *rollout.TaskStats
	DeltaRate  float64
	DeltaMean  float64
	Comparable bool
}

func compareOf(a, b *Run) comparePage {
	p := comparePage{A: pageOf(a), B: pageOf(b)}
	// The titles name the runs by their directories when the files have
	// the same name (results.json twice).
	if p.A.Title == p.B.Title {
		p.A.Title = filepath.Join(filepath.Base(filepath.Dir(a.Source)), p.A.Title)
		p.B.Title = filepath.Join(filepath.Base(filepath.Dir(b.Source)), p.B.Title)
	}
	keys := map[string]bool{}
	for k := range a.Stats.Tasks {
		keys[k] = true
	}
	for k := range b.Stats.Tasks {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		tp := taskPair{Key: k}
		if t, ok := a.Stats.Tasks[k]; ok {
			tp.A = &t
		}
		if t, ok := b.Stats.Tasks[k]; ok {
			tp.B = &t
		}
		if tp.A != nil && tp.B != nil {
			tp.Key = tp.A.EnvironmentID + "/" + tp.A.TaskID
			// The rates are over scored episodes: without any in a run,
			// there is nothing to compare.
			tp.Comparable = tp.A.Scored > 0 && tp.B.Scored > 0
			if tp.Comparable {
				tp.DeltaRate = tp.B.SuccessRate - tp.A.SuccessRate
				tp.DeltaMean = tp.B.MeanReward - tp.A.MeanReward
			}
			p.Common++
		} else if t := either(tp.A, tp.B); t != nil {
			tp.Key = t.EnvironmentID + "/" + t.TaskID
		}
		p.Tasks = append(p.Tasks, tp)
	}
	return p
}

// either returns a, or b when a is nil.
func either(a, b *rollout.TaskStats) *rollout.TaskStats {
	if a != nil {
		return a
	}
	return b
}
