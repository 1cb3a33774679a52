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
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/rollout"
)

//go:embed report.html.tmpl
var reportHTML string

var reportTmpl = template1("report", reportHTML)

// template1 parses a page's template with the functions the pages use and
// the shared definitions of report.html.tmpl ("plot", "agg").
func template1(name, text string) *template.Template {
	t := template.New(name).Funcs(template.FuncMap{
		"pct": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
		"num": func(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) },
		// signed shows a difference with its sign.
		"signed": func(f float64, pct bool) string {
			s := strconv.FormatFloat(f, 'f', 3, 64)
			if pct {
				s = strconv.FormatFloat(100*f, 'f', 1, 64) + " pts"
			}
			if f > 0 {
				s = "+" + s
			}
			return s
		},
		"secs":  secsLabel,
		"dur":   func(d gym.Duration) string { return secsLabel(d.Seconds()) },
		"pjson": prettyJSON,
		"cut":   cutHTML,
		"part":  func(b breakdown, k int) float64 { return b[k] },
	})
	if name != "report" {
		template.Must(t.New("shared").Parse(reportHTML))
	}
	return template.Must(t.New(name).Parse(text))
}

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
	// StepLatency bins the durations of every tool call of the run.
	StepLatency plot
	// Times draws each episode's time breakdown; MeanTime the mean over
	// the episodes with a trajectory, whose sum is TotalTime.
	Times     plot
	MeanTime  plot
	TotalTime breakdown
	Timed     int
	Parts     []string
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
	// Time is the breakdown of the episode's time, when it has a
	// trajectory.
	Time    breakdown
	Plugins string
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
			ep.Time = timeOf(run.Trajectories[i], rec.EpisodeResult.DurationSeconds)
		}
		reasons[string(rec.EpisodeResult.TerminatedReason)] = true
		tasks[ep.TaskKey] = true
		if !rec.EpisodeResult.Mask {
			rewards = append(rewards, rec.EpisodeResult.FinalScore)
		}
		p.Episodes = append(p.Episodes, ep)
	}
	p.timing()
	p.Reasons = slices.Sorted(maps.Keys(reasons))
	p.TaskKeys = slices.Sorted(maps.Keys(tasks))
	p.Histogram = histogram(rewards, 10)
	p.TaskSuccess = taskSuccess(p.Tasks)
	return p
}

// maxTimeRows bounds the episodes drawn in the time breakdown.
const maxTimeRows = 200

// timing sets the step-latency and time-breakdown plots of p from its
// episodes.
func (p *page) timing() {
	var lat []float64
	var rows []timeRow
	for _, ep := range p.Episodes {
		if ep.Traj == nil {
			continue
		}
		for _, st := range ep.Traj.Steps {
			lat = append(lat, st.Result.Duration.Seconds())
		}
		for k, v := range ep.Time {
			p.TotalTime[k] += v
		}
		p.Timed++
		if len(rows) < maxTimeRows {
			rows = append(rows, timeRow{Label: fmt.Sprintf("#%d %s", ep.N, ep.TaskKey), Parts: ep.Time})
		}
	}
	p.Parts = timeParts[:]
	p.StepLatency = latencyHistogram(lat)
	p.Times = timeBars(rows)
	if p.Timed == 0 {
		p.MeanTime = plot{Empty: true}
		return
	}
	var mean breakdown
	for k, v := range p.TotalTime {
		mean[k] = v / float64(p.Timed)
	}
	p.MeanTime = timeBars([]timeRow{{Label: fmt.Sprintf("mean of %d episodes", p.Timed), Parts: mean}})
}

// timeOf splits an episode of total seconds into its parts: the policy's
// turns, the tool calls and the evaluation as recorded, the reset as the
// time from the start to the first tool call less the policy turns before
// it (steps are stamped when they end), and the rest as other. With no
// tool call the reset cannot be told apart and is counted as other.
func timeOf(t *gym.Trajectory, total float64) breakdown {
	var b breakdown
	for _, tu := range t.Turns {
		b[partPolicy] += tu.Duration.Seconds()
	}
	for _, st := range t.Steps {
		b[partTools] += st.Result.Duration.Seconds()
	}
	if t.Evaluation != nil {
		b[partEval] = t.Evaluation.Duration.Seconds()
	}
	if len(t.Steps) > 0 && !t.StartTime.IsZero() && !t.Steps[0].Timestamp.IsZero() {
		first := t.Steps[0]
		before := first.Timestamp.Sub(t.StartTime.Time).Seconds() - first.Result.Duration.Seconds()
		for _, tu := range t.Turns {
			if tu.Turn <= first.Action.Turn {
				before -= tu.Duration.Seconds()
			}
		}
		b[partReset] = max(before, 0)
	}
	if total <= 0 && !t.StartTime.IsZero() && !t.EndTime.IsZero() {
		total = t.EndTime.Sub(t.StartTime.Time).Seconds()
	}
	b[partOther] = max(total-b[partReset]-b[partPolicy]-b[partTools]-b[partEval], 0)
	return b
}

// omitted matches the mark of the middle cut of a long output.
var omitted = regexp.MustCompile(`\[\.\.\. \d+ bytes omitted \.\.\.\]`)

// cutHTML escapes an output and marks its head/tail cut.
func cutHTML(s string) template.HTML {
	var b strings.Builder
	last := 0
	for _, m := range omitted.FindAllStringIndex(s, -1) {
		b.WriteString(template.HTMLEscapeString(s[last:m[0]]))
		b.WriteString(`<mark class="cut" title="the output was cut here: its head and tail are kept">`)
		b.WriteString(template.HTMLEscapeString(s[m[0]:m[1]]))
		b.WriteString(`</mark>`)
		last = m[1]
	}
	b.WriteString(template.HTMLEscapeString(s[last:]))
	return template.HTML(b.String())
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
