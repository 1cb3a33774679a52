package docker_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/internal/waittest"
)

// leaveBehind is what an agent does to carry something into the next
// episode of its sandbox: a daemon that double-forks into its own session
// and keeps writing, files in every place it can write (one it made
// unreadable, one in a directory it made unreadable, its home, a
// conftest.py where the next tests run, its working directory's mode),
// System V shared memory, a message queue and semaphores, a POSIX message
// queue and a file in /dev/shm. It prints "planted" when all of it is in
// place.
const leaveBehind = `
set -e
cd /workspace
echo changed > main.py
echo 'import pytest' > conftest.py
mkdir -p sub/deep && echo x > sub/deep/f && chmod 000 sub/deep sub
echo secret > /tmp/note && chmod 000 /tmp/note
mkdir /tmp/locked && echo y > /tmp/locked/in && chmod 000 /tmp/locked
echo z > /var/tmp/keep
echo 'alias ls=rm' >> "$HOME/.bashrc"
echo shm > /dev/shm/leak
python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
assert libc.shmget(0x5eed, 4096, IPC_CREAT | 0o600) >= 0, ctypes.get_errno()
assert libc.msgget(0x5eee, IPC_CREAT | 0o600) >= 0, ctypes.get_errno()
assert libc.semget(0x5eef, 2, IPC_CREAT | 0o600) >= 0, ctypes.get_errno()
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
assert libc.mq_open(b"/leak", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0, ctypes.get_errno()
PY
setsid sh -c 'sh -c "while :; do echo tick >> /tmp/daemon.log; sleep 0.02; done" & ' </dev/null >/dev/null 2>&1
chmod 700 /workspace
sleep 0.2
test -s /tmp/daemon.log
echo planted
`

// inspect prints, as the agent, what the next episode finds: the live
// processes of its uid but its own, the working directory's listing and
// mode, /tmp, /var/tmp, /dev/shm, /dev/mqueue, the System V IPC objects,
// the home directory's .bashrc size and whether the hidden tests are
// still there.
const inspect = `
import os, stat
me = {os.getpid(), os.getppid()}
procs = []
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) not in me:
        try:
            st = open(f"/proc/{p}/status").read()
        except OSError:
            continue
        uid = [l.split()[1] for l in st.splitlines() if l.startswith("Uid:")][0]
        if uid == str(os.getuid()):
            procs.append(p)
ipc = sum(len(open(f"/proc/sysvipc/{k}").read().strip().splitlines()) - 1 for k in ("shm", "msg", "sem"))
print("procs", procs)
print("workspace", sorted(os.listdir("/workspace")), oct(stat.S_IMODE(os.stat("/workspace").st_mode)))
print("main", open("/workspace/main.py").read().strip())
for d in ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"):
    print(d, sorted(os.listdir(d)))
print("ipc", ipc)
print("bashrc", os.path.getsize(os.path.expanduser("~/.bashrc")) if os.path.exists(os.path.expanduser("~/.bashrc")) else -1)
print("hidden", os.path.exists("/opt/hidden"), os.path.exists("/workspace/tests"))
`

func TestRecycle(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{Reuse: 1, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(task, main string) sandbox.Spec {
		return sandbox.Spec{Image: image, WorkDir: "/workspace", Labels: map[string]string{sandbox.LabelTask: task},
			Files: []sandbox.File{{Path: "/workspace/main.py", Data: []byte(main + "\n"), Mode: 0o644}}}
	}
	run := func(sb sandbox.Sandbox, argv ...string) string {
		t.Helper()
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Timeout: 30 * time.Second})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%v: %+v %v", argv, r, err)
		}
		return string(r.Stdout)
	}

	// What a fresh sandbox holds, to compare the recycled one with.
	first, err := p.Create(ctx, spec("t/1", "first"))
	if err != nil {
		t.Fatal(err)
	}
	fresh := run(first, "python3", "-c", inspect)
	if !strings.Contains(fresh, "procs []") || !strings.Contains(fresh, "ipc 0") || !strings.Contains(fresh, "main first") {
		t.Fatalf("a fresh sandbox:\n%s", fresh)
	}

	// The episode plants what it can, and evaluation installs hidden
	// tests in its places and outside them.
	if out := run(first, "/bin/sh", "-c", leaveBehind); !strings.Contains(out, "planted") {
		t.Fatalf("planting: %s", out)
	}
	if planted := run(first, "python3", "-c", inspect); !strings.Contains(planted, "ipc 3") || !strings.Contains(planted, "'leak'") {
		t.Fatalf("the plants are not all in place:\n%s", planted)
	}
	if err := first.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.CopyIn(ctx, []sandbox.File{
		{Path: "/workspace/tests/test_hidden.py", Data: []byte("def test_x(): pass\n")},
		{Path: "/opt/hidden/deeper/test_secret.py", Data: []byte("SECRET = 1\n")},
	}); err != nil {
		t.Fatal(err)
	}
	// A second daemon, started after the kill, as a test run's child.
	run(first, "/bin/sh", "-c", "setsid sh -c 'while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 &")
	id, session := first.ID(), first.SessionID()
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A closed session's calls fail, before and after the recycle.
	if _, err := first.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Error("exec in a closed sandbox succeeded")
	}
	waitPooled(t, p, spec("any", ""), 1)
	if err := first.WriteFile(ctx, "late.txt", []byte("late"), 0o644); err == nil {
		t.Error("a write of the closed session succeeded after the recycle")
	}

	second, err := p.Create(ctx, spec("t/2", "second"))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(context.WithoutCancel(ctx))
	if second.ID() != id {
		t.Fatalf("the second session got container %s, want the recycled %s", second.ID(), id)
	}
	// The recycled sandbox keeps the connection to its executor's socket.
	if !docker.UsesSocket(first) || !docker.UsesSocket(second) {
		t.Errorf("executor socket: first session %v, recycled %v; want both", docker.UsesSocket(first), docker.UsesSocket(second))
	}
	if second.SessionID() == session || !sessionIDPattern.MatchString(second.SessionID()) {
		t.Errorf("the recycled sandbox's session id %q (the first was %q)", second.SessionID(), session)
	}
	got := run(second, "python3", "-c", inspect)
	want := strings.Replace(fresh, "main first", "main second", 1)
	if got != want {
		t.Errorf("the recycled sandbox holds:\n%s\nwant, as a fresh one:\n%s", got, want)
	}
	// The daemon's file does not grow: no process writes it.
	if out := run(second, "/bin/sh", "-c", "ls /tmp; sleep 0.2; ls /tmp"); strings.TrimSpace(out) != "" {
		t.Errorf("/tmp of the recycled sandbox: %q", out)
	}
	st := p.PoolStats()
	if len(st.Pools) != 1 || st.Pools[0].Recycled != 1 || st.Pools[0].NotRecycled != 0 || st.Pools[0].FromPool != 1 {
		t.Errorf("pool stats %+v", st.Pools)
	}

	// A sandbox where a command ran with the machinery's rights is not
	// recycled: its container goes.
	if _, err := second.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}, Priv: true}); err != nil {
		t.Fatal(err)
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, "the tainted container to go", 30*time.Second, func() (bool, error) {
		exists, _, err := containerState(ctx, cli, id)
		return !exists, err
	})
	if st := p.PoolStats(); st.Pools[0].NotRecycled != 1 || p.Pooled(spec("any", "")) != 0 {
		t.Errorf("after a Priv exec: pool stats %+v, %d pooled", st.Pools, p.Pooled(spec("any", "")))
	}
}

// TestRecycleEndsCallsInFlight closes a session while one of its commands
// runs without a timeout: the command ends with an error, the sandbox is
// recycled all the same, and the next session finds no trace of it.
func TestRecycleEndsCallsInFlight(t *testing.T) {
	p, _ := dockertest.NewWith(t, docker.Options{Reuse: 1})
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Image: image, WorkDir: "/workspace"}
	first, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := first.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo started > /tmp/long; exec sleep 600"}})
		done <- err
	}()
	waittest.Until(t, "the long command to start", 30*time.Second, func() (bool, error) {
		_, err := first.ReadFile(ctx, "/tmp/long", 100)
		return err == nil, nil
	})
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the command of a closed session ended without an error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the command of a closed session still runs")
	}
	waitPooled(t, p, spec, 1)
	second, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(context.WithoutCancel(ctx))
	if second.ID() != first.ID() {
		t.Fatalf("container %s, want the recycled %s", second.ID(), first.ID())
	}
	r, err := second.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "ls -A /tmp; for d in /proc/[0-9]*; do cat $d/cmdline 2>/dev/null | tr '\\0' ' '; echo; done"}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out := string(r.Stdout); strings.Contains(out, "long") || strings.Contains(out, "sleep 600") {
		t.Errorf("the next session finds the closed one's command or its file:\n%s", out)
	}
}

// TestRecycleLimits checks the bounds on the sandboxes kept recycled: with
// Reuse 1, a sandbox recycled for another Spec makes the provider remove
// the one that waited before it, and a recycled sandbox that waits too
// long is removed.
func TestRecycleLimits(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{Reuse: 1})
	docker.SetReuseIdle(p, 3*time.Second)
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	specA := sandbox.Spec{Image: image, WorkDir: "/workspace", Env: map[string]string{"WHICH": "a"}}
	specB := sandbox.Spec{Image: image, WorkDir: "/workspace", Env: map[string]string{"WHICH": "b"}}
	gone := func(id string) func() (bool, error) {
		return func() (bool, error) {
			exists, _, err := containerState(ctx, cli, id)
			return !exists, err
		}
	}
	a, err := p.Create(ctx, specA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Create(ctx, specB)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitPooled(t, p, specA, 1)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitPooled(t, p, specB, 1)
	// Out of the pool as the second joined it, long before it expires.
	if n := p.Pooled(specA); n != 0 {
		t.Errorf("%d sandboxes of the first Spec wait, want 0", n)
	}
	waittest.Until(t, "the sandbox recycled first to go", 30*time.Second, gone(a.ID()))
	waittest.Until(t, "the recycled sandbox that waited too long to go", 30*time.Second, gone(b.ID()))
	if n := p.Pooled(specB); n != 0 {
		t.Errorf("%d sandboxes of the second Spec wait, want 0", n)
	}
}
