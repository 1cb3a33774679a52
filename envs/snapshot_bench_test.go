package envs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// The benchmarks in this file compare snapshots kept as archives of what
// the agent can write, and forks restored from them, with the baseline
// measured in the same iterations: a docker commit, forks started from
// the committed image, and plain cold resets. Run:
//
//	go test -run '^$' -bench 'Snapshot|Fork8' -benchtime 5x ./envs/

// benchEnv returns calculator_api's environment on provider p.
func benchEnv(b *testing.B, p sandbox.Provider, archiveMax int64) *envs.TaskEnv {
	b.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", "calculator_api", "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p, SnapshotArchiveMax: archiveMax})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// changedSession resets e and writes size bytes of random data, in files
// of at most 1 MB, into the working directory.
func changedSession(b *testing.B, e *envs.TaskEnv, size int) gym.Session {
	b.Helper()
	ctx := context.Background()
	s, _, err := e.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(context.Background()) })
	cmd := fmt.Sprintf(`mkdir -p data && i=0; while [ $i -lt %d ]; do head -c %d /dev/urandom > data/f$i; i=$((i+1)); done`,
		(size+(1<<20)-1)>>20, min(size, 1<<20))
	r, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: cmd})}})
	if err != nil || r.Info.Calls[0].ExitCode != 0 {
		b.Fatalf("write data: %v %+v", err, r.Info.Calls)
	}
	return s
}

// timedSnapshot snapshots s and returns the snapshot and how long it took.
func timedSnapshot(b *testing.B, s gym.Session, wantMode string) (gym.Snapshot, time.Duration) {
	b.Helper()
	start := time.Now()
	snap, err := s.(gym.Snapshotter).Snapshot(context.Background())
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if snap.Mode != wantMode {
		b.Fatalf("snapshot mode %q (fallback %q), want %q", snap.Mode, snap.Fallback, wantMode)
	}
	return snap, took
}

// p50 returns the median in milliseconds.
func p50(lat []time.Duration) float64 {
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// BenchmarkSnapshot measures a snapshot of a session that wrote 1 MB and
// 10 MB of random data: kept as an archive (ours: until the snapshot
// returns, and until the archive has reached the server, which forks wait
// for) and, in the same iteration, committed to an image (the baseline,
// as before archives). Dropping is off the clock.
func BenchmarkSnapshot(b *testing.B) {
	for _, size := range []int{1 << 20, 10 << 20} {
		b.Run(fmt.Sprintf("%dMB", size>>20), func(b *testing.B) {
			p := shared.Provider(b)
			arch, commit := benchEnv(b, p, 0), benchEnv(b, p, -1)
			sa, sc := changedSession(b, arch, size), changedSession(b, commit, size)
			var archLat, arrivedLat, commitLat []time.Duration
			var bytes int64
			for b.Loop() {
				start := time.Now()
				snap, took := timedSnapshot(b, sa, gym.SnapshotArchive)
				archLat, bytes = append(archLat, took), snap.Bytes
				if err := envs.ArchiveArrived(context.Background(), arch, snap.ID); err != nil {
					b.Fatal(err)
				}
				arrivedLat = append(arrivedLat, time.Since(start))
				b.StopTimer()
				arch.DropSnapshot(context.Background(), snap.ID)
				b.StartTimer()
				snap, took = timedSnapshot(b, sc, gym.SnapshotCommit)
				commitLat = append(commitLat, took)
				b.StopTimer()
				commit.DropSnapshot(context.Background(), snap.ID)
				b.StartTimer()
			}
			b.ReportMetric(p50(archLat), "archive_p50_ms")
			b.ReportMetric(p50(arrivedLat), "archive_at_server_p50_ms")
			b.ReportMetric(p50(commitLat), "commit_p50_ms")
			b.ReportMetric(float64(bytes)/(1<<20), "archive_MB")
		})
	}
}

// forkN starts n sessions from snapshot id of e at once and returns the
// time until all were ready; they are closed off the clock.
func forkN(b *testing.B, e *envs.TaskEnv, id string, n int) time.Duration {
	b.Helper()
	return startN(b, n, func(ctx context.Context) (gym.Session, error) {
		s, _, err := e.Fork(ctx, id)
		return s, err
	})
}

// resetN resets n sessions of e at once, like forkN.
func resetN(b *testing.B, e *envs.TaskEnv, n int) time.Duration {
	b.Helper()
	return startN(b, n, func(ctx context.Context) (gym.Session, error) {
		s, _, err := e.Reset(ctx, gym.ResetRequest{})
		return s, err
	})
}

func startN(b *testing.B, n int, start func(context.Context) (gym.Session, error)) time.Duration {
	b.Helper()
	ctx := context.Background()
	out := make([]gym.Session, n)
	var g errgroup.Group
	t0 := time.Now()
	for i := range n {
		g.Go(func() (err error) {
			out[i], err = start(ctx)
			return err
		})
	}
	err := g.Wait()
	took := time.Since(t0)
	b.StopTimer()
	defer b.StartTimer()
	var cg errgroup.Group
	for _, s := range out {
		if s != nil {
			cg.Go(func() error { _, err := s.Close(ctx); return err })
		}
	}
	cg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkFork8 measures fork ×8 of a snapshot of a session that wrote
// 1 MB: from an archive with a warm pool of 8 (refilled off the clock
// before each iteration, as a trainer forks no faster than the pool
// refills) and without a pool (ours), and in the same iterations the
// baselines: forks from a committed image, and 8 cold resets.
func BenchmarkFork8(b *testing.B) {
	const n = 8
	warmP, _ := dockertest.NewWith(b, docker.Options{WarmPool: n})
	rec := &specRecorder{Provider: warmP}
	warm := benchEnv(b, rec, 0)
	coldP := shared.Provider(b)
	cold, commit := benchEnv(b, coldP, 0), benchEnv(b, coldP, -1)

	snapWarm, _ := timedSnapshot(b, changedSession(b, warm, 1<<20), gym.SnapshotArchive)
	snapCold, _ := timedSnapshot(b, changedSession(b, cold, 1<<20), gym.SnapshotArchive)
	snapCommit, _ := timedSnapshot(b, changedSession(b, commit, 1<<20), gym.SnapshotCommit)
	b.Cleanup(func() {
		warm.DropSnapshot(context.Background(), snapWarm.ID)
		cold.DropSnapshot(context.Background(), snapCold.ID)
		commit.DropSnapshot(context.Background(), snapCommit.ID)
	})
	var warmLat, coldLat, commitLat, resetLat []time.Duration
	for b.Loop() {
		b.StopTimer()
		rec.waitFull(b, n)
		waitRemoved(b, warmP, coldP) // the last round's closed sandboxes
		waitZygotes(b, warmP)
		b.StartTimer()
		warmLat = append(warmLat, forkN(b, warm, snapWarm.ID, n))
		b.StopTimer()
		rec.waitFull(b, n) // no refill competes with what follows
		waitRemoved(b, warmP, coldP)
		waitZygotes(b, warmP) // nor the refilled sandboxes' zygotes
		b.StartTimer()
		coldLat = append(coldLat, forkN(b, cold, snapCold.ID, n))
		commitLat = append(commitLat, forkN(b, commit, snapCommit.ID, n))
		resetLat = append(resetLat, resetN(b, cold, n))
	}
	b.ReportMetric(p50(warmLat), "pool_p50_ms")
	b.ReportMetric(p50(coldLat), "no_pool_p50_ms")
	b.ReportMetric(p50(commitLat), "commit_fork_p50_ms")
	b.ReportMetric(p50(resetLat), "cold_resets_p50_ms")
}

// waitZygotes waits until no verifier zygote of p is queued or
// importing (a warm pool's sandboxes start theirs as they join it).
func waitZygotes(b *testing.B, p *docker.Provider) {
	b.Helper()
	waittest.For(b, "the zygotes to be imported", time.Minute, func() bool { return p.ZygotesPending() == 0 })
}

// waitRemoved waits until the providers have removed every container of
// a closed session (removal runs in the background after close), so that
// a measured round does not share the machine with the last one's
// removals.
func waitRemoved(b *testing.B, ps ...*docker.Provider) {
	b.Helper()
	waittest.For(b, "the closed sandboxes to be removed", time.Minute, func() bool {
		for _, p := range ps {
			if p.PoolStats().Removing > 0 {
				return false
			}
		}
		return true
	})
}
