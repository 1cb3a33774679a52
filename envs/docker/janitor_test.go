package docker_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/internal/waittest"
)

// labelJanitorTest marks what these tests create, with a value of each
// test's own.
const labelJanitorTest = "gymserver.test-janitor"

var (
	gymserverOnce sync.Once
	gymserverPath string
	gymserverErr  error
)

// gymserverBinary builds the gymserver command (which runs the janitor as
// "__janitor") once per test process and returns its path.
func gymserverBinary(t *testing.T) string {
	t.Helper()
	gymserverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gymserver-janitor-")
		if err != nil {
			gymserverErr = err
			return
		}
		gymserverPath = filepath.Join(dir, "gymserver")
		cmd := exec.Command("go", "build", "-o", gymserverPath, "github.com/gymserver/gymserver")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			gymserverErr = &exec.ExitError{Stderr: out}
		}
	})
	if gymserverErr != nil {
		t.Fatalf("build gymserver: %v", gymserverErr)
	}
	return gymserverPath
}

// randomTag returns a fresh hex string for owner ids and labels.
func randomTag() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// janitorFixture makes labelled Docker objects for one test and removes
// whatever of them remains when the test ends.
type janitorFixture struct {
	t   *testing.T
	cli *client.Client
	tag string
}

func newJanitorFixture(t *testing.T) *janitorFixture {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker")
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	f := &janitorFixture{t: t, cli: cli, tag: randomTag()}
	t.Cleanup(func() {
		ctx := context.Background()
		sel := filters.NewArgs(filters.Arg("label", labelJanitorTest+"="+f.tag))
		if list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: sel}); err == nil {
			for _, c := range list {
				_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
		if list, err := cli.ImageList(ctx, image.ListOptions{Filters: sel}); err == nil {
			for _, img := range list {
				_, _ = cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
		cli.Close()
	})
	return f
}

// container starts a container labelled with owner.
func (f *janitorFixture) container(owner string) string {
	f.t.Helper()
	ctx := f.t.Context()
	resp, err := f.cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"sleep", "600"},
		Labels: map[string]string{sandbox.LabelOwner: owner, labelJanitorTest: f.tag}}, nil, nil, nil, "")
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		f.t.Fatal(err)
	}
	return resp.ID
}

// image commits an image labelled with owner and the extra label key,
// e.g. "gymserver.snapshot" for a snapshot image.
func (f *janitorFixture) image(owner, key string) string {
	f.t.Helper()
	ctx := f.t.Context()
	tmp, err := f.cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"true"},
		Labels: map[string]string{labelJanitorTest: f.tag}}, nil, nil, nil, "")
	if err != nil {
		f.t.Fatal(err)
	}
	defer f.cli.ContainerRemove(context.Background(), tmp.ID, container.RemoveOptions{Force: true})
	labels := map[string]string{sandbox.LabelOwner: owner, labelJanitorTest: f.tag, key: "1"}
	ref := "gymserver-snapshot:test-janitor-" + f.tag + "-" + randomTag()
	resp, err := f.cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{Reference: ref, Config: &container.Config{Labels: labels}})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.ID
}

// exists reports whether the container or image id is still there.
func (f *janitorFixture) exists(kind, id string) bool {
	f.t.Helper()
	var err error
	if kind == "container" {
		_, err = f.cli.ContainerInspect(f.t.Context(), id)
	} else {
		_, err = f.cli.ImageInspect(f.t.Context(), id)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

// TestJanitorRemovesOnlyItsOwner runs the janitor in process on a pipe
// whose writer goes away without a bye, as when the provider is killed:
// its owner's container and snapshot image go; another owner's, and its
// owner's prepared image (a shared cache), stay.
func TestJanitorRemovesOnlyItsOwner(t *testing.T) {
	f := newJanitorFixture(t)
	mine, other := "test-janitor-"+f.tag+"-mine", "test-janitor-"+f.tag+"-other"
	myContainer, otherContainer := f.container(mine), f.container(other)
	mySnapshot, otherSnapshot := f.image(mine, "gymserver.snapshot"), f.image(other, "gymserver.snapshot")
	myPrepared := f.image(mine, "gymserver.prepared")

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var log strings.Builder
	var logMu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- docker.RunJanitor(t.Context(), docker.JanitorOptions{
			Owner:  mine,
			Watch:  r,
			Client: f.cli,
			Grace:  100 * time.Millisecond,
			Logger: newTestLogger(&log, &logMu),
		})
	}()
	// While the writer lives, the janitor waits and touches nothing.
	select {
	case err := <-done:
		t.Fatalf("janitor returned while its provider lives: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if !f.exists("container", myContainer) || !f.exists("image", mySnapshot) {
		t.Fatal("the janitor removed its owner's objects while the owner lives")
	}
	w.Close() // the provider is gone, without a bye
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("janitor: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("janitor did not return")
	}
	if f.exists("container", myContainer) {
		t.Error("its owner's container is still there")
	}
	if f.exists("image", mySnapshot) {
		t.Error("its owner's snapshot image is still there")
	}
	if !f.exists("container", otherContainer) || !f.exists("image", otherSnapshot) {
		t.Error("another owner's container or snapshot image was removed")
	}
	if !f.exists("image", myPrepared) {
		t.Error("its owner's prepared image was removed")
	}
	logMu.Lock()
	defer logMu.Unlock()
	for _, want := range []string{"gone without closing", "janitor removed container", "janitor removed snapshot image", "removed=2"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

// TestJanitorGivesUpOnUnreachableEngine checks that a janitor whose engine
// does not answer exits with an error after RetryFor instead of waiting
// forever.
func TestJanitorGivesUpOnUnreachableEngine(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.Close()
	start := time.Now()
	err = docker.RunJanitor(t.Context(), docker.JanitorOptions{Owner: "test-janitor-unreachable", Watch: r, Client: cli,
		Grace: time.Millisecond, RetryFor: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("RunJanitor = %v, want it to give up", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("gave up after %s, want about 2s", d)
	}
}

// TestJanitorCancelled checks that cancelling the janitor's context while
// the provider lives returns at once, without error, and without any
// removal (the client would fail every call).
func TestJanitorCancelled(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- docker.RunJanitor(ctx, docker.JanitorOptions{Owner: "test-janitor-cancel", Watch: r, Client: cli})
	}()
	time.Sleep(100 * time.Millisecond) // let it block on the pipe; the result does not depend on it
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunJanitor after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunJanitor did not return after its context was cancelled")
	}
}

// TestProviderJanitorCleanClose runs a provider with the gymserver
// janitor, makes a sandbox and a snapshot image, and closes it: Close
// waits for the janitor, which exits successfully, and nothing of the
// provider remains.
func TestProviderJanitorCleanClose(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := gymserverBinary(t)
	logPath := filepath.Join(t.TempDir(), "janitor.log")
	p, cli := dockertest.NewWith(t, docker.Options{Janitor: []string{bin, "__janitor", "--log", logPath}})
	ctx := t.Context()
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := sb.(sandbox.Committer).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n, err := dockertest.Leftovers(ctx, cli, p.Owner()); err != nil || n != 0 {
		t.Errorf("%d containers of the provider left (err %v)", n, err)
	}
	if _, err := cli.ImageInspect(ctx, snap); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot image %s: inspect err %v, want not found", snap, err)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("janitor log: %v", err)
	}
	for _, want := range []string{"provider closed", "janitor done", "owner=" + p.Owner()} {
		if !strings.Contains(string(log), want) {
			t.Errorf("janitor log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), "gone without closing") {
		t.Errorf("janitor did not see the bye:\n%s", log)
	}
}

// lockedWriter appends to a builder under a mutex, for logs read while a
// goroutine may still write.
type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// newTestLogger returns a text logger into b, guarded by mu.
func newTestLogger(b *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{b, mu}, nil))
}

// Environment of TestJanitorHelperProcess, set by
// TestJanitorAfterSIGKILL for the process it kills.
const (
	envHelperOwner    = "GYMSERVER_TEST_JANITOR_OWNER"
	envHelperExecutor = "GYMSERVER_TEST_JANITOR_EXECUTOR"
	envHelperJanitor  = "GYMSERVER_TEST_JANITOR_BIN"
	envHelperLog      = "GYMSERVER_TEST_JANITOR_LOG"
	helperReady       = "janitor-helper-ready "
)

// TestJanitorHelperProcess is not a test: run by TestJanitorAfterSIGKILL
// in a process of its own, it opens a provider with a janitor, starts a
// sandbox, commits a snapshot image, prints their ids and waits to be
// killed. Should its parent die first, it exits when its stdin closes.
func TestJanitorHelperProcess(t *testing.T) {
	owner := os.Getenv(envHelperOwner)
	if owner == "" {
		t.Skip("helper process of TestJanitorAfterSIGKILL")
	}
	ctx := context.Background()
	p, err := docker.New(ctx, docker.Options{
		ExecutorBinary: os.Getenv(envHelperExecutor),
		Owner:          owner,
		Janitor:        []string{os.Getenv(envHelperJanitor), "__janitor", "--grace", "500ms", "--log", os.Getenv(envHelperLog)},
		CreatedPool:    1,
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Image: img, WorkDir: "/workspace"}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := sb.(sandbox.Committer).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitCreated(t, p, spec, 1)
	list, err := p.Client().ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", sandbox.LabelOwner+"="+owner), filters.Arg("status", "created"))})
	if err != nil || len(list) != 1 {
		t.Fatalf("created containers: %+v %v", list, err)
	}
	fmt.Printf("%s%s %s %s\n", helperReady, sb.ID(), snap, list[0].ID)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(1) // without closing the provider: its janitor cleans up
}

// TestJanitorAfterSIGKILL kills, with SIGKILL, a process whose provider has
// a janitor, a sandbox, a snapshot image and a created (not started)
// container of its created pool, and checks that all go within a bound:
// the sandbox by itself (its executor ends with its stream) or by the
// janitor, the image and the created container by the janitor alone. The
// provider's owner is not of the "<host>:<pid>:<random>" form, so no other
// gymserver on the host reaps them meanwhile.
func TestJanitorAfterSIGKILL(t *testing.T) {
	const within = 30 * time.Second
	f := newJanitorFixture(t)
	owner := "test-janitor-" + f.tag + "-killed"
	logPath := filepath.Join(t.TempDir(), "janitor.log")
	cmd := exec.Command(os.Args[0], "-test.run=^TestJanitorHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		envHelperOwner+"="+owner,
		envHelperExecutor+"="+sandboxtest.ExecutorBinary(t),
		envHelperJanitor+"="+gymserverBinary(t),
		envHelperLog+"="+logPath)
	cmd.Stderr = os.Stderr
	// Held open until the helper is killed; see TestJanitorHelperProcess.
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		// On failure, remove what the killed helper left.
		ctx := context.Background()
		_ = docker.RemoveOwned(ctx, f.cli, owner)
		imgs, _ := f.cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", "gymserver.snapshot"), filters.Arg("label", sandbox.LabelOwner+"="+owner))})
		for _, img := range imgs {
			_, _ = f.cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
	ready := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), helperReady); ok {
				ready <- strings.Fields(rest)
			}
		}
	}()
	var ids []string
	select {
	case ids = <-ready:
	case <-waited:
		t.Fatal("helper exited before it was ready")
	case <-time.After(5 * time.Minute):
		t.Fatal("helper not ready")
	}
	if len(ids) != 3 {
		t.Fatalf("helper printed %q, want a container id, an image and a container id", ids)
	}
	sandboxID, snapshot, created := ids[0], ids[1], ids[2]
	if !f.exists("container", sandboxID) || !f.exists("image", snapshot) || !f.exists("container", created) {
		t.Fatal("the helper's sandbox, snapshot image or created container is not there before the kill")
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-waited
	killed := time.Now()
	waittest.Until(t, "the killed provider's sandbox, snapshot image and created container to go", within, func() (bool, error) {
		return !f.exists("container", sandboxID) && !f.exists("image", snapshot) && !f.exists("container", created), nil
	})
	t.Logf("sandbox, snapshot image and created container gone %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	waittest.Until(t, "the janitor to log that it is done", within, func() (bool, error) {
		b, err := os.ReadFile(logPath)
		return err == nil && strings.Contains(string(b), "janitor done"), nil
	})
	b, _ := os.ReadFile(logPath)
	// The sandbox may have gone by itself before the janitor looked.
	for _, want := range []string{"gone without closing", "janitor removed container", "container=" + created[:12], "janitor removed snapshot image"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("janitor log lacks %q:\n%s", want, b)
		}
	}
}
