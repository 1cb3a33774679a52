package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/bench"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
)

// TestPercentile checks the nearest-rank percentiles on known inputs.
func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tt := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100", ms(hundred...), 50, 50 * time.Millisecond},
		{"p90 of 1..100", ms(hundred...), 90, 90 * time.Millisecond},
		{"p99 of 1..100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100 of 1..100", ms(hundred...), 100, 100 * time.Millisecond},
		{"p50 of 4", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p90 of 4", ms(1, 2, 3, 4), 90, 4 * time.Millisecond},
		{"p1 of 4", ms(1, 2, 3, 4), 1, 1 * time.Millisecond},
	} {
		if got := bench.Percentile(tt.in, tt.p); got != tt.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
	// Summarize sorts a copy and computes max and mean.
	in := ms(40, 10, 30, 20)
	got := bench.Summarize(in, 1)
	want := bench.Stats{Count: 4, Errors: 1, P50: 20, P90: 40, P99: 40, Max: 40, Mean: 25}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Summarize (-want +got):\n%s", diff)
	}
	if in[0] != 40*time.Millisecond {
		t.Errorf("Summarize sorted its input: %v", in)
	}
	if got := bench.Summarize(nil, 0); got != (bench.Stats{}) {
		t.Errorf("Summarize(nil) = %+v", got)
	}
}

// TestRunCounts runs the bench against in-memory environments (two, as
// two connections) and checks the counts: resets, steps, evaluations and
// closes per op, steps per session, episodes ended early by max_actions,
// failed resets by class and tool-call errors by class.
func TestRunCounts(t *testing.T) {
	ctx := t.Context()
	a, b := gymtest.NewEnv("bench"), gymtest.NewEnv("bench")
	rep, err := bench.Run(ctx, bench.Config{Sessions: 6, Episodes: 2, Steps: 3, Command: "echo hi"}, []gym.Env{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Env != "bench" || rep.Connections != 2 || rep.Sessions != 6 {
		t.Errorf("report header: %+v", rep)
	}
	if a.Resets() != 6 || b.Resets() != 6 {
		t.Errorf("resets per env: %d and %d, want 6 and 6 (sessions spread over both)", a.Resets(), b.Resets())
	}
	if n := len(a.OpenSessions()) + len(b.OpenSessions()); n != 0 {
		t.Errorf("%d sessions left open", n)
	}
	counts := map[string]int{}
	for op, s := range rep.Ops {
		counts[op] = s.Count
		if s.Errors != 0 {
			t.Errorf("%s: %d errors", op, s.Errors)
		}
		if s.P50 > s.P90 || s.P90 > s.P99 || s.P99 > s.Max || s.Max <= 0 {
			t.Errorf("%s: percentiles out of order: %+v", op, s)
		}
	}
	want := map[string]int{bench.OpReset: 6, bench.OpResetAgain: 6, bench.OpStep: 36, bench.OpEvaluate: 12, bench.OpClose: 12}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("op counts (-want +got):\n%s", diff)
	}
	if rep.StepsDone != 36 || rep.EpisodesDone != 12 || rep.EndedEarly != 0 || len(rep.Errors) != 0 || len(rep.CallErrors) != 0 {
		t.Errorf("steps %d episodes %d early %d errors %v call errors %v", rep.StepsDone, rep.EpisodesDone, rep.EndedEarly, rep.Errors, rep.CallErrors)
	}
	if rep.StepsPerSecond <= 0 || rep.Wall <= 0 {
		t.Errorf("throughput %v over %vs", rep.StepsPerSecond, rep.Wall)
	}

	// Every third reset fails (resource_exhausted), every step's command
	// is unknown to the sandbox (an answered step, not a failed request)
	// and episodes are truncated after 2 actions of the 5 steps asked.
	var n atomic.Int64
	c := gymtest.NewEnv("bench").SetMaxActions(2).SetResetHook(func(context.Context, gym.ResetRequest) error {
		if n.Add(1)%3 == 0 {
			return gym.Errorf(gym.ClassResourceExhausted, "full")
		}
		return nil
	})
	rep, err = bench.Run(ctx, bench.Config{Sessions: 9, Steps: 5, Command: "crash"}, []gym.Env{c})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Ops[bench.OpReset]; got.Count != 9 || got.Errors != 3 {
		t.Errorf("reset stats %+v, want 9 with 3 errors", got)
	}
	if diff := cmp.Diff(map[string]int{"resource_exhausted": 3}, rep.Errors); diff != "" {
		t.Errorf("errors by code (-want +got):\n%s", diff)
	}
	if rep.EpisodesDone != 6 || rep.Ops[bench.OpClose].Count != 6 {
		t.Errorf("episodes %d, closes %d; want 6 and 6", rep.EpisodesDone, rep.Ops[bench.OpClose].Count)
	}
	if rep.CallErrors["sandbox_error"] == 0 {
		t.Errorf("call errors %v, want sandbox_error from the crashing command", rep.CallErrors)
	}
	if len(c.OpenSessions()) != 0 {
		t.Errorf("sessions left open: %v", c.OpenSessions())
	}

	d := gymtest.NewEnv("bench").SetMaxActions(2)
	rep, err = bench.Run(ctx, bench.Config{Sessions: 3, Steps: 5, WriteBytes: 100}, []gym.Env{d})
	if err != nil {
		t.Fatal(err)
	}
	if rep.StepsDone != 6 || rep.EndedEarly != 3 || !strings.Contains(rep.Action, "write_file 100 bytes") {
		t.Errorf("truncated run: steps %d, ended early %d, action %q; want 6, 3, write_file", rep.StepsDone, rep.EndedEarly, rep.Action)
	}

	// The text and JSON renderings carry the figures.
	rep.SetCPU(0.6, 1)
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"3 sessions over 1 connection", "p99 ms", "step", "errors by code: none", "100.00 ms per step"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, out.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*rep, back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}

// TestParseCPU reads the CPU counter from a Prometheus exposition.
func TestParseCPU(t *testing.T) {
	text := "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n" +
		"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\ngo_goroutines 7\n"
	v, err := bench.ParseCPU(strings.NewReader(text))
	if err != nil || v != 12.5 {
		t.Errorf("ParseCPU = %v, %v; want 12.5", v, err)
	}
	if _, err := bench.ParseCPU(strings.NewReader("go_goroutines 7\n")); err == nil {
		t.Error("ParseCPU without the metric: no error")
	}
	for in, want := range map[string]string{
		"ws://127.0.0.1:9/v1/ws":    "http://127.0.0.1:9/metrics",
		"wss://h.example:443/v1/ws": "https://h.example:443/metrics",
		"127.0.0.1:9":               "http://127.0.0.1:9/metrics",
		"http://127.0.0.1:9":        "http://127.0.0.1:9/metrics",
	} {
		if got := bench.MetricsURL(in); got != want {
			t.Errorf("MetricsURL(%q) = %q, want %q", in, got, want)
		}
	}
}
