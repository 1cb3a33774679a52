package envs_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// The benchmarks in this file compare an environment of many tasks, which
// shares one prepared image and writes each task's files into its sandbox,
// with the baseline: one prepared image per task, its files baked in by
// Provider.Prepare (a docker commit), as when every task was its own
// environment. Run:
//
//	go test -run '^$' -bench 'ResetTask|DiskPerTask' -benchtime 10x ./envs/

// benchTaskCount is the number of tasks of the benchmarks' environment.
const benchTaskCount = 200

// benchTaskFiles returns the starter file of task i; salt makes it differ
// from every earlier run's, so the baseline never finds it baked already.
func benchTaskFiles(i int, salt string) []sandbox.File {
	src := fmt.Sprintf("# task %d %s\ndef f(x):\n    return x + %d\n", i, salt, i)
	return []sandbox.File{{Path: "/workspace/f.py", Data: []byte(src), Mode: 0o644}}
}

// benchTaskEnv returns an environment of benchTaskCount inline tasks with
// tiny files on the Python base image.
func benchTaskEnv(b *testing.B, p sandbox.Provider) *envs.TaskEnv {
	b.Helper()
	var tasks []string
	for i := range benchTaskCount {
		tasks = append(tasks, fmt.Sprintf(`{"id": "t%03d", "prompt": "Make f(%d) return %d.",
			"files": {"f.py": %q},
			"hidden_files": {"tests/test_f.py": "from f import f\n\ndef test_f():\n    assert f(0) == %d\n"}}`,
			i, i, 2*i, string(benchTaskFiles(i, "")[0].Data), i))
	}
	cfg, err := config.Parse([]byte(`{"environments": [{
		"id": "bench", "docker_image": "`+baseimage.Python+`",
		"unit_tests": ["python3 -m pytest -q tests/"],
		"tasks": [`+strings.Join(tasks, ",")+`]}]}`), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// specRecorder is a provider that remembers the last spec it was asked
// for, so that a benchmark can wait for the warm pool of exactly that spec.
type specRecorder struct {
	*docker.Provider

	// mu guards the field below.
	mu   sync.Mutex
	last sandbox.Spec
}

// Create records spec and creates the sandbox.
func (r *specRecorder) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	r.mu.Lock()
	r.last = spec
	r.mu.Unlock()
	return r.Provider.Create(ctx, spec)
}

// waitFull waits until the pool holds n idle sandboxes for the last spec.
func (r *specRecorder) waitFull(b *testing.B, n int) {
	b.Helper()
	r.mu.Lock()
	spec := r.last
	r.mu.Unlock()
	waittest.For(b, fmt.Sprintf("the pool to hold %d sandboxes", n), time.Minute, func() bool { return r.Pooled(spec) >= n })
}

// resetAndClose resets task id of e and closes the session; it returns
// the time until the session was ready.
func resetAndClose(b *testing.B, e *envs.TaskEnv, id string) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	s, r, err := e.Reset(ctx, gym.ResetRequest{Task: id})
	if err != nil {
		b.Fatalf("reset %s: %v", id, err)
	}
	took := time.Since(start)
	if r.TaskID != id {
		b.Fatalf("reset %s gave task %s", id, r.TaskID)
	}
	b.StopTimer()
	if _, err := s.Close(ctx); err != nil {
		b.Fatalf("close %s: %v", id, err)
	}
	b.StartTimer()
	return took
}

// bakeAndCreate is the baseline's reset of a task not seen before: its
// files baked into a prepared image of its own, then a sandbox from it.
// It returns the image and the time until the sandbox was ready; the
// sandbox is closed off the clock.
func bakeAndCreate(b *testing.B, p *docker.Provider, files []sandbox.File) (string, time.Duration) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	ref, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace", Files: files})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: ref, WorkDir: "/workspace"})
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	b.StopTimer()
	if err := sb.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	return ref, took
}

// removeImages removes the baseline's images when the benchmark ends.
// p is closed first: its sandboxes' containers go in the background
// after Close, and an image a container still uses cannot be removed.
func removeImages(b *testing.B, p *docker.Provider, cli *client.Client, refs *[]string) {
	b.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			b.Errorf("close the provider: %v", err)
		}
		for _, ref := range *refs {
			if _, err := cli.ImageRemove(context.Background(), ref, image.RemoveOptions{PruneChildren: true}); err != nil {
				b.Errorf("remove %s: %v", ref, err)
			}
		}
	})
}

// salt returns a random string that makes a run's baked files its own.
func salt(b *testing.B) string {
	buf := make([]byte, 8)
	if _, err := rand.Read(buf); err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(buf)
}

// reportPercentiles adds the median and 95th percentile latencies.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95_ms")
}

// BenchmarkResetTask measures a reset of a random task of a 200-task
// environment until the session is ready: cold (no pool), from a warm pool
// of 2 (refilled off the clock, as a trainer resets no faster than the
// pool refills), and the baseline per-task-image, which bakes a task not
// seen before into its own image and starts a sandbox from it. Closing
// is off the clock.
func BenchmarkResetTask(b *testing.B) {
	b.Run("cold", func(b *testing.B) {
		p, _ := dockertest.NewWith(b, docker.Options{})
		e := benchTaskEnv(b, p)
		resetAndClose(b, e, "t000") // prepares the shared image
		lat := make([]time.Duration, 0, 16)
		for b.Loop() {
			lat = append(lat, resetAndClose(b, e, fmt.Sprintf("t%03d", mrand.IntN(benchTaskCount))))
		}
		reportPercentiles(b, lat)
	})
	b.Run("pool", func(b *testing.B) {
		p, _ := dockertest.NewWith(b, docker.Options{WarmPool: 2})
		r := &specRecorder{Provider: p}
		e := benchTaskEnv(b, r)
		resetAndClose(b, e, "t000") // prepares the shared image, starts the pool
		lat := make([]time.Duration, 0, 16)
		for b.Loop() {
			b.StopTimer()
			r.waitFull(b, 2)
			b.StartTimer()
			lat = append(lat, resetAndClose(b, e, fmt.Sprintf("t%03d", mrand.IntN(benchTaskCount))))
		}
		reportPercentiles(b, lat)
	})
	b.Run("per-task-image", func(b *testing.B) {
		p, cli := dockertest.NewWith(b, docker.Options{})
		var refs []string
		removeImages(b, p, cli, &refs)
		run := salt(b)
		lat := make([]time.Duration, 0, 16)
		for i := 0; b.Loop(); i++ {
			ref, took := bakeAndCreate(b, p, benchTaskFiles(i, run))
			refs = append(refs, ref)
			lat = append(lat, took)
		}
		reportPercentiles(b, lat)
	})
}

// BenchmarkDiskPerTask measures the image bytes each task not seen before
// adds: resetting it in a many-task environment (new images its sandbox
// runs from; the shared prepared image is made before measuring), and the
// baseline per-task-image, whose prepared image is sized as its size
// minus the base image's (the executor, the working directory and the
// files, in one committed layer). Other helpers' images do not count:
// only the images of this benchmark's sandboxes are looked at.
func BenchmarkDiskPerTask(b *testing.B) {
	b.Run("ours", func(b *testing.B) {
		p, cli := dockertest.NewWith(b, docker.Options{})
		e := benchTaskEnv(b, p)
		ctx := context.Background()
		resetAndClose(b, e, "t000") // prepares the shared image
		known := imageIDs(b, cli)
		var added int64
		n := 0
		for i := 1; b.Loop(); i++ {
			id := fmt.Sprintf("t%03d", i%benchTaskCount)
			s, _, err := e.Reset(ctx, gym.ResetRequest{Task: id})
			if err != nil {
				b.Fatalf("reset %s: %v", id, err)
			}
			img := sessionImage(b, cli, s.ID())
			if !known[img] {
				added += imageSize(b, cli, img) - imageSize(b, cli, baseimage.Python)
				known[img] = true
			}
			if _, err := s.Close(ctx); err != nil {
				b.Fatalf("close %s: %v", id, err)
			}
			n++
		}
		b.ReportMetric(float64(added)/float64(n), "bytes/task")
	})
	b.Run("per-task-image", func(b *testing.B) {
		p, cli := dockertest.NewWith(b, docker.Options{})
		var refs []string
		removeImages(b, p, cli, &refs)
		run := salt(b)
		base := imageSize(b, cli, baseimage.Python)
		var added int64
		for i := 0; b.Loop(); i++ {
			ref, _ := bakeAndCreate(b, p, benchTaskFiles(i, run))
			refs = append(refs, ref)
			added += imageSize(b, cli, ref) - base
		}
		b.ReportMetric(float64(added)/float64(len(refs)), "bytes/task")
	})
}

// imageIDs returns the ids of every image on the engine.
func imageIDs(b *testing.B, cli *client.Client) map[string]bool {
	b.Helper()
	list, err := cli.ImageList(context.Background(), image.ListOptions{All: true})
	if err != nil {
		b.Fatal(err)
	}
	ids := map[string]bool{}
	for _, img := range list {
		ids[img.ID] = true
	}
	return ids
}

// sessionImage returns the id of the image the session's sandbox runs.
func sessionImage(b *testing.B, cli *client.Client, session string) string {
	b.Helper()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+session))})
	if err != nil {
		b.Fatal(err)
	}
	if len(list) != 1 {
		b.Fatalf("session %s: %d containers, want 1", session, len(list))
	}
	return list[0].ImageID
}

// imageSize returns the size in bytes of an image with its parents.
func imageSize(b *testing.B, cli *client.Client, ref string) int64 {
	b.Helper()
	info, err := cli.ImageInspect(context.Background(), ref)
	if err != nil {
		b.Fatal(err)
	}
	return info.Size
}
