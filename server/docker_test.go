package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/internal/waittest"

	"github.com/google/go-cmp/cmp"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/stdcopy"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

// The tests in this file run the server on the real Docker Engine with the
// calculator_api example.

const calculatorConfig = "../examples/calculator_api/config.json"

// shared is the Docker provider of this package's tests.
var shared dockertest.Shared

// dockerProvider returns the shared Docker provider (skipped with -short).
func dockerProvider(t testing.TB) *docker.Provider { return shared.Provider(t) }

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// startDockerServer serves the calculator_api example on Docker.
func startDockerServer(t testing.TB) (*testServer, config.Environment) {
	t.Helper()
	p := dockerProvider(t)
	cfg, err := config.Load(calculatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := envs.NewRegistry(context.Background(), cfg, envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, server.Options{Registry: reg}, nil), cfg.Environments[0]
}

// sessionContainers counts the containers of a session.
func sessionContainers(t testing.TB, session string) int {
	t.Helper()
	list, err := shared.Client().ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+session))})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// sessionFileExists reports whether path exists in the session's
// container, looking as root from outside (docker exec), not through the
// session.
func sessionFileExists(ctx context.Context, session, path string) (bool, error) {
	cli := shared.Client()
	list, err := cli.ContainerList(ctx, container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+session))})
	if err != nil || len(list) != 1 {
		return false, fmt.Errorf("the session's container: %d found (%v)", len(list), err)
	}
	ex, err := cli.ContainerExecCreate(ctx, list[0].ID, container.ExecOptions{Cmd: []string{"test", "-e", path}})
	if err != nil {
		return false, err
	}
	if err := cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{}); err != nil {
		return false, err
	}
	for {
		info, err := cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil || !info.Running {
			return err == nil && info.ExitCode == 0, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestDockerReferenceEpisode(t *testing.T) {
	ts, ec := startDockerServer(t)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	reg, err := c.Registry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env, err := reg.Lookup("calculator_api")
	if err != nil {
		t.Fatal(err)
	}
	calls, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	s, r, err := env.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// PROTOCOL.md §9 shows this episode: its limits, messages and counts.
	wantLimits := gym.EpisodeLimits{MaxActions: 60, GlobalTimeout: gym.Duration(900 * time.Second), CommandTimeout: gym.Duration(120 * time.Second)}
	if r.TaskID != "calculator_api" || len(r.Tools) == 0 || r.Limits != wantLimits || sessionContainers(t, s.ID()) != 1 {
		t.Fatalf("reset = %+v", r)
	}
	var last gym.StepResult
	for i, call := range calls {
		last, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{call}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ci := range last.Info.Calls {
			if ci.ErrorClass != "" {
				t.Fatalf("reference call %s: %s %s", ci.Name, ci.ErrorClass, ci.Error)
			}
		}
		if i == 0 && !regexp.MustCompile(`^Wrote \d+ bytes to /workspace/app\.py\.$`).MatchString(last.Observation.Text) {
			t.Errorf("write_file observation %q", last.Observation.Text)
		}
	}
	ev := last.Info.Evaluation
	if !last.Terminated || last.Reward != 1 || ev == nil || ev.Reward != 1 || !ev.Success || ev.Total != 16 || ev.Passed != 16 {
		t.Fatalf("final step: reward %v terminated %v evaluation %+v", last.Reward, last.Terminated, ev)
	}
	if last.Observation.Text != "Marked done. The episode is over; the tests will now run." || len(ev.Commands) != 1 ||
		ev.Commands[0].Command != "python3 -m pytest tests/" || ev.Commands[0].Source != "junit" || !ev.Commands[0].Success || ev.Tests[0].Command != 0 {
		t.Errorf("final step: %q, commands %+v", last.Observation.Text, ev.Commands)
	}
	fin, err := s.Close(ctx)
	if err != nil || fin.Evaluation == nil || fin.Evaluation.Reward != 1 {
		t.Fatalf("close: %+v %v", fin, err)
	}
	// The container goes in the background after the close's answer.
	waittest.For(t, "the session's container to be removed", time.Minute, func() bool { return sessionContainers(t, s.ID()) == 0 })
}

func TestDockerVanishedClientLeavesNoContainer(t *testing.T) {
	ts, _ := startDockerServer(t)
	rc := dialRaw(t, ts, nil)
	var r wire.ResetResult
	if resp := rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "calculator_api"}, &r); !resp.OK {
		t.Fatalf("reset: %+v", resp.Error)
	}
	if n := sessionContainers(t, r.SessionID); n != 1 {
		t.Fatalf("%d containers for the session, want 1", n)
	}
	rc.request(wire.Request{ID: 2, Op: wire.OpStep, Session: r.SessionID,
		ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: `{"command":"echo started > /tmp/started; sleep 100"}`}}}})
	waittest.Until(t, "the command to run in the container", 30*time.Second, func() (bool, error) {
		return sessionFileExists(t.Context(), r.SessionID, "/tmp/started")
	})
	rc.ws.NetConn().Close()
	waittest.For(t, "the container to be removed", 60*time.Second, func() bool { return sessionContainers(t, r.SessionID) == 0 })
}

// snapshotImages counts the snapshot images of the shared provider.
func snapshotImages(t testing.TB) int {
	t.Helper()
	list, err := shared.Client().ImageList(context.Background(), image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", "gymserver.snapshot"), filters.Arg("label", sandbox.LabelOwner+"="+dockerProvider(t).Owner()))})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// TestDockerSnapshotFork writes calculator_api's reference solution,
// saves the session (as an archive: no image) and forks it twice through
// the protocol: the fork that keeps the solution scores 1, the one that
// deletes it less. Closing the connection removes every container.
func TestDockerSnapshotFork(t *testing.T) {
	ts, ec := startDockerServer(t)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	calls, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	images := snapshotImages(t)
	s, _, err := c.Reset(ctx, "calculator_api", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Every reference call but the final mark_done.
	for _, call := range calls[:len(calls)-1] {
		res := act(t, s, call)
		if ci := res.Info.Calls[0]; ci.ErrorClass != "" {
			t.Fatalf("reference call %s: %s %s", ci.Name, ci.ErrorClass, ci.Error)
		}
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.EnvID != "calculator_api" || snap.SessionID != s.ID() || snap.Steps != len(calls)-1 ||
		snap.Mode != gym.SnapshotArchive || snap.Bytes == 0 {
		t.Fatalf("snapshot = %+v", snap)
	}
	forks, resets, err := c.Fork(ctx, snap.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, f := range forks {
		ids = append(ids, f.ID())
		if r := resets[i]; r.ForkOf != snap.ID || r.Steps != snap.Steps || r.Actions != snap.Actions || sessionContainers(t, f.ID()) != 1 {
			t.Fatalf("fork %d: reset %+v, %d containers", i, r, sessionContainers(t, f.ID()))
		}
	}
	kept := act(t, forks[0], tc("", gym.ToolMarkDone, `{}`))
	act(t, forks[1], tc("", gym.ToolExecuteCommand, `{"command":"rm app.py"}`))
	broken := act(t, forks[1], tc("", gym.ToolMarkDone, `{}`))
	if !kept.Terminated || kept.Reward != 1 || kept.Info.Step != snap.Steps+1 {
		t.Errorf("fork with the solution: reward %v at step %d, want 1 at step %d", kept.Reward, kept.Info.Step, snap.Steps+1)
	}
	if !broken.Terminated || broken.Reward >= 1 || broken.Info.Evaluation == nil || broken.Info.Evaluation.Mask {
		t.Errorf("fork without app.py: reward %v, evaluation %+v; want < 1, not masked", broken.Reward, broken.Info.Evaluation)
	}
	// The original is untouched by its forks.
	if res := act(t, s, tc("", gym.ToolExecuteCommand, `{"command":"test -f app.py && echo present"}`)); !strings.Contains(res.Observation.Text, "present") {
		t.Errorf("original session: %q", res.Observation.Text)
	}
	if n := snapshotImages(t); n != images {
		t.Errorf("%d snapshot images, want %d: an archive needs none", n, images)
	}
	c.Close()
	waittest.For(t, "the connection's containers and snapshot image to be removed", 2*time.Minute, func() bool {
		n := sessionContainers(t, s.ID())
		for _, id := range ids {
			n += sessionContainers(t, id)
		}
		return n == 0 && snapshotImages(t) == images
	})
}

// TestDockerSIGTERMDrain runs the real binary, sends SIGTERM while a step
// runs, and checks that the step finishes, the process exits 0 and no
// container is left.
func TestDockerSIGTERMDrain(t *testing.T) {
	dockerProvider(t) // skip with -short; builds the base image if needed
	// GYMSERVER_TEST_BINARY names a prebuilt static binary to test instead.
	bin := os.Getenv("GYMSERVER_TEST_BINARY")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "gymserver")
		build := exec.Command("go", "build", "-o", bin, "github.com/gymserver/gymserver")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "serve", "--config", calculatorConfig, "--addr", "127.0.0.1:0", "--log-level", "DEBUG")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addrc := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		listening := regexp.MustCompile(`^listening on (\S+)$`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		if t.Failed() {
			logMu.Lock()
			t.Logf("server log:\n%s", log.String())
			logMu.Unlock()
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	var addr string
	select {
	case addr = <-addrc:
	case err := <-exited:
		t.Fatalf("server exited before listening: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("server did not print its address")
	}
	c, err := gymclient.Dial(t.Context(), addr, gymclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _, err := c.Reset(t.Context(), "calculator_api", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type stepOut struct {
		res gym.StepResult
		err error
	}
	stepc := make(chan stepOut, 1)
	go func() {
		res, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{
			tc("c", gym.ToolExecuteCommand, `{"command":"sleep 2; echo finished"}`)}})
		stepc <- stepOut{res, err}
	}()
	waittest.For(t, "the step to reach the server", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `gymserver_requests_total{op="step"} 1`)
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out := <-stepc
	if out.err != nil || !strings.Contains(out.res.Observation.Text, "finished") {
		t.Errorf("step during drain: %+v %v, want it finished", out.res.Observation, out.err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("server exit: %v, want 0", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("server did not exit after SIGTERM")
	}
	if n := sessionContainers(t, s.ID()); n != 0 {
		t.Errorf("%d containers left after the drain", n)
	}
}

// BenchmarkDockerStep measures the full path, Go client -> server ->
// Docker executor, for execute_command "echo hi", beside a plain Docker API
// exec (ContainerExecCreate/Attach/Inspect) of the same command in the same
// container, alternating in the same run.
func BenchmarkDockerStep(b *testing.B) {
	ts, _ := startDockerServer(b)
	c := dial(b, ts, gymclient.Options{})
	ctx := context.Background()
	var (
		s     *gymclient.Session
		id    string // the session's container
		steps int
		limit int
	)
	// newSession replaces s: episodes end at their action limit.
	newSession := func() {
		if s != nil {
			s.Close(ctx)
		}
		var r gym.Reset
		var err error
		s, r, err = c.Reset(ctx, "calculator_api", gym.ResetRequest{})
		if err != nil {
			b.Fatal(err)
		}
		steps, limit = 0, r.Limits.MaxActions
		list, err := shared.Client().ContainerList(ctx, container.ListOptions{
			Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+s.ID()))})
		if err != nil || len(list) != 1 {
			b.Fatalf("container of the session: %v %v", list, err)
		}
		id = list[0].ID
	}
	newSession()
	defer func() { s.Close(ctx) }()
	action := gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("c", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}
	dockerExec := func() error {
		ex, err := shared.Client().ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"/bin/sh", "-c", "echo hi"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			return err
		}
		hr, err := shared.Client().ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
		if err != nil {
			return err
		}
		var out strings.Builder
		_, err = stdcopy.StdCopy(&out, io.Discard, hr.Reader)
		hr.Close()
		if err != nil {
			return err
		}
		ins, err := shared.Client().ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return err
		}
		if ins.ExitCode != 0 || out.String() != "hi\n" {
			return fmt.Errorf("docker exec: exit %d output %q", ins.ExitCode, out.String())
		}
		return nil
	}
	var ours, base latencies
	b.ResetTimer()
	for range b.N {
		if limit > 0 && steps >= limit-1 {
			b.StopTimer()
			newSession()
			b.StartTimer()
		}
		steps++
		t0 := time.Now()
		res, err := s.Step(ctx, action)
		if err != nil || res.Info.Calls[0].ExitCode != 0 {
			b.Fatalf("step: %+v %v", res.Info, err)
		}
		t1 := time.Now()
		if err := dockerExec(); err != nil {
			b.Fatal(err)
		}
		ours.add([]time.Duration{t1.Sub(t0)})
		base.add([]time.Duration{time.Since(t1)})
	}
	b.StopTimer()
	p50, bp50 := ours.quantile(0.5), base.quantile(0.5)
	b.ReportMetric(float64(p50.Microseconds()), "gymserver-p50-µs")
	b.ReportMetric(float64(ours.quantile(0.99).Microseconds()), "gymserver-p99-µs")
	b.ReportMetric(float64(bp50.Microseconds()), "docker-exec-p50-µs")
	b.Logf("echo hi, %d steps: gymserver (Go client -> server -> executor) p50 %s p99 %s | plain Docker API exec p50 %s p99 %s",
		b.N, p50, ours.quantile(0.99), bp50, base.quantile(0.99))
}

// manyTasksConfig is a config of one environment with four inline tasks.
const manyTasksConfig = `{
  "environments": [{
    "id": "many",
    "docker_image": "gymserver/python:3.11-bookworm",
    "unit_tests": ["python3 -m pytest -q tests/"],
    "tasks": [%s]
  }]
}`

// manyTask is one inline task of manyTasksConfig: op(a, b) in op.py.
func manyTask(id, op string) string {
	return fmt.Sprintf(`{
      "id": %q,
      "prompt": "Make %s(a, b) in %s.py return a %s b.",
      "files": {"%s.py": "def %s(a, b):\n    raise NotImplementedError\n"},
      "hidden_files": {"tests/test_%s.py": "from %s import %s\n\ndef test_it():\n    assert %s(6, 3) == 6 %s 3\n"},
      "reference_solution": {"contents": {"%s.py": "def %s(a, b):\n    return a %s b\n"}},
      "metadata": {"op": %q, "level": 2}
    }`, id, id, id, op, id, id, id, id, id, id, op, id, id, op, op)
}

// TestDockerManyTasks is the real-Docker twin of the tasks tests: task
// listing and task choice by id and by seed, through the Go client.
func TestDockerManyTasks(t *testing.T) {
	p := dockerProvider(t)
	dir := t.TempDir()
	ids := []string{"add", "sub", "mul", "floordiv"}
	ops := []string{"+", "-", "*", "//"}
	var tasks []string
	for i, id := range ids {
		tasks = append(tasks, manyTask(id, ops[i]))
	}
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(manyTasksConfig, strings.Join(tasks, ","))), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := envs.NewRegistry(context.Background(), cfg, envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Options{Registry: reg}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()

	env, err := c.Env(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	if spec := env.Spec(); spec.TaskCount != 4 || len(spec.Tasks) != 4 || spec.Tasks[3].Metadata["level"] != float64(2) {
		t.Fatalf("spec: task_count %d, tasks %+v", spec.TaskCount, spec.Tasks)
	}
	page, total, err := c.Tasks(ctx, "many", 1, 2)
	if err != nil || total != 4 || !cmp.Equal(taskIDs(page), ids[1:3]) || page[0].Metadata["op"] != "-" || !page[0].HasReference {
		t.Fatalf("tasks 1+2: %+v, total %d, %v", page, total, err)
	}
	if page, total, err := c.Tasks(ctx, "many", 4, 10); err != nil || total != 4 || len(page) != 0 {
		t.Errorf("tasks past the end: %+v, total %d, %v", page, total, err)
	}
	all, total := env.Tasks(0, -1)
	if total != 4 || !cmp.Equal(taskIDs(all), ids) {
		t.Fatalf("Env.Tasks(0, -1) = %v, %d", taskIDs(all), total)
	}

	reset := func(req gym.ResetRequest) gym.Reset {
		t.Helper()
		s, r, err := env.Reset(ctx, req)
		if err != nil {
			t.Fatalf("reset %+v: %v", req, err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		return r
	}
	// By id: that task's prompt, and its starter file in the sandbox.
	r := reset(gym.ResetRequest{Task: "mul"})
	if r.TaskID != "mul" || r.Prompt != all[2].Prompt {
		t.Errorf("reset mul: task %q prompt %q", r.TaskID, r.Prompt)
	}
	s, _, err := c.Reset(ctx, "many", gym.ResetRequest{Task: "sub"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c", gym.ToolExecuteCommand, `{"command":"cat sub.py"}`)}})
	if err != nil || !strings.Contains(res.Observation.Text, "def sub(a, b)") {
		t.Errorf("starter file of sub: %q %v", res.Observation.Text, err)
	}
	if _, err := s.Close(ctx); err != nil {
		t.Error(err)
	}
	// By seed: the same task twice, tasks[SeedIndex(seed, n)].
	for _, seed := range []int64{0, 42, -7} {
		want := ids[envs.SeedIndex(seed, len(ids))]
		for range 2 {
			if r := reset(gym.ResetRequest{Seed: &seed}); r.TaskID != want {
				t.Errorf("reset with seed %d: task %q, want %q", seed, r.TaskID, want)
			}
		}
	}
	var ce *gymclient.Error
	if _, _, err := env.Reset(ctx, gym.ResetRequest{Task: "nope"}); !errors.As(err, &ce) || ce.Code != gym.ClassNotFound {
		t.Errorf("reset of an unknown task: %v, want not_found", err)
	}
}
