package executor

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The executor's socket. Besides its stdin and stdout (the container's
// attach stream, which passes through the engine and the container's shim
// at every frame), the executor can serve its client on a Unix socket in
// a directory that the host binds into the sandbox for it alone. It
// accepts one connection, and only from a process outside the sandbox's
// process namespace that sends the token given on its command line: a
// process inside the sandbox, the agent's or root's, sees itself in the
// peer credentials and is refused even with the right token. Once a
// connection is accepted, the socket is removed and the listener closed,
// so nothing can connect after the client. The stdin stream stays open:
// its end still ends the executor.

// socketTokenWait bounds how long an accepted connection has to send the
// token.
const socketTokenWait = 5 * time.Second

// listenSocket makes the executor's socket at path, readable and writable
// by the owner of its directory alone (the host's user of the client).
func listenSocket(path string) (*net.UnixListener, error) {
	var dir syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(path), &dir); err != nil {
		return nil, fmt.Errorf("stat the socket's directory: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The listener removes its socket file when it closes.
	l.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Lchown(path, int(dir.Uid), int(dir.Gid)); err != nil {
		l.Close()
		return nil, fmt.Errorf("chown %s: %w", path, err)
	}
	return l, nil
}

// serveSocket accepts connections on l until one passes acceptSocketPeer,
// then closes l (removing its file) and serves that connection with the
// options given until it ends. It returns when l fails or ctx ends.
func serveSocket(ctx context.Context, l *net.UnixListener, token string, opts Options, log *slog.Logger) {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("executor socket: accept", "err", err)
			}
			return
		}
		if err := acceptSocketPeer(c, token); err != nil {
			log.Warn("executor socket: connection refused", "err", err)
			c.Close()
			continue
		}
		l.Close()
		if err := Serve(ctx, c, c, opts); err != nil {
			log.Warn("executor socket: stream ended", "err", err)
		}
		c.Close()
		return
	}
}

// errSocketPeerInside refuses a connection from a process the executor can
// see: one inside the sandbox.
var errSocketPeerInside = errors.New("peer is inside the sandbox's process namespace")

// acceptSocketPeer checks a new connection: its peer must be outside the
// executor's process namespace (the kernel reports pid 0 for a process the
// reader cannot see) and must send token and a newline within
// socketTokenWait.
func acceptSocketPeer(c *net.UnixConn, token string) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("peer credentials: %w", credErr)
	}
	if cred.Pid != 0 {
		return fmt.Errorf("%w (pid %d, uid %d)", errSocketPeerInside, cred.Pid, cred.Uid)
	}
	if err := c.SetReadDeadline(time.Now().Add(socketTokenWait)); err != nil {
		return err
	}
	got := make([]byte, len(token)+1)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	if subtle.ConstantTimeCompare(got, []byte(token+"\n")) != 1 {
		return errors.New("wrong token")
	}
	return c.SetReadDeadline(time.Time{})
}
