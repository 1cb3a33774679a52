package server_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server"
)

// latencies collects per-step durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

// quantile returns the q-quantile; it sorts in place.
func (l *latencies) quantile(q float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[min(len(l.d)-1, int(q*float64(len(l.d))))]
}

// BenchmarkProtocolStep measures the protocol alone: steps of the
// in-memory environment ("echo hi") through the Go client, the WebSocket
// and the server, over ONE connection. Sessions step concurrently (one
// goroutine per session, pipelined on the connection); "sessions=1" is the
// sequential round-trip latency.
func BenchmarkProtocolStep(b *testing.B) {
	for _, sessions := range []int{1, 64} {
		b.Run(map[int]string{1: "sessions=1", 64: "sessions=64"}[sessions], func(b *testing.B) {
			// Every step is one action: no episode may reach max_actions.
			ts := startServer(b, server.Options{}, memEnv().SetMaxActions(b.N+1))
			c := dial(b, ts, gymclient.Options{})
			ctx := context.Background()
			ss := make([]*gymclient.Session, sessions)
			for i := range ss {
				s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
				if err != nil {
					b.Fatal(err)
				}
				ss[i] = s
			}
			action := gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("c", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}
			var lat latencies
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i, s := range ss {
				n := b.N / sessions
				if i < b.N%sessions {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					d := make([]time.Duration, 0, n)
					for range n {
						t0 := time.Now()
						if _, err := s.Step(ctx, action); err != nil {
							b.Error(err)
							return
						}
						d = append(d, time.Since(t0))
					}
					lat.add(d)
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			rate := float64(b.N) / elapsed.Seconds()
			p50, p99 := lat.quantile(0.50), lat.quantile(0.99)
			b.ReportMetric(rate, "steps/s")
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			b.Logf("protocol only, one connection, %d sessions: %d steps, %.0f steps/s (target >= 20000), p50 %s, p99 %s",
				sessions, b.N, rate, p50, p99)
		})
	}
}
