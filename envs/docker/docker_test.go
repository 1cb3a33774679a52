package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/docker/dockertest"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// sessionIDPattern is the form of the session ids sandbox.NewSessionID mints.
var sessionIDPattern = regexp.MustCompile(`^s-[0-9a-f]{24}$`)

// newProvider returns a provider of the test's own; see dockertest.New.
func newProvider(t testing.TB) (*docker.Provider, *client.Client) {
	t.Helper()
	return dockertest.New(t, nil)
}

// baseSandbox starts a sandbox of the base image prepared with the
// working directory /workspace, as spec says (its Image and WorkDir are
// set here); it is closed when the test ends.
func baseSandbox(t testing.TB, p *docker.Provider, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	image, err := p.Prepare(t.Context(), sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	spec.Image, spec.WorkDir = image, "/workspace"
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

// TestConformance runs the whole sandbox conformance suite on the real
// Docker Engine.
func TestConformance(t *testing.T) {
	p, cli := newProvider(t)
	sandboxtest.Run(t, sandboxtest.Suite{
		Provider:  p,
		BaseImage: baseimage.Python,
		Processes: true,
		Gone: func(ctx context.Context, id string) (bool, error) {
			_, err := cli.ContainerInspect(ctx, id)
			if errdefs.IsNotFound(err) {
				return true, nil
			}
			return false, err
		},
	})
}

// TestContainerHardening checks the container's settings as the Engine
// reports them.
func TestContainerHardening(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace",
		Labels:    map[string]string{sandbox.LabelSession: "s-caller", sandbox.LabelTask: "t"},
		Resources: sandbox.Resources{MemoryBytes: 256 << 20, CPUs: 0.5, PIDs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	info, err := cli.ContainerInspect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	if hc.NetworkMode != "none" || hc.Privileged || hc.Memory != 256<<20 || hc.NanoCPUs != 5e8 ||
		hc.PidsLimit == nil || *hc.PidsLimit != 100 {
		t.Errorf("host config: network %s privileged %v memory %d cpus %d pids %v", hc.NetworkMode, hc.Privileged, hc.Memory, hc.NanoCPUs, hc.PidsLimit)
	}
	if len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" {
		t.Errorf("cap drop %v", hc.CapDrop)
	}
	// The machinery's capabilities, and no other (SYS_NICE: the executor
	// gives its threads the normal policy back; see
	// TestCommandPolicyFromIdleThreads).
	var added []string
	for _, c := range hc.CapAdd {
		added = append(added, strings.TrimPrefix(c, "CAP_")) // as the engine spells them
	}
	sort.Strings(added)
	if want := []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID", "SYS_NICE"}; !slices.Equal(added, want) {
		t.Errorf("cap add %v, want %v", added, want)
	}
	// The only binds are the shared executor's volume, read-only, and
	// the directory of the executor's socket, gone from the host once the
	// sandbox started (see TestExecutorSocket).
	if len(hc.Binds) != 2 || !strings.HasPrefix(hc.Binds[0], "gymserver-exec-") || !strings.HasSuffix(hc.Binds[0], ":/.gymserver:ro") {
		t.Errorf("binds %v", hc.Binds)
	} else if src, ok := strings.CutSuffix(hc.Binds[1], ":/.gymserver-run"); !ok {
		t.Errorf("binds %v", hc.Binds)
	} else if _, err := os.Stat(src); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket directory %s after the start: %v, want it gone", src, err)
	}
	opts := append([]string(nil), hc.SecurityOpt...)
	sort.Strings(opts)
	if len(opts) == 0 || opts[0] != "no-new-privileges" && opts[0] != "no-new-privileges:true" {
		t.Errorf("security options %v", opts)
	}
	// The container's main process is the executor, root with the
	// capabilities above (privilege separation); the agent's commands run
	// as the agent's uid, which is not root.
	if info.Config.User != "0:0" {
		t.Errorf("container user %q, want the machinery's 0:0 (the executor)", info.Config.User)
	}
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "id -u; id -g; grep CapEff /proc/self/status"}})
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(r.Stdout)); len(f) != 4 || f[0] == "0" || f[1] == "0" || f[3] != "0000000000000000" {
		t.Errorf("an agent command runs as %q, want a non-root uid and gid without capabilities", r.Stdout)
	}
	l := info.Config.Labels
	// The provider mints the session id; a caller's is not used.
	if l[sandbox.LabelOwner] != p.Owner() || l[sandbox.LabelSession] != sb.SessionID() || !sessionIDPattern.MatchString(sb.SessionID()) ||
		l[sandbox.LabelTask] != "t" || l[sandbox.LabelLease] == "" {
		t.Errorf("labels %v, session id %q", l, sb.SessionID())
	}
}

// TestReapDeadOwner checks that a new provider removes the containers of
// an owner process that is gone, of an earlier process with this pid and
// of an expired lease, and leaves alone those of a live owner on another
// host and of another open provider of this process.
func TestReapDeadOwner(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	// A process that has exited gives a pid that is (almost surely) free.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	mk := func(labels map[string]string) string {
		resp, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"sleep", "600"}, Labels: labels}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true}) })
		return resp.ID
	}
	deadOwner := mk(map[string]string{sandbox.LabelOwner: fmt.Sprintf("%s:%d:test", host, dead.Process.Pid)})
	ourPid := mk(map[string]string{sandbox.LabelOwner: fmt.Sprintf("%s:%d:earlier", host, os.Getpid())})
	sibling := mk(map[string]string{sandbox.LabelOwner: p.Owner()})
	expired := mk(map[string]string{sandbox.LabelOwner: "other-host:1:test", sandbox.LabelLease: "1000"})
	alive := mk(map[string]string{sandbox.LabelOwner: "other-host:1:test",
		sandbox.LabelLease: strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)})
	if err := p.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	// A second provider of this process reaps as it starts.
	p2, _ := newProvider(t)
	if err := p2.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"dead owner": deadOwner, "expired lease": expired, "earlier process with our pid": ourPid} {
		if _, err := cli.ContainerInspect(ctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("%s: container still there after reap (%v)", name, err)
		}
	}
	if _, err := cli.ContainerInspect(ctx, alive); err != nil {
		t.Errorf("live owner's container was reaped: %v", err)
	}
	if _, err := cli.ContainerInspect(ctx, sibling); err != nil {
		t.Errorf("the container of another open provider of this process was reaped: %v", err)
	}
}

// BenchmarkExecEcho measures `echo hi` through the executor beside a plain
// Docker API exec (create, attach, inspect) of the same command, alone and
// as a step runs it (/bin/sh -c "/bin/echo hi"), and as a step with
// persistent_shell runs it; and the machine's floor, /bin/echo started on
// the host with no container (host_exec). Ours runs with the shared /usr; the baselines
// run in a sandbox that reads /usr through the storage driver. The
// _root_mode_kept arm is ours with "/" keeping its group bits
// (docker.Options.KeepRootMode); the _attach_stream arms are ours with the
// client on the container's attach stream instead of the executor's
// socket (docker.Options.AttachStream).
// Run: go test -run '^$' -bench ExecEcho ./envs/docker/
func BenchmarkExecEcho(b *testing.B) {
	p, cli := newProvider(b)
	ctx := context.Background()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		b.Fatal(err)
	}
	// Ours with the shared /usr (the environments' default), and a
	// sandbox reading /usr through the storage driver, as before it and as
	// a plain Docker container does: the baselines run there.
	sb, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(ctx)
	plain, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace"})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close(ctx)
	// Ours with "/" as the image has it (group bits on), as before the
	// executor cleared them.
	kp, _ := dockertest.NewWith(b, docker.Options{KeepRootMode: true})
	kept, err := kp.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true})
	if err != nil {
		b.Fatal(err)
	}
	defer kept.Close(ctx)
	// Ours with the client on the attach stream, as before executor
	// sockets.
	ap, _ := dockertest.NewWith(b, docker.Options{AttachStream: true})
	att, err := ap.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true})
	if err != nil {
		b.Fatal(err)
	}
	defer att.Close(ctx)

	b.Run("executor", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "hi"}, Timeout: 10 * time.Second})
			if err != nil || string(r.Stdout) != "hi\n" {
				b.Fatalf("exec: %+v %v", r, err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
	// The transport alone: a request that starts no process, over the
	// executor's socket and over the attach stream.
	for _, c := range []struct {
		name string
		sb   sandbox.Sandbox
	}{{"executor_read_file", sb}, {"executor_read_file_attach_stream", att}} {
		b.Run(c.name, func(b *testing.B) {
			if err := c.sb.WriteFile(ctx, "hi.txt", []byte("hi\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				data, err := c.sb.ReadFile(ctx, "hi.txt", 100)
				if err != nil || string(data) != "hi\n" {
					b.Fatalf("read: %q %v", data, err)
				}
				lat = append(lat, time.Since(start))
			}
			report(b, lat)
		})
	}
	// A write_file as the agent: a file written whole under a temporary
	// name, its mode set, renamed into place.
	b.Run("executor_write_file", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if err := sb.WriteFile(ctx, "out.txt", []byte("hi\n"), 0o644); err != nil {
				b.Fatalf("write: %v", err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
	b.Run("docker_api_exec", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			out, err := dockerExec(ctx, cli, plain.ID(), []string{"echo", "hi"})
			if err != nil || out != "hi\n" {
				b.Fatalf("docker exec: %q %v", out, err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
	// The machine's own floor: /bin/echo hi started by this process on the
	// host (os/exec: fork, exec, wait), with no container, no executor and
	// no transport. Where starting a program costs this much, no step of it
	// can cost less.
	b.Run("host_exec", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			out, err := exec.Command("/bin/echo", "hi").Output()
			if err != nil || string(out) != "hi\n" {
				b.Fatalf("host exec: %q %v", out, err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
	// What an execute_command step of "/bin/echo hi" runs, through the
	// executor and through a plain Docker API exec; and through the
	// executor with the locale read from its directory of twelve files
	// (LOCPATH makes glibc skip the archive), as the base image did before
	// it had a locale archive; and through the executor of the sandbox
	// whose /usr comes through the storage driver. The executor starts
	// /bin/echo itself (a plain line needs no shell); the lines with a
	// trailing ";" go through /bin/sh, as every line did before.
	step := []string{"/bin/sh", "-c", "/bin/echo hi"}
	for _, c := range []struct {
		name string
		sb   sandbox.Sandbox
		env  []string
		line string
	}{{"step_executor", sb, nil, "/bin/echo hi"}, {"step_executor_via_sh", sb, nil, "/bin/echo hi;"},
		{"step_executor_root_mode_kept", kept, nil, "/bin/echo hi"}, {"step_executor_attach_stream", att, nil, "/bin/echo hi"},
		{"step_executor_storage_usr", plain, nil, "/bin/echo hi"}, {"step_executor_storage_usr_via_sh", plain, nil, "/bin/echo hi;"},
		{"step_executor_locale_files", plain, []string{"LOCPATH=/usr/lib/locale"}, "/bin/echo hi;"}} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				r, err := c.sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", c.line}, Env: c.env, Timeout: 10 * time.Second})
				if err != nil || string(r.Stdout) != "hi\n" {
					b.Fatalf("exec: %+v %v", r, err)
				}
				lat = append(lat, time.Since(start))
			}
			report(b, lat)
		})
	}
	// The same steps with persistent_shell: the command line goes to the
	// sandbox's long-lived shell; "echo hi" is then a builtin and starts
	// no process.
	for _, c := range []struct{ name, cmd string }{{"step_shell", "/bin/echo hi"}, {"step_shell_builtin", "echo hi"}} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{c.cmd}, Shell: true, Timeout: 10 * time.Second})
				if err != nil || string(r.Stdout) != "hi\n" {
					b.Fatalf("exec: %+v %v", r, err)
				}
				lat = append(lat, time.Since(start))
			}
			report(b, lat)
		})
	}
	b.Run("step_docker_api_exec", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			out, err := dockerExec(ctx, cli, plain.ID(), step)
			if err != nil || out != "hi\n" {
				b.Fatalf("docker exec: %q %v", out, err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
}

// dockerExec runs argv the plain way: exec create, attach, read to EOF,
// inspect for the exit code.
func dockerExec(ctx context.Context, cli *client.Client, id string, argv []string) (string, error) {
	return dockerExecAs(ctx, cli, id, "", argv)
}

// dockerExecAs is dockerExec as user ("": the container's).
func dockerExecAs(ctx context.Context, cli *client.Client, id, user string, argv []string) (string, error) {
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, User: user, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", err
	}
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", err
	}
	defer att.Close()
	var out, errOut stringWriter
	if _, err := stdcopy.StdCopy(&out, &errOut, att.Reader); err != nil && err != io.EOF {
		return "", err
	}
	if _, err := cli.ContainerExecInspect(ctx, ex.ID); err != nil {
		return "", err
	}
	return string(out), nil
}

type stringWriter []byte

func (w *stringWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }

// report adds the median and 99th percentile latencies to the benchmark
// output.
func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}

// TestSnapshotImagesRemovedOnClose commits a sandbox, starts a sandbox from
// the image, and checks that closing the provider removes both (the
// dockertest cleanup fails the test if an image of the owner remains).
func TestSnapshotImagesRemovedOnClose(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "saved.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, err := sb.(sandbox.Committer).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := p.Create(ctx, sandbox.Spec{Image: ref, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := fork.ReadFile(ctx, "saved.txt", 100); err != nil || string(data) != "kept" {
		t.Fatalf("file in the fork: %q %v", data, err)
	}
	if r, err := fork.Exec(ctx, sandbox.ExecRequest{Argv: []string{"id", "-u"}}); err != nil || string(r.Stdout) == "0\n" {
		t.Errorf("fork runs as %q (%v), want the sandbox user", r.Stdout, err)
	}
}

// TestStoppedExecutorBoundsExec stops the executor in a sandbox (SIGSTOP,
// as root from outside): a command that was running without a timeout
// and one sent afterwards with a timeout both end, with a sandbox error,
// within their bounds instead of hanging; Close still removes the sandbox.
func TestStoppedExecutorBoundsExec(t *testing.T) {
	p, cli := newProvider(t)
	const grace, alive = 2 * time.Second, 300 * time.Millisecond
	docker.SetExecBounds(p, grace, alive)
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	type result struct {
		err   error
		after time.Duration
	}
	exec := func(timeout time.Duration) <-chan result {
		out := make(chan result, 1)
		start := time.Now()
		go func() {
			_, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "1000"}, Timeout: timeout})
			out <- result{err, time.Since(start)}
		}()
		return out
	}
	untimed := exec(0)
	// The command runs (the executor answers pings meanwhile) ...
	time.Sleep(3 * alive)
	select {
	case r := <-untimed:
		t.Fatalf("a command without a timeout ended while the executor worked: %v", r.err)
	default:
	}
	// ... until the executor stops.
	stopped, err := dockerExec(ctx, cli, sb.ID(), []string{"/bin/sh", "-c",
		`for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "/.gymserver/executor "*"serve "*) kill -STOP ${p#/proc/} && echo $p;; esac; done`})
	if err != nil || stopped == "" {
		t.Fatalf("stop the executor: %q %v", stopped, err)
	}
	stopAt := time.Now()
	timed := exec(time.Second)
	for _, tt := range []struct {
		name  string
		res   <-chan result
		bound time.Duration
	}{
		{"without a timeout", untimed, time.Since(stopAt) + alive + grace},
		{"with a timeout of 1s", timed, time.Second + grace},
	} {
		select {
		case r := <-tt.res:
			if gym.ClassOf(r.err) != gym.ClassSandbox {
				t.Errorf("command %s on a stopped executor: %v, want a sandbox error", tt.name, r.err)
			}
		case <-time.After(tt.bound + 10*time.Second):
			t.Fatalf("command %s on a stopped executor still runs after %s", tt.name, time.Since(stopAt))
		}
	}
	if err := sb.Close(ctx); err != nil {
		t.Errorf("close a sandbox whose executor stopped: %v", err)
	}
}

// TestBaseImage checks what the built-in base image promises the agent and
// the evaluator: it is of the current recipe, Python's bytecode is there
// for the agent to read but not to write, text is UTF-8 (through the
// locale archive, which makes setlocale cheap), and the loader finds its
// cache and libraries under /usr, while ldconfig still works.
func TestBaseImage(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cli.ImageInspect(ctx, baseimage.Python)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.Config.Labels[baseimage.RecipeLabel], baseimage.Recipe(baseimage.Python); got != want && got != "dockerfile" {
		t.Fatalf("%s has recipe %q, want %q: run `gymserver image build`", baseimage.Python, got, want)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	for _, tc := range []struct {
		name, script, want string
	}{
		{"bytecode", `import os, _pytest.python as m, pytest
c = m.__cached__
print(os.path.isfile(c), os.access(c, os.R_OK), os.access(c, os.W_OK), os.access(os.path.dirname(c), os.W_OK))`, "True True False False\n"},
		{"encoding", `import sys, locale; print(sys.stdout.encoding, sys.getfilesystemencoding(), locale.getlocale()[1], sys.flags.utf8_mode)`, "utf-8 utf-8 UTF-8 0\n"},
	} {
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", tc.script}, Timeout: time.Minute})
		if err != nil || r.ExitCode != 0 || string(r.Stdout) != tc.want {
			t.Errorf("%s: got %q (exit %d, stderr %q, %v), want %q", tc.name, r.Stdout, r.ExitCode, r.Stderr, err, tc.want)
		}
	}
	// A locale-aware program counts characters, not bytes.
	r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `printf 'h\303\251' | wc -m; test -f /usr/lib/locale/locale-archive && echo archive`}, Timeout: time.Minute})
	if err != nil || string(r.Stdout) != "2\narchive\n" {
		t.Errorf("wc -m of two characters and the locale archive: %q (stderr %q, %v)", r.Stdout, r.Stderr, err)
	}
	// The loader's cache and link stay on /usr (see build-rootfs.sh): the
	// cache lists no library through /lib.
	r, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c",
		`readlink /etc/ld.so.cache /usr/lib64/ld-linux-x86-64.so.2; ldconfig -p | grep -c ' => /lib/'; ldconfig -p | grep -q ' => /usr/lib/x86_64-linux-gnu/libc.so.6$' && echo libc`},
		Timeout: time.Minute})
	if want := "../usr/lib/ld.so.cache\n../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\n0\nlibc\n"; err != nil || string(r.Stdout) != want {
		t.Errorf("the loader's cache and link: %q (stderr %q, %v), want %q", r.Stdout, r.Stderr, err, want)
	}
	// A program named through /bin starts by its path under /usr: the
	// executor reads "/"'s links (see the executor's rootLinks).
	execFn, err := os.ReadFile("../executor/testdata/execfn.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "execfn.py", execFn, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "/bin/python3 execfn.py"}, Timeout: time.Minute})
	if err != nil || string(r.Stdout) != "/usr/bin/python3\n" {
		t.Errorf("/bin/python3 started by: %q (stderr %q, %v), want /usr/bin/python3", r.Stdout, r.Stderr, err)
	}
	// ldconfig (a library installed by a task's image) still works: it
	// writes a plain cache over the link, and programs run.
	r, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c",
		`ldconfig && test -f /etc/ld.so.cache && ! test -L /etc/ld.so.cache && python3 -c 'print("ok")'`}, Priv: true, Timeout: time.Minute})
	if err != nil || r.ExitCode != 0 || string(r.Stdout) != "ok\n" {
		t.Errorf("ldconfig as root: exit %d, %q (stderr %q, %v)", r.ExitCode, r.Stdout, r.Stderr, err)
	}
}

// TestOOMKillReported checks that a command the memory limit kills is
// reported as such, each time (the executor keeps the cgroup's counter
// open and rereads it), and that the commands around it are not.
func TestOOMKillReported(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	sb := baseSandbox(t, p, sandbox.Spec{Resources: sandbox.Resources{MemoryBytes: 96 << 20}})
	// A bytearray is zero-filled: its pages are touched, so the kernel's
	// OOM killer ends the process (SIGKILL) rather than malloc failing.
	hog := sandbox.ExecRequest{Argv: []string{"python3", "-c", "b = bytearray(512 << 20)"}, Timeout: time.Minute}
	calm := sandbox.ExecRequest{Argv: []string{"echo", "ok"}, Timeout: time.Minute}
	for i := range 2 {
		r, err := sb.Exec(ctx, calm)
		if err != nil || r.OOMKilled || string(r.Stdout) != "ok\n" {
			t.Fatalf("round %d: calm command before the hog: %+v, %v", i, r, err)
		}
		r, err = sb.Exec(ctx, hog)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OOMKilled || r.Signal != "SIGKILL" {
			t.Fatalf("round %d: hog: oom %v signal %q exit %d stderr %q", i, r.OOMKilled, r.Signal, r.ExitCode, r.Stderr)
		}
	}
	r, err := sb.Exec(ctx, calm)
	if err != nil || r.OOMKilled {
		t.Fatalf("calm command after the hogs: %+v, %v", r, err)
	}
}
