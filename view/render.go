package view

import (
	"bytes"
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/rollout"
)

//go:embed report.html.tmpl
var reportHTML string

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct":   func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
	"num":   func(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) },
	"secs":  secs,
	"dur":   func(d gym.Duration) string { return secs(d.Seconds()) },
	"pjson": prettyJSON,
}).Parse(reportHTML))

// Write renders run as one self-contained HTML page to w.
func Write(w io.Writer, run *Run) error {
	var buf bytes.Buffer
	if err := reportTmpl.Execute(&buf, pageOf(run)); err != nil {
		return fmt.Errorf("render report: %w", err)
	}
	_, err := buf.WriteTo(w)
	return err
}

// page is the template's data.
type page struct {
	Title         string
	Run           rollout.RunInfo
	Overall       rollout.Aggregate
	StatsComputed bool
	Envs          []envRow
	Tasks         []rollout.TaskStats
	Reasons       []string
	TaskKeys      []string
	Episodes      []episode
	Histogram     plot
	TaskSuccess   plot
}

type envRow struct {
	ID string
	rollout.Aggregate
}

// episode is one record with what the page shows of its trajectory.
type episode struct {
	N        int
	Rec      rollout.Record
	TaskKey  string
	Traj     *gym.Trajectory
	TrajErr  string
	Turns    []turn
	StepSecs float64
	EvalSecs float64
	Plugins  string
}

// turn is one message of the transcript; a tool message carries the step
// that produced it, when found.
type turn struct {
	Role    string
	Name    string
	Content string
	Calls   []call
	Step    *gym.TrajectoryStep
}

type call struct {
	ID, Name, Args string
	Original       *gym.ToolCall
}

func pageOf(run *Run) page {
	s := run.Stats
	p := page{
		Title:         filepath.Base(run.Source),
		Run:           s.Run,
		Overall:       s.Overall,
		StatsComputed: run.StatsComputed,
	}
	for _, id := range slices.Sorted(maps.Keys(s.Environments)) {
		p.Envs = append(p.Envs, envRow{ID: id, Aggregate: s.Environments[id]})
	}
	for _, k := range slices.Sorted(maps.Keys(s.Tasks)) {
		p.Tasks = append(p.Tasks, s.Tasks[k])
	}
	reasons, tasks := map[string]bool{}, map[string]bool{}
	var rewards []float64
	for i, rec := range run.Records {
		ep := episode{N: i, Rec: rec, TaskKey: rec.EnvironmentID + "/" + cmp.Or(rec.TaskID, rec.EnvironmentID), TrajErr: run.TrajectoryErrors[i]}
		if i < len(run.Trajectories) && run.Trajectories[i] != nil {
			ep.fill(run.Trajectories[i])
		}
		reasons[string(rec.EpisodeResult.TerminatedReason)] = true
		tasks[ep.TaskKey] = true
		if !rec.EpisodeResult.Mask {
			rewards = append(rewards, rec.EpisodeResult.FinalScore)
		}
		p.Episodes = append(p.Episodes, ep)
	}
	p.Reasons = slices.Sorted(maps.Keys(reasons))
	p.TaskKeys = slices.Sorted(maps.Keys(tasks))
	p.Histogram = histogram(rewards, 10)
	p.TaskSuccess = taskSuccess(p.Tasks)
	return p
}

// fill sets the transcript, evaluation and timing of an episode from its
// trajectory.
func (ep *episode) fill(t *gym.Trajectory) {
	ep.Traj = t
	steps := map[string]*gym.TrajectoryStep{}
	for i := range t.Steps {
		st := &t.Steps[i]
		ep.StepSecs += st.Result.Duration.Seconds()
		if id := st.Action.ToolCall.ID; id != "" {
			steps[id] = st
		}
	}
	if t.Evaluation != nil {
		ep.EvalSecs = t.Evaluation.Duration.Seconds()
	}
	for _, m := range t.Messages {
		tu := turn{Role: m.Role, Name: m.Name, Content: m.Content}
		for _, c := range m.ToolCalls {
			cl := call{ID: c.ID, Name: c.Function.Name, Args: prettyJSON(c.Function.Arguments)}
			if st := steps[c.ID]; st != nil {
				cl.Original = st.Action.OriginalToolCall
			}
			tu.Calls = append(tu.Calls, cl)
		}
		if m.Role == "tool" {
			tu.Step = steps[m.ToolCallID]
		}
		ep.Turns = append(ep.Turns, tu)
	}
	if len(t.Plugins) > 0 {
		b, err := json.MarshalIndent(t.Plugins, "", "  ")
		if err == nil {
			ep.Plugins = string(b)
		}
	}
}

// secs formats seconds with millisecond precision below 10s.
func secs(f float64) string {
	prec := 1
	if f < 10 {
		prec = 3
	}
	return strconv.FormatFloat(f, 'f', prec, 64) + "s"
}

// prettyJSON indents s when it is a JSON value (tool arguments, plugin
// data, given as text), else returns it unchanged: the model's malformed
// arguments are shown as it wrote them.
func prettyJSON(s string) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(s), "", "  "); err != nil {
		return s
	}
	return buf.String()
}
