package server_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server"
)

// BenchmarkDockerStepSessions steps execute_command "echo hi" in 32
// calculator_api sessions at once through the Go client, one connection,
// the server and the Docker executor, and splits each step's latency into
// the tool call inside the environment (CallInfo.Duration: the sandbox's
// exec and the observation) and the rest (client, WebSocket, server
// dispatch and the session queue). It runs with the default
// execute_command (/bin/sh -c per command) and with persistent_shell.
//
// b.N is the number of steps of each sub-benchmark, spread over its
// sessions; it must stay below 32 x (max_actions - 1).
// Run: go test -run '^$' -bench DockerStepSessions -benchtime 640x ./server/
func BenchmarkDockerStepSessions(b *testing.B) {
	const n = 32
	for _, shell := range []bool{false, true} {
		name := fmt.Sprintf("sessions=%d/exec", n)
		if shell {
			name = fmt.Sprintf("sessions=%d/shell", n)
		}
		b.Run(name, func(b *testing.B) {
			b.StopTimer()
			cfg, err := config.Load(calculatorConfig)
			if err != nil {
				b.Fatal(err)
			}
			cfg.Environments[0].PersistentShell = shell
			reg, err := envs.NewRegistry(context.Background(), cfg, envs.Options{Provider: dockerProvider(b)})
			if err != nil {
				b.Fatal(err)
			}
			ts := startServer(b, server.Options{Registry: reg}, nil)
			c := dial(b, ts, gymclient.Options{})
			ctx := context.Background()
			sessions := make([]*gymclient.Session, n)
			var g errgroup.Group
			g.SetLimit(8)
			limit := 0
			for i := range sessions {
				g.Go(func() error {
					s, r, err := c.Reset(ctx, "calculator_api", gym.ResetRequest{})
					if err == nil && i == 0 {
						limit = r.Limits.MaxActions
					}
					sessions[i] = s
					return err
				})
			}
			err = g.Wait()
			defer func() {
				for _, s := range sessions {
					if s != nil {
						s.Close(ctx)
					}
				}
			}()
			if err != nil {
				b.Fatal(err)
			}
			if limit > 0 && b.N/n+1 >= limit-1 {
				b.Fatalf("%d steps over %d sessions reach max_actions %d", b.N, n, limit)
			}
			action := gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("c", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}
			// One untimed step each: the persistent shell starts on a
			// session's first command.
			for _, s := range sessions {
				g.Go(func() error {
					_, err := s.Step(ctx, action)
					return err
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			var total, call, rest latencies
			var left atomic.Int64
			left.Store(int64(b.N))
			var steps errgroup.Group
			b.StartTimer()
			start := time.Now()
			for _, s := range sessions {
				steps.Go(func() error {
					for left.Add(-1) >= 0 {
						t0 := time.Now()
						res, err := s.Step(ctx, action)
						d := time.Since(t0)
						if err != nil {
							return err
						}
						ci := res.Info.Calls[0]
						if ci.ExitCode != 0 || !strings.Contains(res.Observation.Text, "hi") {
							return fmt.Errorf("step: %+v %q", ci, res.Observation.Text)
						}
						in := time.Duration(ci.Duration)
						total.add([]time.Duration{d})
						call.add([]time.Duration{in})
						rest.add([]time.Duration{d - in})
					}
					return nil
				})
			}
			if err := steps.Wait(); err != nil {
				b.Fatal(err)
			}
			wall := time.Since(start)
			b.StopTimer()
			p50, p99 := total.quantile(0.5), total.quantile(0.99)
			b.ReportMetric(ms(p50), "p50_ms")
			b.ReportMetric(ms(p99), "p99_ms")
			b.ReportMetric(float64(p99)/float64(p50), "p99/p50")
			b.ReportMetric(ms(call.quantile(0.99)), "call_p99_ms")
			b.ReportMetric(ms(rest.quantile(0.99)), "outside_call_p99_ms")
			b.ReportMetric(float64(b.N)/wall.Seconds(), "steps/s")
			load, _ := os.ReadFile("/proc/loadavg")
			b.Logf("%d sessions, %d steps in %s: step p50 %s p99 %s | tool call p50 %s p99 %s | outside the call (client, server, queue) p50 %s p99 %s | load %s",
				n, b.N, wall.Round(time.Millisecond), p50, p99, call.quantile(0.5), call.quantile(0.99), rest.quantile(0.5), rest.quantile(0.99),
				strings.Join(strings.Fields(string(load))[:3], " "))
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
