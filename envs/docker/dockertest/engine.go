package dockertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// Engine is an extra, independent Docker Engine a test starts: a dockerd
// process of its own (with its own containerd) on a unix socket, with its
// own data root, exec root, cgroup parent and network namespace (its
// default bridge has no way out, and it sets no iptables rules). It uses the storage driver of the host's engine when it can run
// nested (fuse-overlayfs, overlay2), else vfs. It needs root.
type Engine struct {
	t      testing.TB
	name   string
	dir    string
	driver string
	// extra are more dockerd arguments.
	extra []string
	cmd   *exec.Cmd
	done  chan struct{}
	cli   *client.Client
	// running is the pid of the running dockerd, or 0.
	running atomic.Int64
}

// engineStartTimeout bounds the wait for a new dockerd to answer.
const engineStartTimeout = 60 * time.Second

// StartEngine starts an engine named name (letters and digits) and stops
// it when the test ends, leaving nothing: its containers and their
// processes, its dockerd and containerd, its mounts, cgroups and files.
// It skips the test when dockerd is missing or the test is not root.
func StartEngine(t testing.TB, name string) *Engine {
	t.Helper()
	return startEngine(t, name, nil)
}

// startEngine starts an engine with more dockerd arguments.
func startEngine(t testing.TB, name string, extra []string) *Engine {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Docker Engines; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("starting a Docker Engine needs root")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("no dockerd on PATH")
	}
	dir, err := os.MkdirTemp("", "gymserver-engine-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{t: t, name: fmt.Sprintf("gymserver-test-%s-%d", name, os.Getpid()), dir: dir, driver: nestedDriver(), extra: extra}
	t.Cleanup(e.destroy)
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.cli, err = client.NewClientWithOpts(client.WithHost(e.Host()), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	return e
}

// nestedDriver returns the storage driver for extra engines: the host
// engine's, when it is one that runs on the host's file system, else vfs.
func nestedDriver() string {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return "vfs"
	}
	defer cli.Close()
	info, err := cli.Info(context.Background())
	if err != nil {
		return "vfs"
	}
	switch info.Driver {
	case "fuse-overlayfs", "overlay2":
		return info.Driver
	}
	return "vfs"
}

// Host is the engine's address, for client.WithHost or DOCKER_HOST.
func (e *Engine) Host() string { return "unix://" + filepath.Join(e.dir, "docker.sock") }

// Client is a client of the engine, closed when the test ends.
func (e *Engine) Client() *client.Client { return e.cli }

// Name is the engine's name: its cgroup parent and containerd namespace
// tell its processes from others'.
func (e *Engine) Name() string { return e.name }

func (e *Engine) start() error {
	log, err := os.OpenFile(filepath.Join(e.dir, "dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	// The shell brings the namespace's loopback up (for a TCP listener
	// on 127.0.0.1), then becomes dockerd.
	cmd := exec.Command("sh", "-c", `ip link set lo up && exec "$0" "$@"`, "dockerd",
		"--config-file", filepath.Join(e.dir, "daemon.json"),
		"--data-root", filepath.Join(e.dir, "data"),
		"--exec-root", filepath.Join(e.dir, "exec"),
		"--pidfile", filepath.Join(e.dir, "dockerd.pid"),
		"-H", e.Host(),
		"--iptables=false", "--ip-masq=false", "--ip6tables=false",
		"--storage-driver", e.driver,
		"--cgroup-parent", "/"+e.name,
	)
	cmd.Args = append(cmd.Args, e.extra...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: a signal to the test's group does not reach
	// it. Its own network namespace: its bridge and its network setup
	// stay out of the host's (dockerd with --bridge=none would delete
	// the host engine's docker0 link, and two engines cannot share it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	e.cmd, e.done = cmd, make(chan struct{})
	e.running.Store(int64(cmd.Process.Pid))
	go func(done chan struct{}) { cmd.Wait(); close(done) }(e.done)
	ctx, cancel := context.WithTimeout(context.Background(), engineStartTimeout)
	defer cancel()
	for {
		if _, err := e.cli.Ping(ctx); err == nil {
			return nil
		}
		select {
		case <-e.done:
			return fmt.Errorf("dockerd exited at start; log:\n%s", e.logTail())
		case <-ctx.Done():
			return fmt.Errorf("dockerd did not answer within %s; log:\n%s", engineStartTimeout, e.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail returns the end of the engine's log.
func (e *Engine) logTail() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "dockerd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Kill ends the engine as a power cut would: SIGKILL to dockerd, its
// containerd, the containerd shims and every process of its containers.
// (Killing dockerd and containerd alone leaves the shims and the
// containers' processes running.) As after a reboot, its mounts and its
// exec root (on a host, under /run) are gone; its data root stays, for
// Restart. (A stale containerd pid file would make the next dockerd wait
// for a process that has the pid by reuse.)
func (e *Engine) Kill() {
	e.t.Helper()
	if e.cmd == nil {
		return
	}
	err := e.killAll()
	e.cmd = nil
	if err == nil {
		err = unmountUnder(e.dir)
	}
	if err == nil {
		err = os.RemoveAll(filepath.Join(e.dir, "exec"))
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// pid returns the pid of the running dockerd, or 0.
func (e *Engine) pid() int { return int(e.running.Load()) }

// killAll SIGKILLs every process of the engine and waits for dockerd.
func (e *Engine) killAll() error {
	e.running.Store(0)
	var errs []error
	for _, pid := range e.pids() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	if e.cmd != nil {
		e.cmd.Process.Kill()
		<-e.done
	}
	// Processes in the containers' cgroups may still be exiting.
	deadline := time.Now().Add(10 * time.Second)
	for len(e.pids()) > 0 {
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("engine %s: processes %v survive SIGKILL", e.name, e.pids()))
			break
		}
		for _, pid := range e.pids() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.Join(errs...)
}

// pids returns the processes of the engine: those whose command line
// names its directory (dockerd, containerd, shims, fuse-overlayfs) and
// those in its cgroup parent (the containers').
func (e *Engine) pids() []int {
	seen := map[int]bool{}
	self := os.Getpid()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err == nil && strings.Contains(string(b), e.dir) {
			seen[pid] = true
		}
	}
	for _, root := range e.cgroupDirs() {
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// cgroupDirs returns the engine's cgroup parent in every cgroup
// hierarchy (v1) or in the unified one (v2) where it exists.
func (e *Engine) cgroupDirs() []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + e.name)
	if d := "/sys/fs/cgroup/" + e.name; isDir(d) {
		dirs = append(dirs, d)
	}
	return dirs
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// Restart starts the engine again on its data, after Kill or Stop.
func (e *Engine) Restart() {
	e.t.Helper()
	if e.cmd != nil {
		e.t.Fatal("restart: the engine runs")
	}
	if err := e.start(); err != nil {
		e.t.Fatal(err)
	}
}

// Running reports whether the engine's dockerd runs.
func (e *Engine) Running() bool { return e.cmd != nil }

// destroy removes the engine's containers, stops it, and removes its
// mounts, cgroups and files; what it cannot remove fails the test.
func (e *Engine) destroy() {
	var errs []error
	if e.cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true}); err == nil {
			for _, c := range list {
				e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
		cancel()
		e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(20 * time.Second):
		}
	}
	if err := e.killAll(); err != nil {
		errs = append(errs, err)
	}
	e.cmd = nil
	if e.cli != nil {
		e.cli.Close()
	}
	errs = append(errs, unmountUnder(e.dir))
	for _, d := range e.cgroupDirs() {
		errs = append(errs, removeCgroup(d))
	}
	if err := os.RemoveAll(e.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		e.t.Errorf("engine %s: cleanup: %v", e.name, err)
	}
}

// unmountUnder lazily unmounts every mount at or below dir, deepest
// first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	f.Close()
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroup removes the cgroup directory d and those below it, deepest
// first.
func removeCgroup(d string) error {
	var dirs []string
	filepath.WalkDir(d, func(path string, de os.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}
