package server_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server"
)

// BenchmarkDashboardStep measures what the dashboard costs the steps: the
// sequential step latency of the in-memory environment through the Go
// client (protocol only, where any overhead shows most) on three servers
// in the same run, in alternating rounds: without --ui (the BASELINE),
// with --ui and no browser ("closed"), and with --ui and a browser's
// event stream connected and read throughout ("open"). Each server gets
// b.N steps in all.
func BenchmarkDashboardStep(b *testing.B) {
	ctx := context.Background()
	type variant struct {
		name string
		s    *gymclient.Session
		lat  latencies
	}
	var vs []*variant
	var streams sync.WaitGroup
	events := 0
	var eventsMu sync.Mutex
	for _, name := range []string{"baseline", "closed", "open"} {
		ts := startServer(b, server.Options{UI: name != "baseline"}, memEnv().SetMaxActions(b.N+1))
		c := dial(b, ts, gymclient.Options{})
		s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
		if err != nil {
			b.Fatal(err)
		}
		vs = append(vs, &variant{name: name, s: s})
		if name != "open" {
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(sctx, "GET", "http://"+ts.addr+"/ui/api/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		streams.Add(1)
		go func() {
			defer streams.Done()
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if strings.HasPrefix(line, "data: ") {
					eventsMu.Lock()
					events++
					eventsMu.Unlock()
				}
			}
		}()
		// Stop the stream before the servers drain (cleanups run last
		// registered first).
		b.Cleanup(func() { cancel(); streams.Wait() })
	}
	action := gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("c", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}
	const rounds = 10
	b.ResetTimer()
	start := time.Now()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		for _, v := range vs {
			d := make([]time.Duration, 0, n)
			for range n {
				t0 := time.Now()
				if _, err := v.s.Step(ctx, action); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			v.lat.add(d)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	var line []string
	for _, v := range vs {
		p50, p99 := v.lat.quantile(0.50), v.lat.quantile(0.99)
		b.ReportMetric(float64(p50.Nanoseconds())/1e3, v.name+"-p50-µs")
		b.ReportMetric(float64(p99.Nanoseconds())/1e3, v.name+"-p99-µs")
		line = append(line, v.name+": p50 "+p50.String()+", p99 "+p99.String())
	}
	eventsMu.Lock()
	got := events
	eventsMu.Unlock()
	if got == 0 && elapsed > 2*time.Second {
		b.Errorf("the open dashboard received no event in %s", elapsed)
	}
	b.Logf("step latency, %d steps per server, %d rounds; BASELINE = no --ui; closed = --ui, no browser; open = --ui with an event stream read throughout (%d events): %s",
		b.N, rounds, got, strings.Join(line, "; "))
}
