package docker_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/internal/procstat"
)

// BenchmarkRecycle measures what it takes, after a session closes, until
// the next session's sandbox is ready. Each session first writes 100
// files of 10 KB in its working directory and 1 MB in /tmp. Ours with
// Options.Reuse: the close recycles the sandbox (see executor recycle),
// timed until it is back in the pool. Baseline, alternating in each
// iteration: ours without reuse, the close (its removal runs in the
// background) and a cold Create. It reports the p50 of each and the
// host's busy CPU time per cycle (all CPUs, from /proc/stat; the other
// way's background work may spill into it).
// Run: go test -run '^$' -bench Recycle -benchtime 20x ./envs/docker/
func BenchmarkRecycle(b *testing.B) {
	pr, _ := dockertest.NewWith(b, docker.Options{Reuse: 1})
	pc, _ := dockertest.NewWith(b, docker.Options{})
	ctx := context.Background()
	image, err := pr.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pc.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"}); err != nil {
		b.Fatal(err)
	}
	spec := sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true}
	dirty := func(sb sandbox.Sandbox) {
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c",
			`for i in $(seq 100); do head -c 10240 /dev/urandom > f$i; done; head -c 1048576 /dev/urandom > /tmp/big`},
			Timeout: time.Minute})
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("dirty: %+v %v", r, err)
		}
	}
	recycled, err := pr.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	var ours, cold []time.Duration
	var oursCPU, coldCPU time.Duration
	for b.Loop() {
		b.StopTimer()
		dirty(recycled)
		b.StartTimer()
		cpu0 := procstat.HostBusy()
		start := time.Now()
		if err := recycled.Close(ctx); err != nil {
			b.Fatal(err)
		}
		for pr.Pooled(spec) == 0 {
			if time.Since(start) > time.Minute {
				b.Fatalf("not recycled within a minute: %+v", pr.PoolStats())
			}
			time.Sleep(time.Millisecond)
		}
		if recycled, err = pr.Create(ctx, spec); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		oursCPU += procstat.HostBusy() - cpu0
		b.StopTimer()

		sb, err := pc.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		dirty(sb)
		cpu0 = procstat.HostBusy()
		start = time.Now()
		if err := sb.Close(ctx); err != nil {
			b.Fatal(err)
		}
		next, err := pc.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		cold = append(cold, time.Since(start))
		coldCPU += procstat.HostBusy() - cpu0
		if err := next.Close(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if err := recycled.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if st := pr.PoolStats(); len(st.Pools) != 1 || st.Pools[0].NotRecycled != 0 {
		b.Fatalf("pool stats %+v", st.Pools)
	}
	p50 := func(l []time.Duration) float64 {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		return ms(l[len(l)/2])
	}
	n := float64(len(ours))
	b.ReportMetric(p50(ours), "recycle_p50_ms")
	b.ReportMetric(ms(oursCPU)/n, "recycle_host_cpu_ms")
	b.ReportMetric(p50(cold), "close_and_cold_create_p50_ms")
	b.ReportMetric(ms(coldCPU)/n, "close_and_cold_create_host_cpu_ms")
	fmt.Printf("BenchmarkRecycle: next sandbox ready after a close: recycled %.1f ms (host CPU %.0f ms) vs close + cold create %.1f ms (host CPU %.0f ms)\n",
		p50(ours), ms(oursCPU)/n, p50(cold), ms(coldCPU)/n)
}
