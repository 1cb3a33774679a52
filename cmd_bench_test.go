package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/bench"
)

// TestBenchAgainstServer runs gymserver bench against a real server on
// Docker (small N): 4 sessions over 2 connections, 3 steps each, then a
// file-write run, and checks the counts, that nothing failed, and that
// the server's CPU was read from /metrics.
func TestBenchAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	url := startServe(t, validateBinary(t), calculatorConfig)
	runBenchJSON := func(args ...string) bench.Report {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(t.Context(), append([]string{"bench", "--url", url, "--json"}, args...), &out, &errb); code != 0 {
			t.Fatalf("bench %v: exit %d; stderr:\n%s", args, code, errb.String())
		}
		var rep bench.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("bench output is not JSON: %v\n%s", err, out.String())
		}
		return rep
	}
	rep := runBenchJSON("--sessions", "4", "--conns", "2", "--steps", "3")
	if rep.Env != "calculator_api" || rep.Connections != 2 || rep.Servers != 1 {
		t.Errorf("header: env %q, %d connections, %d servers", rep.Env, rep.Connections, rep.Servers)
	}
	for op, want := range map[string]int{bench.OpReset: 4, bench.OpStep: 12, bench.OpEvaluate: 4, bench.OpClose: 4} {
		s := rep.Ops[op]
		if s.Count != want || s.Errors != 0 || s.P50 <= 0 || s.Max < s.P99 || s.P99 < s.P50 {
			t.Errorf("%s: %+v, want %d requests, no errors, ordered percentiles", op, s, want)
		}
	}
	if rep.StepsDone != 12 || len(rep.Errors) != 0 || len(rep.CallErrors) != 0 || rep.StepsPerSecond <= 0 {
		t.Errorf("steps %d, errors %v, call errors %v, %v steps/s", rep.StepsDone, rep.Errors, rep.CallErrors, rep.StepsPerSecond)
	}
	if rep.ServerCPU == nil || rep.ServerCPU.Seconds <= 0 || rep.ServerCPU.PerStepMillis <= 0 {
		t.Errorf("server CPU not read: %+v", rep.ServerCPU)
	}

	rep = runBenchJSON("--sessions", "2", "--steps", "2", "--write-bytes", "4096", "--no-evaluate", "--episodes", "2")
	if rep.Ops[bench.OpReset].Count != 2 || rep.Ops[bench.OpResetAgain].Count != 2 || rep.Ops[bench.OpStep].Count != 8 {
		t.Errorf("write run ops: %+v", rep.Ops)
	}
	if _, ok := rep.Ops[bench.OpEvaluate]; ok || !strings.Contains(rep.Action, "write_file 4096") || len(rep.Errors) != 0 || len(rep.CallErrors) != 0 {
		t.Errorf("write run: action %q, ops %+v, errors %v, call errors %v", rep.Action, rep.Ops, rep.Errors, rep.CallErrors)
	}

	// The text report, and a server that is not there.
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"bench", "--url", url, "--sessions", "1", "--steps", "1", "--no-evaluate"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "p99 ms") || !strings.Contains(out.String(), "errors by code: none") || !strings.Contains(out.String(), "ms per step") {
		t.Errorf("text bench: exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(t.Context(), []string{"bench", "--url", "ws://127.0.0.1:1/v1/ws", "--sessions", "1"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "dial") {
		t.Errorf("unreachable server: exit %d, stderr %q", code, errb.String())
	}
}
