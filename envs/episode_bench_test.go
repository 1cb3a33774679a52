package envs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/testresult"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/procstat"
)

// The benchmarks in this file measure whole calculator_api episodes with
// the reference solution (reset, the reference's steps, evaluation, close)
// and the evaluation alone, each beside a baseline in the same run: the
// same episode driven the plain way, through the Docker API as a docker-py
// environment does it (create and start a container, copy the starter in,
// one exec per step, copy the tests in, exec pytest, copy the report out,
// remove the container), without the per-episode init commands. Run:
//
//	go test -run '^$' -bench 'Episode|Evaluate' -benchtime 8x ./envs/

// episodeNoZygote adds ours without the verifier zygote to
// BenchmarkEpisode.
var episodeNoZygote = flag.Bool("episode.no-zygote", false, "BenchmarkEpisode: also run gymserver without the verifier zygote")

// episodeSyncRemove adds ours with the container removed within close
// (docker.Options.SyncRemove, as before removals ran in the background)
// to BenchmarkEpisode.
var episodeSyncRemove = flag.Bool("episode.sync-remove", false, "BenchmarkEpisode: also run gymserver removing the container within close")

// episodeStorageUsr adds ours with shared_usr off (/usr read through the
// storage driver, as before the shared /usr volumes) to BenchmarkEpisode.
var episodeStorageUsr = flag.Bool("episode.storage-usr", false, "BenchmarkEpisode: also run gymserver with shared_usr off")

// episodeRootKept adds ours with "/" keeping its group bits
// (docker.Options.KeepRootMode, as before the executor cleared them) to
// BenchmarkEpisode.
var episodeRootKept = flag.Bool("episode.root-mode-kept", false, "BenchmarkEpisode: also run gymserver with / as the image has it")

// episodeWarmPool adds ours with a warm pool of 8 (docker.Options.WarmPool,
// serve --warm-pool 8) to BenchmarkEpisode.
var episodeWarmPool = flag.Bool("episode.warm-pool", false, "BenchmarkEpisode: also run gymserver with a warm pool of 8")

// episodeReuse adds episodes of ours that recycle their sandboxes (gymserver
// serve --reuse 8) to BenchmarkEpisode.
var episodeReuse = flag.Bool("episode.reuse", false, "BenchmarkEpisode: also run gymserver recycling sandboxes (reuse 8)")

// calculatorEnv loads calculator_api on p.
func calculatorEnv(b testing.TB, p sandbox.Provider) (*envs.TaskEnv, config.Environment, []gym.ToolCall) {
	return calculatorEnvWith(b, p, nil)
}

// calculatorEnvWith loads calculator_api on p, its config changed by edit.
func calculatorEnvWith(b testing.TB, p sandbox.Provider, edit func(*config.Environment)) (*envs.TaskEnv, config.Environment, []gym.ToolCall) {
	b.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", "calculator_api", "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	ec := cfg.Environments[0]
	if edit != nil {
		edit(&ec)
	}
	e, err := envs.New(cfg, ec, envs.Options{Provider: p})
	if err != nil {
		b.Fatal(err)
	}
	calls, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.Prepare(context.Background()); err != nil {
		b.Fatal(err)
	}
	return e, ec, calls
}

// episode runs one reference episode of e and returns its evaluation and
// how long the close took.
func episode(ctx context.Context, e *envs.TaskEnv, calls []gym.ToolCall) (*gym.Evaluation, time.Duration, error) {
	s, _, err := e.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		return nil, 0, err
	}
	var last gym.StepResult
	for _, c := range calls {
		if last, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{c}}); err != nil {
			break
		}
	}
	t0 := time.Now()
	if _, cerr := s.Close(ctx); err == nil {
		err = cerr
	}
	closed := time.Since(t0)
	if err == nil && (last.Info.Evaluation == nil || last.Info.Evaluation.Reward != 1) {
		err = fmt.Errorf("evaluation %+v, want reward 1", last.Info.Evaluation)
	}
	return last.Info.Evaluation, closed, err
}

// apiTask is calculator_api for the baseline: the starter and reference
// files, the hidden tests and the test command.
type apiTask struct {
	workdir string
	starter []sandbox.File
	solved  []sandbox.File
	tests   []sandbox.File
	limits  container.Resources
}

func newAPITask(b *testing.B, ec config.Environment) apiTask {
	b.Helper()
	read := func(cs []config.CopySpec) []sandbox.File {
		var out []sandbox.File
		for _, c := range cs {
			fs, err := c.Files()
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, fs...)
		}
		return out
	}
	t := ec.Tasks[0]
	return apiTask{
		workdir: ec.WorkingDirectory,
		starter: read(t.CopyFolders),
		solved:  read(t.Reference.Files),
		tests:   read(t.HiddenTests),
		limits: container.Resources{Memory: ec.Resources.MemoryBytes, NanoCPUs: int64(ec.Resources.CPUs * 1e9),
			PidsLimit: &ec.Resources.PIDs},
	}
}

// apiEpisode is the baseline's episode; it returns the evaluation's
// duration and the reward.
func apiEpisode(ctx context.Context, cli *client.Client, t apiTask) (time.Duration, float64, error) {
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"sleep", "infinity"},
		WorkingDir: t.workdir, Labels: map[string]string{"gymserver.bench": "baseline"}},
		&container.HostConfig{NetworkMode: "none", Resources: t.limits}, nil, nil, "")
	if err != nil {
		return 0, 0, err
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return 0, 0, err
	}
	if err := apiCopyIn(ctx, cli, resp.ID, t.starter); err != nil {
		return 0, 0, err
	}
	// The reference's steps: write_file as a shell command, as the seeds'
	// tools do it, then mark_done (no command).
	for _, f := range t.solved {
		cmd := "echo " + base64.StdEncoding.EncodeToString(f.Data) + " | base64 -d > " + f.Path
		if code, out, err := apiExec(ctx, cli, resp.ID, t.workdir, []string{"/bin/sh", "-c", cmd}); err != nil || code != 0 {
			return 0, 0, fmt.Errorf("write %s: exit %d %s %v", f.Path, code, out, err)
		}
	}
	start := time.Now()
	reward, err := apiEvaluate(ctx, cli, resp.ID, t)
	return time.Since(start), reward, err
}

// apiEvaluate copies the tests in, runs pytest with a JUnit report, copies
// the report out and scores it.
func apiEvaluate(ctx context.Context, cli *client.Client, id string, t apiTask) (float64, error) {
	if err := apiCopyIn(ctx, cli, id, t.tests); err != nil {
		return 0, err
	}
	if _, out, err := apiExec(ctx, cli, id, t.workdir, []string{"/bin/sh", "-c", "python3 -m pytest -rA --junitxml=/tmp/report.xml tests/"}); err != nil {
		return 0, fmt.Errorf("pytest: %v %s", err, out)
	}
	rc, _, err := cli.CopyFromContainer(ctx, id, "/tmp/report.xml")
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return 0, err
	}
	report, err := io.ReadAll(tr)
	if err != nil {
		return 0, err
	}
	cases, err := testresult.ParseJUnit(report)
	if err != nil {
		return 0, err
	}
	passed, failed, errored, _ := testresult.Summarize(cases)
	if passed+failed+errored == 0 {
		return 0, errors.New("no test ran")
	}
	return float64(passed) / float64(passed+failed+errored), nil
}

// apiCopyIn puts files into the container with one archive.
func apiCopyIn(ctx context.Context, cli *client.Client, id string, files []sandbox.File) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		// The Engine makes the missing parent folders.
		rel := strings.TrimPrefix(f.Path, "/")
		_ = tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(f.Data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(f.Data)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return cli.CopyToContainer(ctx, id, "/", &buf, container.CopyToContainerOptions{})
}

// apiExec runs argv with a plain Docker API exec and returns its exit code
// and output.
func apiExec(ctx context.Context, cli *client.Client, id, dir string, argv []string) (int, string, error) {
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, WorkingDir: dir, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, "", err
	}
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, "", err
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, att.Reader); err != nil {
		return 0, "", err
	}
	info, err := cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return 0, "", err
	}
	return info.ExitCode, out.String(), nil
}

// round runs job p times at once and returns the time until all were done
// and the first error.
func round(p int, job func() error) (time.Duration, error) {
	start := time.Now()
	errs := make([]error, p)
	var wg sync.WaitGroup
	for i := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = job()
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// Settling. A way's round leaves work behind that runs in the background
// (containers being removed, a warm pool refilling, sandboxes being
// recycled, zygotes importing pytest); left alone, it runs during the next
// way's round and is charged to that way. So before each round the
// benchmark waits, off every clock, until the host is quiet again, and
// charges that wait to the way that left the work in its settled figure.
const (
	// settleWindow is how long the host must be quiet.
	settleWindow = 100 * time.Millisecond
	// settleBusy is the most CPU time the host may spend in one window
	// and count as quiet (10 % of two CPUs; /proc/stat counts in 10 ms).
	settleBusy = 20 * time.Millisecond
	// settleMax bounds the wait.
	settleMax = 30 * time.Second
)

// settle waits until the host's CPUs were busy for less than settleBusy
// over settleWindow (or settleMax passed), and returns how long it waited
// before that quiet window: 0 on a quiet host.
func settle() time.Duration {
	start := time.Now()
	for {
		w0, b0 := time.Now(), procstat.HostBusy()
		time.Sleep(settleWindow)
		if procstat.HostBusy()-b0 < settleBusy || time.Since(start) > settleMax {
			return w0.Sub(start)
		}
	}
}

// episodeStats collects one way's episodes.
type episodeStats struct {
	// mu guards the fields below.
	mu   sync.Mutex
	wall time.Duration
	// settle is how long the host took to be quiet after the way's rounds.
	settle time.Duration
	// busy is the host's busy time from the start of each of the way's
	// rounds until the host was quiet after it: all the CPU its episodes
	// cost, the background work they left included (and what else ran on
	// the host meanwhile, which settle keeps small).
	busy               time.Duration
	n                  int
	lat, evals, closes []time.Duration
}

// perMinute is the way's episodes per minute, on its rounds' clock alone
// or, settled, with the time the host then took to be quiet.
func (st *episodeStats) perMinute(settled bool) float64 {
	wall := st.wall
	if settled {
		wall += st.settle
	}
	return float64(st.n) / wall.Minutes()
}

// add records an episode; closed is its close, 0 when not measured.
func (st *episodeStats) add(lat, eval, closed time.Duration) {
	st.mu.Lock()
	st.lat, st.evals = append(st.lat, lat), append(st.evals, eval)
	if closed > 0 {
		st.closes = append(st.closes, closed)
	}
	st.mu.Unlock()
}

// cpuPerEpisode is the host's busy time per episode of the way.
func (st *episodeStats) cpuPerEpisode() time.Duration { return st.busy / time.Duration(max(st.n, 1)) }

// timedRound runs round(p, job) for st's way and waits until the host is
// quiet again, adding the round's wall time, the wait and the host's busy
// time over both to st.
func (st *episodeStats) timedRound(p int, job func() error) error {
	b0 := procstat.HostBusy()
	d, err := round(p, job)
	if err != nil {
		return err
	}
	st.wall += d
	st.settle += settle()
	st.busy += procstat.HostBusy() - b0
	st.n += p
	return nil
}

func (st *episodeStats) report(b *testing.B, way string) {
	b.ReportMetric(ms(st.cpuPerEpisode()), way+"_host_cpu_ms/episode")
	b.ReportMetric(st.perMinute(false), way+"_episodes/min")
	b.ReportMetric(st.perMinute(true), way+"_settled_episodes/min")
	b.ReportMetric(ms(percentile(st.lat, 50)), way+"_episode_p50_ms")
	b.ReportMetric(ms(percentile(st.evals, 50)), way+"_eval_p50_ms")
	if len(st.closes) > 0 {
		b.ReportMetric(ms(percentile(st.closes, 50)), way+"_close_p50_ms")
	}
}

// BenchmarkEpisode measures calculator_api episodes with the reference
// solution, P at a time: in each of b.N rounds, P episodes through
// gymserver (no warm pool) start together, then P through the plain Docker
// API baseline, so that both see the same load on a shared machine. It
// reports, for each way, episodes per minute (episodes over the rounds'
// wall time), the p50 of one episode and the p50 of its evaluation. At
// P = 8 the two CPUs of the CI machine are saturated. Ours runs with the
// verifier zygote (the default); with -episode.no-zygote each round also
// runs P episodes of ours without it, reported as gymserver_no_zygote.
// Ours removes each container in the background after close; with
// -episode.sync-remove each round also runs P episodes of ours removing it
// within close (as before), reported as gymserver_sync_remove; with
// -episode.storage-usr P episodes of ours with shared_usr off, reported as
// gymserver_storage_usr; with -episode.root-mode-kept P episodes of ours
// whose "/" keeps its group bits, reported as gymserver_root_mode_kept;
// with -episode.warm-pool P episodes of ours with a warm pool of 8 (the
// pool refills in the background, on the same CPUs), reported as
// gymserver_warm_pool; with -episode.reuse P episodes of ours that recycle
// their sandboxes (Options.Reuse 8), after 8 episodes off the clock that
// fill its pool (the steady state of a long run), reported as
// gymserver_reuse. Ours reports the p50 of its close too. After each
// way's round the benchmark waits until the host is quiet (see settle), so
// that no way's round runs beside the background work another left: each
// way reports its episodes per minute on its rounds' clock and, settled,
// with that wait added (what it costs the machine in all), and the host's
// busy time per episode from the start of its rounds until the host was
// quiet after them: where the host's CPU is the limit (P = 4 and 8 on two
// CPUs), the ratio of those is what the ratio of episodes per minute
// tends to.
func BenchmarkEpisode(b *testing.B) {
	p, cli := dockertest.NewWith(b, docker.Options{})
	var es *envs.TaskEnv
	if *episodeSyncRemove {
		ps, _ := dockertest.NewWith(b, docker.Options{SyncRemove: true})
		es, _, _ = calculatorEnv(b, ps)
	}
	e, ec, calls := calculatorEnv(b, p)
	ef, _, _ := calculatorEnvWith(b, p, func(ec *config.Environment) {
		off := false
		ec.VerifierZygote = &off
		ec.ID += "_no_zygote"
	})
	eu, _, _ := calculatorEnvWith(b, p, func(ec *config.Environment) {
		off := false
		ec.SharedUsr = &off
		ec.ID += "_storage_usr"
	})
	var ek *envs.TaskEnv
	if *episodeRootKept {
		pk, _ := dockertest.NewWith(b, docker.Options{KeepRootMode: true})
		ek, _, _ = calculatorEnv(b, pk)
	}
	var ew *envs.TaskEnv
	if *episodeWarmPool {
		pw, _ := dockertest.NewWith(b, docker.Options{WarmPool: 8})
		ew, _, _ = calculatorEnv(b, pw)
		// The pool of a Spec fills after its first reset.
		if _, _, err := episode(context.Background(), ew, calls); err != nil {
			b.Fatal(err)
		}
	}
	var er *envs.TaskEnv
	if *episodeReuse {
		pr, _ := dockertest.NewWith(b, docker.Options{Reuse: 8})
		er, _, _ = calculatorEnv(b, pr)
		if _, err := round(8, func() error {
			_, _, err := episode(context.Background(), er, calls)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	task := newAPITask(b, ec)
	for _, par := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("P=%d", par), func(b *testing.B) {
			ctx := context.Background()
			var ours, fresh, syncRm, storageUsr, rootKept, pooled, reused, base episodeStats
			settle() // what came before this benchmark
			for range b.N {
				for _, w := range []struct {
					e  *envs.TaskEnv
					st *episodeStats
				}{{e, &ours}, {ef, &fresh}, {es, &syncRm}, {eu, &storageUsr}, {ek, &rootKept}, {ew, &pooled}, {er, &reused}} {
					if w.st == &fresh && !*episodeNoZygote || w.st == &syncRm && !*episodeSyncRemove || w.st == &storageUsr && !*episodeStorageUsr ||
						w.st == &rootKept && !*episodeRootKept || w.st == &pooled && !*episodeWarmPool || w.st == &reused && !*episodeReuse {
						continue
					}
					if err := w.st.timedRound(par, func() error {
						t0 := time.Now()
						r, closed, err := episode(ctx, w.e, calls)
						if err != nil {
							return err
						}
						w.st.add(time.Since(t0), time.Duration(r.Duration), closed)
						return nil
					}); err != nil {
						b.Fatal(err)
					}
				}
				if err := base.timedRound(par, func() error {
					t0 := time.Now()
					ev, reward, err := apiEpisode(ctx, cli, task)
					if err == nil && reward != 1 {
						err = fmt.Errorf("baseline reward %v", reward)
					}
					if err != nil {
						return err
					}
					base.add(time.Since(t0), ev, 0)
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			fmt.Printf("BenchmarkEpisode/P=%d: episodes/min on the rounds' clock (settled: with the wait for the host to be quiet after them): gymserver %.1f (settled %.1f), docker API %.1f (settled %.1f): %.2fx (settled %.2fx)",
				par, ours.perMinute(false), ours.perMinute(true), base.perMinute(false), base.perMinute(true),
				ours.perMinute(false)/base.perMinute(false), ours.perMinute(true)/base.perMinute(true))
			if *episodeReuse {
				fmt.Printf("; recycling %.1f (settled %.1f): %.2fx (settled %.2fx)", reused.perMinute(false), reused.perMinute(true),
					reused.perMinute(false)/base.perMinute(false), reused.perMinute(true)/base.perMinute(true))
			}
			fmt.Printf("; the host's CPU per episode: gymserver %.0f ms, docker API %.0f ms (%.2fx)", ms(ours.cpuPerEpisode()), ms(base.cpuPerEpisode()),
				float64(base.cpuPerEpisode())/float64(max(ours.cpuPerEpisode(), 1)))
			if *episodeReuse {
				fmt.Printf(", recycling %.0f ms", ms(reused.cpuPerEpisode()))
			}
			fmt.Println()
			ours.report(b, "gymserver")
			if *episodeNoZygote {
				fresh.report(b, "gymserver_no_zygote")
			}
			if *episodeSyncRemove {
				syncRm.report(b, "gymserver_sync_remove")
			}
			if *episodeStorageUsr {
				storageUsr.report(b, "gymserver_storage_usr")
			}
			if *episodeRootKept {
				rootKept.report(b, "gymserver_root_mode_kept")
			}
			if *episodeWarmPool {
				pooled.report(b, "gymserver_warm_pool")
			}
			if *episodeReuse {
				reused.report(b, "gymserver_reuse")
			}
			base.report(b, "docker_api")
		})
	}
}

// timedSandbox records how long each call of an evaluation takes.
type timedSandbox struct {
	sandbox.Sandbox

	// timesReport, when set, appends the shell's times builtin to the
	// command of every exec with a report (the evaluation's pytest
	// command, run without the zygote) and records its children's CPU
	// time in reportChildCPU.
	timesReport bool

	// mu guards the fields below.
	mu             sync.Mutex
	calls          []timedCall
	reportChildCPU []time.Duration
}

type timedCall struct {
	op string
	// took is the call's round trip; inside is an exec's own run time.
	took, inside time.Duration
	// zygote says an exec ran through the verifier zygote.
	zygote bool
	// cpu is the container's CPU time during the call (cgroup cpuacct),
	// or negative where that is not readable.
	cpu time.Duration
}

func (s *timedSandbox) record(op string, start time.Time, cpu0 int64, inside time.Duration) {
	s.recordExec(op, start, cpu0, inside, false)
}

func (s *timedSandbox) recordExec(op string, start time.Time, cpu0 int64, inside time.Duration, zygote bool) {
	took := time.Since(start)
	cpu := time.Duration(-1)
	if cpu1 := s.cpuNS(); cpu0 >= 0 && cpu1 >= 0 {
		cpu = time.Duration(cpu1 - cpu0)
	}
	s.mu.Lock()
	s.calls = append(s.calls, timedCall{op, took, inside, zygote, cpu})
	s.mu.Unlock()
}

func (s *timedSandbox) take() []timedCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func (s *timedSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	timed := s.timesReport && req.Report && len(req.Argv) == 3 && req.Argv[0] == "/bin/sh" && req.Argv[1] == "-c"
	if timed {
		req.Argv = []string{"/bin/sh", "-c", req.Argv[2] + "; rc=$?; times >&2; exit $rc"}
	}
	start, cpu0 := time.Now(), s.cpuNS()
	r, err := s.Sandbox.Exec(ctx, req)
	s.recordExec("exec", start, cpu0, r.Duration, r.ViaZygote)
	if timed && err == nil {
		c, cerr := childCPU(r.Stderr)
		if cerr != nil {
			return r, cerr
		}
		s.mu.Lock()
		s.reportChildCPU = append(s.reportChildCPU, c)
		s.mu.Unlock()
	}
	return r, err
}

func (s *timedSandbox) StartZygote(ctx context.Context, opts sandbox.ZygoteOptions) (sandbox.ZygoteStatus, error) {
	return s.Sandbox.(sandbox.ZygoteStarter).StartZygote(ctx, opts)
}

// cpuNS is the CPU time the sandbox's container has used (cgroup v1
// cpuacct, cgroupfs driver), or -1 where that is not readable.
func (s *timedSandbox) cpuNS() int64 {
	b, err := os.ReadFile("/sys/fs/cgroup/cpuacct/docker/" + s.ID() + "/cpuacct.usage")
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func (s *timedSandbox) KillAll(ctx context.Context) error {
	start, cpu0 := time.Now(), s.cpuNS()
	err := s.Sandbox.KillAll(ctx)
	s.record("kill", start, cpu0, 0)
	return err
}

func (s *timedSandbox) Remove(ctx context.Context, p string) error {
	start, cpu0 := time.Now(), s.cpuNS()
	err := s.Sandbox.Remove(ctx, p)
	s.record("remove", start, cpu0, 0)
	return err
}

func (s *timedSandbox) CopyIn(ctx context.Context, files []sandbox.File) error {
	start, cpu0 := time.Now(), s.cpuNS()
	err := s.Sandbox.CopyIn(ctx, files)
	s.record("copy_in", start, cpu0, 0)
	return err
}

// cpuPhaseNames are the parts of an evaluation whose container CPU time
// BenchmarkEvaluate reports, in order.
var cpuPhaseNames = []string{"kill_before", "remove", "copy_in", "exec", "kill_after", "outside_calls", "total"}

// addCPUPhases adds one evaluation's container CPU time by part to
// phases under "arm/part": each kind of call, and what the container used
// outside any call (total minus the calls).
func addCPUPhases(phases map[string][]time.Duration, arm string, calls []timedCall, total time.Duration) {
	sum := map[string]time.Duration{}
	kills := 0
	var inCalls time.Duration
	for _, c := range calls {
		if c.cpu < 0 {
			return
		}
		op := c.op
		if op == "kill" {
			if kills++; kills == 1 {
				op = "kill_before"
			} else {
				op = "kill_after"
			}
		}
		sum[op] += c.cpu
		inCalls += c.cpu
	}
	sum["outside_calls"] = total - inCalls
	sum["total"] = total
	for _, k := range cpuPhaseNames {
		phases[arm+"/"+k] = append(phases[arm+"/"+k], sum[k])
	}
}

// printCPUPhases prints the p50 container CPU time of each part of an
// evaluation, with and without the zygote side by side.
func printCPUPhases(phases map[string][]time.Duration) {
	fmt.Printf("%-14s %12s %12s   (container CPU per evaluation, p50 ms)\n", "part", "zygote", "no_zygote")
	for _, k := range cpuPhaseNames {
		z, f := phases["zygote/"+k], phases["no_zygote/"+k]
		if len(z) == 0 || len(f) == 0 {
			continue
		}
		fmt.Printf("%-14s %12.1f %12.1f\n", k, ms(percentile(z, 50)), ms(percentile(f, 50)))
	}
}

// timedProvider hands out timedSandboxes and remembers the last one.
type timedProvider struct {
	*docker.Provider

	// mu guards the field below.
	mu   sync.Mutex
	last *timedSandbox
}

func (p *timedProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	t := &timedSandbox{Sandbox: sb}
	p.mu.Lock()
	p.last = t
	p.mu.Unlock()
	return t, nil
}

// BenchmarkEvaluate measures calculator_api's evaluation after the
// reference solution, one at a time, three ways in each iteration: ours
// with the verifier zygote (ready: the agent's turns outlast its start,
// which is reported, ready_in, with its CPU time and memory), ours without
// it (a new pytest process, as before the zygote), and the Docker API
// baseline; for ours also the container's CPU time during the evaluation
// (cgroup cpuacct, which a loaded machine inflates far less than wall
// time). With the zygote it reports where the time goes:
// the kill of the agent's processes, clearing the hidden test roots,
// copying the tests in, the pytest process, the rest of the pytest call
// (the executor's kill after the command, the report read back, the
// transport), the kill after the command, and what is left (planning,
// parsing). For both ways of ours it prints the container's CPU time in
// each of these calls (cgroup cpuacct read before and after each one): the
// exec call (the test command and the executor's work around it) against
// the kills, the removal and the copy. The pytest_phases sub-benchmark
// splits the pytest process in
// the same sandbox, each probe's wall time and its CPU time (user plus
// system, which a loaded machine inflates far less): the interpreter's
// start, importing pytest, pytest's start with its plugins, the same with
// no entry-point scan (PYTEST_DISABLE_PLUGIN_AUTOLOAD), the same with no
// bytecode cache (PYTHONPYCACHEPREFIX points nowhere) as the base image
// was before it had one, the imports of the reference app.py, collection,
// and the whole run (without the zygote, whose start these are), the same
// with pytest's capture files on tmpfs (run_capture_in_memory); then the
// evaluation's own test command, its processes' CPU time beside the
// container's during the exec call (the rest is the shell and the
// executor). Sessions
// start and end off the clock.
func BenchmarkEvaluate(b *testing.B) {
	dp, cli := dockertest.NewWith(b, docker.Options{})
	p := &timedProvider{Provider: dp}
	e, ec, calls := calculatorEnv(b, p)
	// The same environment without the verifier zygote: every test
	// command a new process, as before it.
	pf := &timedProvider{Provider: dp}
	ef, _, _ := calculatorEnvWith(b, pf, func(ec *config.Environment) {
		off := false
		ec.VerifierZygote = &off
		ec.ID += "_no_zygote"
	})
	// With the zygote but shared_usr off: /usr through the storage driver,
	// as before the shared /usr volumes.
	pu := &timedProvider{Provider: dp}
	eu, _, _ := calculatorEnvWith(b, pu, func(ec *config.Environment) {
		off := false
		ec.SharedUsr = &off
		ec.ID += "_storage_usr"
	})
	// With the zygote and the shared /usr, but "/" with its group bits
	// (docker.Options.KeepRootMode), as before the executor cleared them.
	dk, _ := dockertest.NewWith(b, docker.Options{KeepRootMode: true})
	pk := &timedProvider{Provider: dk}
	ek, _, _ := calculatorEnv(b, pk)
	ctx := context.Background()
	// start resets a session of e and applies the reference up to mark_done.
	start := func(b *testing.B, e *envs.TaskEnv, p *timedProvider) (gym.Session, *timedSandbox) {
		s, _, err := e.Reset(ctx, gym.ResetRequest{})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range calls[:len(calls)-1] {
			if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{c}}); err != nil {
				b.Fatal(err)
			}
		}
		p.mu.Lock()
		sb := p.last
		p.mu.Unlock()
		sb.take()
		return s, sb
	}
	b.Run("calculator_api", func(b *testing.B) {
		task := newAPITask(b, ec)
		phases := map[string][]time.Duration{}
		// cpuPhases: the container's CPU time in each call, by arm.
		cpuPhases := map[string][]time.Duration{}
		var total, fresh, storageUsr, rootKept, base, cpu, freshCPU, ready, readyCPU []time.Duration
		var rss []int64
		viaZygote := 0
		// evaluate runs one evaluation on the clock and returns its
		// duration, the container's CPU time meanwhile and its calls.
		evaluate := func(b *testing.B, s gym.Session, sb *timedSandbox) (time.Duration, time.Duration, []timedCall) {
			cpu0 := sb.cpuNS()
			b.StartTimer()
			t0 := time.Now()
			ev, err := s.Evaluate(ctx)
			took := time.Since(t0)
			b.StopTimer()
			if err != nil || ev.Reward != 1 {
				b.Fatalf("evaluate: %+v %v", ev, err)
			}
			used := time.Duration(sb.cpuNS() - cpu0)
			if cpu0 < 0 {
				used = 0
			}
			calls := sb.take()
			if _, err := s.Close(ctx); err != nil {
				b.Fatal(err)
			}
			return took, used, calls
		}
		for range b.N {
			b.StopTimer()
			// With the zygote, ready: the agent's turns take longer than
			// its start (ready_in below).
			s, sb := start(b, e, p)
			cpu0 := sb.cpuNS()
			st, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true})
			if err != nil || !st.Ready {
				b.Fatalf("zygote: %+v %v", st, err)
			}
			readyCPU = append(readyCPU, time.Duration(sb.cpuNS()-cpu0))
			ready = append(ready, st.ReadyIn)
			rss = append(rss, st.RSS)
			took, used, calls := evaluate(b, s, sb)
			total = append(total, took)
			cpu = append(cpu, used)
			sum := map[string]time.Duration{}
			kills := 0
			for _, c := range calls {
				switch c.op {
				case "kill":
					if kills++; kills == 1 {
						sum["kill_before"] += c.took
					} else {
						sum["kill_after"] += c.took
					}
				case "exec":
					sum["pytest_process"] += c.inside
					sum["pytest_call_rest"] += c.took - c.inside
					if c.zygote {
						viaZygote++
					}
				default:
					sum[c.op] += c.took
				}
			}
			var known time.Duration
			for k, d := range sum {
				phases[k] = append(phases[k], d)
				known += d
			}
			phases["other"] = append(phases["other"], took-known)
			addCPUPhases(cpuPhases, "zygote", calls, used)

			// With the zygote, /usr through the storage driver.
			s, sb = start(b, eu, pu)
			if st, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true}); err != nil || !st.Ready {
				b.Fatalf("zygote: %+v %v", st, err)
			}
			took, _, _ = evaluate(b, s, sb)
			storageUsr = append(storageUsr, took)

			// With the zygote, "/" as the image has it.
			s, sb = start(b, ek, pk)
			if st, err := sb.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true}); err != nil || !st.Ready {
				b.Fatalf("zygote: %+v %v", st, err)
			}
			took, _, _ = evaluate(b, s, sb)
			rootKept = append(rootKept, took)

			// Without the zygote.
			s, sb = start(b, ef, pf)
			took, used, calls = evaluate(b, s, sb)
			fresh = append(fresh, took)
			freshCPU = append(freshCPU, used)
			for _, c := range calls {
				if c.op == "exec" {
					phases["fresh_pytest_process"] = append(phases["fresh_pytest_process"], c.inside)
				}
			}
			addCPUPhases(cpuPhases, "no_zygote", calls, used)

			d, reward, err := apiEpisode(ctx, cli, task)
			if err != nil || reward != 1 {
				b.Fatalf("baseline: reward %v %v", reward, err)
			}
			base = append(base, d)
			b.StartTimer()
		}
		b.ReportMetric(ms(percentile(total, 50)), "gymserver_eval_p50_ms")
		b.ReportMetric(ms(percentile(fresh, 50)), "gymserver_no_zygote_eval_p50_ms")
		b.ReportMetric(ms(percentile(storageUsr, 50)), "gymserver_storage_usr_eval_p50_ms")
		b.ReportMetric(ms(percentile(rootKept, 50)), "gymserver_root_mode_kept_eval_p50_ms")
		b.ReportMetric(ms(percentile(base, 50)), "docker_api_eval_p50_ms")
		b.ReportMetric(ms(percentile(cpu, 50)), "gymserver_eval_cpu_p50_ms")
		b.ReportMetric(ms(percentile(freshCPU, 50)), "gymserver_no_zygote_eval_cpu_p50_ms")
		b.ReportMetric(float64(viaZygote)/float64(b.N), "zygote_runs_per_eval")
		b.ReportMetric(ms(percentile(ready, 50)), "zygote_ready_in_p50_ms")
		b.ReportMetric(ms(percentile(readyCPU, 50)), "zygote_start_cpu_p50_ms")
		slices.Sort(rss)
		b.ReportMetric(float64(rss[(len(rss)-1)/2])/(1<<20), "zygote_rss_p50_MiB")
		for k, d := range phases {
			b.ReportMetric(ms(percentile(d, 50)), k+"_p50_ms")
		}
		printCPUPhases(cpuPhases)
		fmt.Printf("evaluate calculator_api p50 over %d: with the zygote %.1f ms (container CPU %.1f ms), with it and shared_usr off %.1f ms, with it and / as the image has it %.1f ms, without it %.1f ms (CPU %.1f ms), docker API baseline %.1f ms; zygote ready in %.0f ms, %.1f MiB RSS\n",
			b.N, ms(percentile(total, 50)), ms(percentile(cpu, 50)), ms(percentile(storageUsr, 50)), ms(percentile(rootKept, 50)), ms(percentile(fresh, 50)), ms(percentile(freshCPU, 50)),
			ms(percentile(base, 50)), ms(percentile(ready, 50)), float64(rss[(len(rss)-1)/2])/(1<<20))
	})
	b.Run("pytest_phases", func(b *testing.B) {
		s, sb := start(b, ef, pf)
		defer s.Close(ctx)
		if _, err := s.Evaluate(ctx); err != nil { // installs the tests
			b.Fatal(err)
		}
		noAutoload := "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
		probes := []struct{ name, cmd string }{
			{"python", "python3 -c pass"},
			{"import_pytest", "python3 -c 'import pytest'"},
			{"pytest_start", "python3 -m pytest --version"},
			{"pytest_start_no_autoload", noAutoload + "python3 -m pytest --version"},
			{"pytest_start_no_bytecode", "PYTHONPYCACHEPREFIX=/nonexistent python3 -m pytest --version"},
			{"app_import", "python3 -c 'import http.server, json, functools'"},
			{"collect", "python3 -m pytest -p no:cacheprovider --collect-only -q tests/"},
			{"run", "python3 -m pytest -p no:cacheprovider -q tests/"},
			// The same with pytest's capture files in memory (tmpfs)
			// rather than in /tmp on the storage driver: what the guard's
			// memory files save the evaluation.
			{"run_capture_in_memory", "TMPDIR=/dev/shm python3 -m pytest -p no:cacheprovider -q tests/"},
		}
		lat := make([][]time.Duration, len(probes))
		cpu := make([][]time.Duration, len(probes))
		for range b.N {
			for i, pr := range probes {
				// The shell's times builtin prints, last, the CPU time
				// of its children: the probe's own, which the machine's
				// load does not inflate the way it does the wall time.
				r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", pr.cmd + "; rc=$?; times >&2; exit $rc"},
					Dir: ec.WorkingDirectory, Env: []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONSAFEPATH=1", "PYTHONNOUSERSITE=1"},
					Timeout: time.Minute})
				if err != nil || r.ExitCode != 0 {
					b.Fatalf("%s: exit %d %s %s %v", pr.cmd, r.ExitCode, r.Stdout, r.Stderr, err)
				}
				c, err := childCPU(r.Stderr)
				if err != nil {
					b.Fatalf("%s: %v", pr.cmd, err)
				}
				lat[i] = append(lat[i], r.Duration)
				cpu[i] = append(cpu[i], c)
			}
		}
		for i, pr := range probes {
			b.ReportMetric(ms(percentile(lat[i], 50)), pr.name+"_p50_ms")
			b.ReportMetric(ms(percentile(cpu[i], 50)), pr.name+"_cpu_p50_ms")
		}
		// The evaluation's own test command (the guard, the canaries, the
		// JUnit report, -rA) against the run probe above: its processes'
		// CPU time (the times builtin) and the container's during the
		// exec call, whose difference is the shell and the executor.
		var evalCPU, execCPU []time.Duration
		for range b.N {
			// A session evaluates once: each run is a new one.
			s, sb := start(b, ef, pf)
			sb.timesReport = true
			ev, err := s.Evaluate(ctx)
			if err != nil || ev.Reward != 1 {
				b.Fatalf("evaluate: %+v %v", ev, err)
			}
			for _, c := range sb.take() {
				if c.op == "exec" && c.cpu >= 0 {
					execCPU = append(execCPU, c.cpu)
				}
			}
			sb.mu.Lock()
			evalCPU = append(evalCPU, sb.reportChildCPU...)
			sb.mu.Unlock()
			if _, err := s.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if len(evalCPU) > 0 && len(execCPU) > 0 {
			b.ReportMetric(ms(percentile(evalCPU, 50)), "eval_command_cpu_p50_ms")
			b.ReportMetric(ms(percentile(execCPU, 50)), "eval_exec_container_cpu_p50_ms")
		}
	})
}

// timesLine matches a line of the shell's times builtin: user and system
// time, as in "0m0.250000s 0m0.070000s".
var timesLine = regexp.MustCompile(`^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$`)

// childCPU returns the user plus system time of the last line of the
// times builtin's output at the end of stderr: the shell's children.
func childCPU(stderr []byte) (time.Duration, error) {
	lines := strings.Split(strings.TrimSpace(string(stderr)), "\n")
	m := timesLine.FindStringSubmatch(strings.TrimSpace(lines[len(lines)-1]))
	if m == nil {
		return 0, fmt.Errorf("no times line at the end of %q", stderr)
	}
	var total time.Duration
	for _, i := range []int{1, 3} {
		min, err1 := strconv.Atoi(m[i])
		sec, err2 := strconv.ParseFloat(m[i+1], 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("times line %q: %w", m[0], err)
		}
		total += time.Duration(min)*time.Minute + time.Duration(sec*float64(time.Second))
	}
	return total, nil
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
