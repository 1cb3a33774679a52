package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/internal/waittest"
)

// BenchmarkCreate measures Create to a sandbox that answers: cold (no
// pool), cold from a created pool of 1 (Options.CreatedPool: the
// container's create done ahead, its start on the clock) and from a warm
// pool. The cold runs alternate, in each iteration, our start with two
// baselines of a plain container of the same image: docker-py (Debian's
// python3-docker) doing containers.create and start, as a user of the SDK
// would, timed inside Python; and the Docker API from Go doing create and
// start. Ours includes the executor answering its first request; the
// baselines end when the engine says started. create_ms, attach_ms,
// start_ms and ready_ms (p50) break ours down (create_ms is off the clock
// with a created pool). Ours runs with the shared /usr (ShareUsr, the
// environments' default), and once more without it (cold_storage_usr).
// Run: go test -run '^$' -bench Create ./envs/docker/
func BenchmarkCreate(b *testing.B) {
	b.Run("cold", func(b *testing.B) { benchCold(b, docker.Options{}, true) })
	b.Run("cold_storage_usr", func(b *testing.B) { benchCold(b, docker.Options{}, false) })
	b.Run("cold_created_pool", func(b *testing.B) { benchCold(b, docker.Options{CreatedPool: 1}, true) })
	b.Run("warm_pool", func(b *testing.B) {
		const pool = 2
		p, _ := dockertest.NewWith(b, docker.Options{WarmPool: pool})
		ctx := context.Background()
		image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
		if err != nil {
			b.Fatal(err)
		}
		spec := sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true}
		// Fill the pool before measuring.
		s, err := p.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		s.Close(ctx)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			// Steady state: a trainer resets no faster than the pool
			// refills (see BenchmarkPoolStream); wait for the refill off
			// the clock.
			b.StopTimer()
			waitPooled(b, p, spec, pool)
			b.StartTimer()
			start := time.Now()
			s, err := p.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			s.Close(ctx)
			b.StartTimer()
		}
		report(b, lat)
	})
}

// benchCold measures Create on a provider with opts and no warm pool,
// alternating with the baselines (see BenchmarkCreate); share is the
// Spec's ShareUsr.
func benchCold(b *testing.B, opts docker.Options, share bool) {
	p, cli := dockertest.NewWith(b, opts)
	ctx := context.Background()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		b.Fatal(err)
	}
	spec := sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: share}
	if opts.CreatedPool > 0 {
		// The pool for a Spec fills after its first Create.
		s, err := p.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	py := startDockerPy(b, image, p.Owner())
	var ours, goAPI, dockerPy []time.Duration
	phases := map[string][]time.Duration{}
	for b.Loop() {
		if opts.CreatedPool > 0 {
			b.StopTimer()
			waitCreated(b, p, spec, opts.CreatedPool)
			b.StartTimer()
		}
		start := time.Now()
		s, err := p.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		b.StopTimer()
		for name, d := range docker.StartPhases(s) {
			phases[name] = append(phases[name], d)
		}
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		d, err := plainCreateStart(ctx, cli, image, p.Owner())
		if err != nil {
			b.Fatal(err)
		}
		goAPI = append(goAPI, d)
		d, err = py.createStart(ctx, cli)
		if err != nil {
			b.Fatal(err)
		}
		dockerPy = append(dockerPy, d)
		b.StartTimer()
	}
	report(b, ours)
	for _, name := range []string{"create", "files", "attach", "start", "ready"} {
		b.ReportMetric(p50ms(phases[name]), name+"_ms")
	}
	b.ReportMetric(p50ms(goAPI), "baseline_go_api_p50_ms")
	b.ReportMetric(p50ms(dockerPy), "baseline_docker_py_p50_ms")
}

// waitCreated waits until the provider holds n created containers.
func waitCreated(tb testing.TB, p *docker.Provider, spec sandbox.Spec, n int) {
	tb.Helper()
	waittest.For(tb, fmt.Sprintf("the created pool to hold %d containers", n), time.Minute, func() bool { return p.Created(spec) >= n })
}

// p50ms is the median of lat in milliseconds.
func p50ms(lat []time.Duration) float64 {
	if len(lat) == 0 {
		return 0
	}
	lat = append([]time.Duration(nil), lat...)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return float64(lat[len(lat)/2].Microseconds()) / 1000
}

// plainCreateStart creates and starts a container of image that sleeps,
// without a network like ours, with the plain Docker API, and removes it; it returns the time of the
// create and start.
func plainCreateStart(ctx context.Context, cli *client.Client, image, owner string) (time.Duration, error) {
	start := time.Now()
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"sleep", "infinity"},
		Labels: map[string]string{sandbox.LabelOwner: owner}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return 0, err
	}
	err = cli.ContainerStart(ctx, created.ID, container.StartOptions{})
	d := time.Since(start)
	if rerr := cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}); err == nil {
		err = rerr
	}
	return d, err
}

// dockerPyScript creates and starts a container of argv[1] labelled with
// owner argv[2], without a network like ours, for each line it reads, and prints its id and the time
// taken in seconds.
const dockerPyScript = `
import sys, time, docker
client = docker.from_env()
image, owner = sys.argv[1], sys.argv[2]
for _ in sys.stdin:
    start = time.perf_counter()
    c = client.containers.create(image, command=["sleep", "infinity"], labels={"gymserver.owner": owner},
                                  network_mode="none")
    c.start()
    took = time.perf_counter() - start
    print(c.id, took, flush=True)
`

// dockerPy is a Python process running dockerPyScript.
type dockerPy struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

// startDockerPy starts dockerPyScript; the benchmark's cleanup ends it.
func startDockerPy(b *testing.B, image, owner string) *dockerPy {
	b.Helper()
	in, out := startPiped(b, "docker-py baseline (needs python3-docker)", exec.Command("/usr/bin/python3", "-c", dockerPyScript, image, owner))
	return &dockerPy{in: in, out: bufio.NewScanner(out)}
}

// startPiped starts cmd with a pipe to its stdin and one from its stdout.
// The benchmark's cleanup closes its stdin and waits for it to end; a
// failure is reported with name and what cmd wrote to stderr.
func startPiped(b *testing.B, name string, cmd *exec.Cmd) (io.WriteCloser, io.Reader) {
	b.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	b.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("%s: %v: %s", name, err, stderr.String())
		}
	})
	return in, out
}

// createStart has docker-py create and start one container, removes it,
// and returns the time docker-py took.
func (py *dockerPy) createStart(ctx context.Context, cli *client.Client) (time.Duration, error) {
	if _, err := io.WriteString(py.in, "go\n"); err != nil {
		return 0, fmt.Errorf("docker-py baseline: %w", err)
	}
	if !py.out.Scan() {
		return 0, fmt.Errorf("docker-py baseline ended (is python3-docker installed?): %v", py.out.Err())
	}
	id, secs, ok := strings.Cut(py.out.Text(), " ")
	took, err := strconv.ParseFloat(secs, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("docker-py baseline: bad line %q", py.out.Text())
	}
	if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		return 0, err
	}
	return time.Duration(took * float64(time.Second)), nil
}
