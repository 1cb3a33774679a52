package view

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/rollout"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// hostile is text a model or agent could write, in every place the page
// shows text from the files.
const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>`

// sampleRun is a run of two episodes, one of them masked and without a
// trajectory, with hostile text everywhere.
func sampleRun() *Run {
	start := gym.TimeOf(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	call := gym.NewToolCall("c1", "execute_command", `{"command": "`+strings.ReplaceAll(hostile, `"`, `\"`)+`"}`)
	traj := &gym.Trajectory{
		TrajectoryID: "t-0", EnvironmentID: "env", TaskID: "task" + hostile, StartTime: start, EndTime: start,
		Messages: []gym.Message{
			{Role: "system", Content: "system prompt"},
			{Role: "user", Content: "task prompt " + hostile},
			{Role: "assistant", Content: "thinking " + hostile, ToolCalls: []gym.ToolCall{call}},
			{Role: "tool", Name: "execute_command", ToolCallID: "c1", Content: "Exit code: 3\nstdout:\n" + hostile + "\n[... 1234 bytes omitted ...]\ntail " + hostile},
		},
		Turns: []gym.TrajectoryTurn{{Turn: 1, MessageIndex: 2, Duration: gym.Duration(250 * time.Millisecond), ToolCalls: 1}},
		Steps: []gym.TrajectoryStep{{StepID: "s1", Timestamp: gym.TimeOf(start.Add(2 * time.Second)), Action: gym.TrajectoryAction{Type: "command", ToolCall: call, Turn: 1},
			Result: gym.TrajectoryResult{Output: hostile, ExitCode: 3, Duration: gym.Duration(1500 * time.Millisecond)}}},
		Evaluation: &gym.Evaluation{Reward: 0.5, Mode: "pass_rate", Passed: 1, Failed: 1, Total: 2,
			Tests: []gym.TestCase{
				{Name: "tests/test_a.py::test_ok", Status: gym.TestPassed},
				{Name: "tests/test_a.py::test_" + hostile, Status: gym.TestFailed, Message: "assert " + hostile},
			},
			Commands: []gym.TestCommand{{Command: "pytest", ExitCode: 1, Output: "1 failed " + hostile, Source: "pytest", Duration: gym.Duration(2 * time.Second)}},
			Duration: gym.Duration(2 * time.Second)},
		Plugins: map[string]any{"judge": map[string]any{"note": hostile}},
	}
	recs := []rollout.Record{
		{TrajectoryID: "t-0", EnvironmentID: "env", TaskID: traj.TaskID, TrajectoryFile: "trajectories/t-0.json", StartTime: start, EndTime: start, Turns: 1,
			EpisodeResult: gym.EpisodeResult{FinalScore: 0.5, TerminatedReason: gym.ReasonMaxActions, Actions: 1, ActionErrors: 1, TestsPassed: 1, TestsTotal: 2, DurationSeconds: 4.25}},
		{TrajectoryID: "t-1", EnvironmentID: "env", TaskID: "other", Episode: 0, TrajectoryFile: "trajectories/t-1.json", StartTime: start, EndTime: start,
			EpisodeResult: gym.EpisodeResult{TerminatedReason: gym.ReasonSandboxError, Mask: true, ErrorClass: gym.ClassSandbox, Error: "sandbox died " + hostile}},
	}
	return &Run{
		Source: "/runs/results.json", Records: recs, StatsComputed: true,
		Stats:            rollout.Compute(recs, plansOf(recs)),
		Trajectories:     []*gym.Trajectory{traj, nil},
		TrajectoryErrors: map[int]string{1: "open trajectories/t-1.json: no such file or directory"},
	}
}

// TestWriteGolden renders sampleRun and compares it with
// testdata/report.golden.html (go test ./view -update rewrites it).
func TestWriteGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sampleRun()); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.golden.html")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("report differs from %s (-want +got):\n%s", golden, diff)
	}
}

// TestWriteEscapes checks that no text from the files reaches the page
// unescaped: not in the transcript, the tests, the plugins' data, the
// filters' options nor the SVG labels.
func TestWriteEscapes(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sampleRun()); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, bad := range []string{"<script>alert", "<img"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q unescaped", bad)
		}
	}
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("%d script elements, want 1", n)
	}
	for _, want := range []string{
		"stdout:\n&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;", // tool output
		"<td>tests/test_a.py::test_&lt;script&gt;",                 // test name
		"<option>env/task&lt;script&gt;",                           // task filter
		`<text x="254.0" y="39.0" text-anchor="end">…&#34;)`,       // SVG label, cut to 40 runes
		"exit code 3, 1.500s",                                      // the step of the tool message
		"No trajectory: open trajectories/t-1.json",                // the missing one
		`data-reason="sandbox_error" data-mask="true"`,             // filter data
		`<title>reward 0.50–0.60: 1 episodes</title>`,              // the masked episode is not counted
		"Time: 4.250s in all, 1.500s in tool calls, 2.000s in evaluation.",
		// The step ended 2s after the start, took 1.5s, after a turn of
		// 0.25s: the reset took 0.25s; 4.25 - 0.25 - 0.25 - 1.5 - 2 = 0.25 is other.
		"Breakdown: reset 0.250s; policy 0.250s; tools 1.500s; evaluation 2.000s; other 0.250s;",
		`<mark class="cut" title="the output was cut here: its head and tail are kept">[... 1234 bytes omitted ...]</mark>` + "\ntail &lt;script&gt;",
		`<title>1s–2s: 1 tool calls</title>`,
		`<title>#0 env/task&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;: reset 0.250s</title>`,
		`<tr><th>total over 1 episodes</th><td>0.250s</td><td>0.250s</td><td>1.500s</td><td>2.000s</td><td>0.250s</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func TestHistogram(t *testing.T) {
	p := histogram([]float64{0, 0.05, 0.5, 0.99, 1, 1, -1, 2}, 10)
	var got []string
	for _, b := range p.Bars {
		got = append(got, b.Title)
	}
	want := []string{
		"reward 0.00–0.10: 3 episodes", "reward 0.10–0.20: 0 episodes", "reward 0.20–0.30: 0 episodes",
		"reward 0.30–0.40: 0 episodes", "reward 0.40–0.50: 0 episodes", "reward 0.50–0.60: 1 episodes",
		"reward 0.60–0.70: 0 episodes", "reward 0.70–0.80: 0 episodes", "reward 0.80–0.90: 0 episodes",
		"reward 0.90–1.00: 4 episodes",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bins (-want +got):\n%s", diff)
	}
	if p.Empty || !histogram(nil, 10).Empty {
		t.Error("Empty is wrong")
	}
}

func TestLatencyHistogram(t *testing.T) {
	p := latencyHistogram([]float64{0.0005, 0.003, 0.003, 0.004, 1000})
	var got []string
	for _, b := range p.Bars {
		got = append(got, b.Title)
	}
	want := []string{
		"0–1ms: 1 tool calls", "1ms–2ms: 0 tool calls", "2ms–5ms: 3 tool calls", "5ms–10ms: 0 tool calls",
		"10ms–20ms: 0 tool calls", "20ms–50ms: 0 tool calls", "50ms–100ms: 0 tool calls", "100ms–200ms: 0 tool calls",
		"200ms–500ms: 0 tool calls", "500ms–1s: 0 tool calls", "1s–2s: 0 tool calls", "2s–5s: 0 tool calls",
		"5s–10s: 0 tool calls", "10s–30s: 0 tool calls", "30s–1min: 0 tool calls", "1min–5min: 0 tool calls",
		"5min–∞: 1 tool calls",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bins (-want +got):\n%s", diff)
	}
	// A narrow run shows six bins around it.
	if p := latencyHistogram([]float64{0.003}); len(p.Bars) != 6 || p.Bars[0].Title != "2ms–5ms: 1 tool calls" {
		t.Errorf("one step: %d bars, first %q", len(p.Bars), p.Bars[0].Title)
	}
	if !latencyHistogram(nil).Empty {
		t.Error("no steps: not Empty")
	}
}

func TestPrettyJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`:  "{\n  \"a\": 1\n}",
		`{"a":1`:   `{"a":1`,
		``:         ``,
		`not json`: `not json`,
	} {
		if got := prettyJSON(in); got != want {
			t.Errorf("prettyJSON(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCompare compares sampleRun with a run where task "other" scored 1
// and a third task ran: the differences, the tasks of one run only, and
// the escaping of task names.
func TestCompare(t *testing.T) {
	a := sampleRun()
	b := sampleRun()
	b.Records[1].EpisodeResult = gym.EpisodeResult{FinalScore: 1, Success: true, TerminatedReason: gym.ReasonCompleted, TestsPassed: 1, TestsTotal: 1}
	b.Records[0].EpisodeResult.FinalScore = 0.25
	b.Records = append(b.Records, rollout.Record{TrajectoryID: "t-2", EnvironmentID: "env", TaskID: "new",
		EpisodeResult: gym.EpisodeResult{FinalScore: 0, TerminatedReason: gym.ReasonMaxActions}})
	b.Trajectories = append(b.Trajectories, nil)
	b.Stats = rollout.Compute(b.Records, plansOf(b.Records))
	b.Source = "/runs/b/results.json"

	p := compareOf(a, b)
	var got []string
	for _, tp := range p.Tasks {
		got = append(got, fmt.Sprintf("%s a=%v b=%v comparable=%v rate%+.2f mean%+.2f", tp.Key, tp.A != nil, tp.B != nil, tp.Comparable, tp.DeltaRate, tp.DeltaMean))
	}
	want := []string{
		"env/new a=false b=true comparable=false rate+0.00 mean+0.00",
		"env/other a=true b=true comparable=false rate+0.00 mean+0.00", // masked in A: nothing scored
		"env/task" + hostile + " a=true b=true comparable=true rate+0.00 mean-0.25",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	if p.Common != 2 || p.A.Title != "runs/results.json" || p.B.Title != "b/results.json" {
		t.Errorf("common %d, titles %q %q", p.Common, p.A.Title, p.B.Title)
	}
	var buf bytes.Buffer
	if err := WriteCompare(&buf, a, b); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if strings.Contains(page, "<script") || strings.Contains(page, "<img") {
		t.Error("the comparison holds text from the files unescaped")
	}
	for _, w := range []string{`<td class="down">-0.250</td></tr>`, `<td colspan="3" class="muted">not run</td>`, "2 of 3 tasks are in both runs."} {
		if !strings.Contains(page, w) {
			t.Errorf("the comparison lacks %q", w)
		}
	}
}
