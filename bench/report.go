package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// CPUMetric is the Prometheus counter of a process's CPU time, which
// gymserver serve exports on /metrics.
const CPUMetric = "process_cpu_seconds_total"

// ParseCPU returns the value of CPUMetric in a Prometheus text exposition.
func ParseCPU(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok || name != CPUMetric {
			continue
		}
		// A sample may carry a timestamp after the value.
		value, _, _ = strings.Cut(strings.TrimSpace(value), " ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", CPUMetric, err)
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read metrics: %w", err)
	}
	return 0, fmt.Errorf("no %s in the metrics", CPUMetric)
}

// MetricsURL returns the /metrics address of the server whose WebSocket
// URL is wsURL (ws://HOST:PORT/v1/ws, http://HOST:PORT or HOST:PORT).
func MetricsURL(wsURL string) string {
	u := wsURL
	switch {
	case strings.HasPrefix(u, "ws://"):
		u = "http://" + strings.TrimPrefix(u, "ws://")
	case strings.HasPrefix(u, "wss://"):
		u = "https://" + strings.TrimPrefix(u, "wss://")
	case !strings.Contains(u, "://"):
		u = "http://" + u
	}
	scheme, rest, _ := strings.Cut(u, "://")
	host, _, _ := strings.Cut(rest, "/")
	return scheme + "://" + host + "/metrics"
}

// ReadCPU reads CPUMetric from the server whose WebSocket URL is wsURL,
// sending token as a bearer token when it is not empty.
func ReadCPU(ctx context.Context, client *http.Client, wsURL, token string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, MetricsURL(wsURL), nil)
	if err != nil {
		return 0, fmt.Errorf("metrics request: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("get metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("get %s: HTTP %s", req.URL, resp.Status)
	}
	return ParseCPU(resp.Body)
}

// SetCPU fills r.ServerCPU from the CPU seconds servers used in the run.
func (r *Report) SetCPU(seconds float64, servers int) {
	c := &CPU{Seconds: seconds, Servers: servers}
	if r.StepsDone > 0 {
		c.PerStepMillis = seconds * 1000 / float64(r.StepsDone)
	}
	r.ServerCPU = c
}

// WriteText writes the report as a human-readable table.
func (r *Report) WriteText(w io.Writer) error {
	bw := &errWriter{w: w}
	task := r.Task
	if task == "" {
		task = "(server's pick)"
	}
	bw.printf("gymserver bench: env %s, task %s, %d sessions over %d connection(s) to %d server(s)\n",
		r.Env, task, r.Sessions, r.Connections, r.Servers)
	bw.printf("  %d episode(s) per session, %d steps per episode, each step: %s\n", r.Episodes, r.StepsWanted, r.Action)
	bw.printf("wall %.2fs, %d episodes, %d steps (%d episodes ended early), %.1f steps/s\n\n",
		r.Wall, r.EpisodesDone, r.StepsDone, r.EndedEarly, r.StepsPerSecond)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tcount\terrors\tp50 ms\tp90 ms\tp99 ms\tmax ms\tmean ms\t")
	for _, op := range opOrder {
		s, ok := r.Ops[op]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", op, s.Count, s.Errors, s.P50, s.P90, s.P99, s.Max, s.Mean)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	bw.printf("\nerrors by code: %s\n", counts(r.Errors))
	bw.printf("tool-call errors in answered steps: %s\n", counts(r.CallErrors))
	if c := r.ServerCPU; c != nil {
		bw.printf("server CPU (%s of %d server(s)): %.2fs over the run, %.2f ms per step (resets and evaluations included)\n",
			CPUMetric, c.Servers, c.Seconds, c.PerStepMillis)
	} else {
		bw.printf("server CPU: not available (no readable /metrics)\n")
	}
	return bw.err
}

// counts formats a count map as "a=1 b=2", or "none".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }
