package docker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// streamResult is what a steady stream of resets saw.
type streamResult struct {
	// lat is each reset's latency; missed counts the resets that the pool
	// could not serve, which waited for a cold start.
	lat    []time.Duration
	missed int
}

// resetStream makes n sandboxes of spec, one every interval, as a trainer
// resetting at a steady rate would, each episode ending (its sandbox
// closed) at the next reset.
func resetStream(tb testing.TB, p *docker.Provider, spec sandbox.Spec, n int, interval time.Duration) streamResult {
	tb.Helper()
	ctx := context.Background()
	var res streamResult
	var closing sync.WaitGroup
	defer closing.Wait()
	var prev sandbox.Sandbox
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; i < n; i++ {
		if i > 0 {
			<-tick.C
		}
		start := time.Now()
		s, err := p.Create(ctx, spec)
		if err != nil {
			tb.Fatal(err)
		}
		res.lat = append(res.lat, time.Since(start))
		if !docker.Made(s).Before(start) {
			res.missed++
		}
		if prev != nil {
			closing.Add(1)
			go func(s sandbox.Sandbox) {
				defer closing.Done()
				if err := s.Close(ctx); err != nil {
					tb.Error(err)
				}
			}(prev)
		}
		prev = s
	}
	if err := prev.Close(ctx); err != nil {
		tb.Error(err)
	}
	return res
}

// streamSetup returns a provider with a warm pool of pool, a spec whose
// pool is full, and how long the cold start that began filling it took.
func streamSetup(tb testing.TB, pool int) (*docker.Provider, sandbox.Spec, time.Duration) {
	tb.Helper()
	p, _ := dockertest.NewWith(tb, docker.Options{WarmPool: pool})
	ctx := context.Background()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		tb.Fatal(err)
	}
	spec := sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true}
	start := time.Now()
	s, err := p.Create(ctx, spec)
	if err != nil {
		tb.Fatal(err)
	}
	cold := time.Since(start)
	if err := s.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	waitPooled(tb, p, spec, pool)
	return p, spec, cold
}

// TestWarmPoolSteadyStream checks that the pool refills in the background:
// resets at a rate it sustains are all served from it, none waiting for a
// cold start. A reset every 2 cold starts (at least 1 s) from a pool of 2
// leaves each refill 4 cold starts, a margin for a loaded machine.
func TestWarmPoolSteadyStream(t *testing.T) {
	p, spec, cold := streamSetup(t, 2)
	every := max(time.Second, 2*cold)
	res := resetStream(t, p, spec, 6, every)
	t.Logf("cold start %s; a reset every %s: latencies %v", cold, every, res.lat)
	if res.missed > 0 {
		t.Errorf("%d of %d resets waited for a cold start (latencies %v)", res.missed, len(res.lat), res.lat)
	}
}

// BenchmarkPoolStream makes resets at a steady rate from a warm pool of 2
// and reports their latency and how many the pool could not serve
// (missed), at one reset every 1 s, 500 ms and 250 ms.
// Run: go test -run '^$' -bench PoolStream -benchtime 20x ./envs/docker/
func BenchmarkPoolStream(b *testing.B) {
	for _, every := range []time.Duration{time.Second, 500 * time.Millisecond, 250 * time.Millisecond} {
		b.Run("every_"+every.String(), func(b *testing.B) {
			p, spec, _ := streamSetup(b, 2)
			b.ResetTimer()
			res := resetStream(b, p, spec, b.N, every)
			report(b, res.lat)
			b.ReportMetric(float64(res.missed), "missed")
			b.ReportMetric(float64(res.missed)/float64(len(res.lat))*100, "missed_%")
		})
	}
}
