package docker_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// socketBind returns the host directory bound at the executor's socket
// mount of container id, or "" for none.
func socketBind(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	info, err := cli.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range info.HostConfig.Binds {
		if src, ok := strings.CutSuffix(b, ":/.gymserver-run"); ok {
			return src
		}
	}
	return ""
}

// echoes checks that a step runs in sb.
func echoes(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo hi"}, Timeout: time.Minute})
	if err != nil || string(r.Stdout) != "hi\n" || r.ExitCode != 0 {
		t.Fatalf("echo hi: %+v %v", r, err)
	}
}

// insideConnect is a Python program that connects to the executor's socket
// from inside the sandbox, sends the token (argv[1]) and says what
// happened: "refused: ERR" when it cannot connect, "closed" when the
// executor hangs up, "open" when the connection stays open (accepted).
const insideConnect = `
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/.gymserver-run/executor.sock")
except OSError as e:
    print("refused:", e.__class__.__name__); sys.exit()
s.sendall(sys.argv[1].encode() + b"\n")
s.settimeout(3)
try:
    print("closed" if s.recv(1) == b"" else "answered")
except socket.timeout:
    print("open")
except OSError as e:
    print("closed:", e.__class__.__name__)
`

// TestExecutorSocket checks that a sandbox's client speaks to its executor
// over the executor's socket, and that nothing but the client can: before
// the client connects, a process inside the sandbox that knows the token is
// refused (root, by the executor's check of the peer; the agent, already
// by the directory's mode), and so is a process outside with a wrong
// token; after, the socket and its directory are gone, and neither the
// agent nor root in the sandbox can make anything where they were.
func TestExecutorSocket(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	attempts := map[string]string{}
	var agentSaw string
	docker.SetSocketDialHook(t, func(id, path, token string) {
		// What the agent can read of every process's command line and
		// environment while the token is good: not the token. (A docker
		// exec's process starts with the container's environment, which
		// holds it; the agent's processes are the executor's children,
		// which do not, so this one drops it as they lack it.)
		out, err := dockerExecAs(ctx, cli, id, "1000:1000", []string{"env", "-u", "GYMSERVER_SOCKET_TOKEN", "/bin/sh", "-c",
			`for p in /proc/[0-9]*; do tr '\0' '\n' < $p/cmdline; tr '\0' '\n' < $p/environ; done 2>/dev/null; echo procs-read`})
		if err != nil {
			t.Errorf("read /proc as the agent: %v", err)
		}
		if !strings.Contains(out, "serve\n") || !strings.Contains(out, "procs-read") {
			t.Errorf("the agent did not read the executor's command line (so the check below proves nothing): %q", out)
		}
		if strings.Contains(out, token) {
			agentSaw = out
		}
		for _, user := range []string{"0:0", "1000:1000"} {
			out, err := dockerExecAs(ctx, cli, id, user, []string{"python3", "-c", insideConnect, token})
			if err != nil {
				t.Errorf("connect as %s: %v", user, err)
			}
			attempts[user] = strings.TrimSpace(out)
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Errorf("connect from the host: %v", err)
			return
		}
		defer c.Close()
		c.Write([]byte(strings.Repeat("0", len(token)) + "\n"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("a wrong token from the host: read %d bytes, %v; want the connection closed", n, err)
		}
	})
	sb := baseSandbox(t, p, sandbox.Spec{})
	if got := attempts["0:0"]; !strings.HasPrefix(got, "closed") {
		t.Errorf("root inside the sandbox with the right token: %q, want closed", got)
	}
	if got := attempts["1000:1000"]; !strings.HasPrefix(got, "refused: PermissionError") {
		t.Errorf("the agent inside the sandbox with the right token: %q, want refused: PermissionError", got)
	}
	if agentSaw != "" {
		t.Errorf("the agent read the socket's token in /proc: %q", agentSaw)
	}
	if !docker.UsesSocket(sb) {
		t.Fatal("the sandbox does not use its executor's socket")
	}
	echoes(t, sb)
	// Commands do not inherit it either.
	if r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/usr/bin/env"}, Timeout: time.Minute}); err != nil || strings.Contains(string(r.Stdout), "GYMSERVER_SOCKET_TOKEN") {
		t.Errorf("a command's environment: %q, %v; want no socket token", r.Stdout, err)
	}
	dir := socketBind(t, cli, sb.ID())
	if dir == "" {
		t.Fatal("no socket directory bound")
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket directory on the host after the start: %v, want it gone", err)
	}
	// The agent, then root, try to see and to make something where the
	// socket was.
	try := "ls -A /.gymserver-run; touch /.gymserver-run/x && echo made; " +
		`python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/.gymserver-run/executor.sock"); print("bound")'`
	r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", try}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(r.Stdout)) != "" {
		t.Errorf("the agent saw or made %q in the socket directory", r.Stdout)
	}
	out, err := dockerExecAs(ctx, cli, sb.ID(), "0:0", []string{"/bin/sh", "-c", try + " 2>&1"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "made") || strings.Contains(out, "bound") || strings.Contains(out, "executor.sock\n") {
		t.Errorf("root in the sandbox: %q", out)
	}
	echoes(t, sb)
}

// TestExecutorSocketFallback checks that a sandbox whose socket cannot be
// reached keeps the attach stream and works, that the provider then stops
// binding socket directories, and the twin: a provider with AttachStream
// binds none and its sandboxes work.
func TestExecutorSocketFallback(t *testing.T) {
	p, cli := newProvider(t)
	docker.SetSocketDialHook(t, func(_, path, _ string) {
		// As an engine that sees another filesystem: the socket is not
		// where the client looks.
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
	})
	first := baseSandbox(t, p, sandbox.Spec{})
	if docker.UsesSocket(first) {
		t.Fatal("the sandbox uses a socket that was removed")
	}
	echoes(t, first)
	dir := socketBind(t, cli, first.ID())
	if _, err := os.Stat(dir); dir == "" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket directory %q after a failed connection: %v, want it gone", dir, err)
	}
	second := baseSandbox(t, p, sandbox.Spec{})
	if dir := socketBind(t, cli, second.ID()); dir != "" || docker.UsesSocket(second) {
		t.Errorf("after a failed connection the next sandbox has socket directory %q", dir)
	}
	echoes(t, second)

	ap, acli := dockertest.NewWith(t, docker.Options{AttachStream: true})
	sb := baseSandbox(t, ap, sandbox.Spec{})
	if dir := socketBind(t, acli, sb.ID()); dir != "" || docker.UsesSocket(sb) {
		t.Errorf("AttachStream: socket directory %q", dir)
	}
	echoes(t, sb)
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotWithoutSocket checks that a committed snapshot of a sandbox
// that had a socket (docker commit keeps the container's environment, with
// its token) starts and works where no socket is bound (a provider with
// AttachStream), and that no token of the earlier sandbox reaches its
// commands.
func TestSnapshotWithoutSocket(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	sb := baseSandbox(t, p, sandbox.Spec{})
	if !docker.UsesSocket(sb) {
		t.Fatal("the first sandbox does not use its executor's socket")
	}
	ref, err := sb.(sandbox.Committer).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ap, _ := dockertest.NewWith(t, docker.Options{AttachStream: true})
	fork, err := ap.Create(ctx, sandbox.Spec{Image: ref, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Close(context.Background())
	echoes(t, fork)
	r, err := fork.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/usr/bin/env"}, Timeout: time.Minute})
	if err != nil || strings.Contains(string(r.Stdout), "GYMSERVER_SOCKET_TOKEN") {
		t.Errorf("the snapshot's command environment: %q, %v; want no socket token", r.Stdout, err)
	}
}
