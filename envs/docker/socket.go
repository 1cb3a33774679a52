package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/gym"
)

// The executor's socket. Every frame of the container's attach stream
// passes through the engine and the container's shim, in both
// directions. When the engine runs on this host, each sandbox gets a
// directory of this process's bound into it at socketMount, where its
// executor makes a Unix socket; once the executor answers its first ping
// over the attach stream, the client connects to that socket from the
// host and speaks to the executor there instead. The executor accepts only
// a peer outside the sandbox's process namespace that sends the token
// given on its command line, then removes the socket, and the directory
// goes at once: nothing in the sandbox can reach the executor this way
// (see the executor's serveSocket). The attach stream stays open, idle:
// its end still ends the executor, and its stderr still goes to the log.
//
// Where the socket cannot be reached (an engine that sees another
// filesystem than this process, a user namespace whose root cannot write
// the directory), the sandbox keeps the attach stream and the provider
// stops binding directories. Options.AttachStream keeps the attach
// stream always.

// socketMount is where a sandbox sees its socket directory.
const socketMount = "/.gymserver-run"

// socketName is the executor's socket in that directory.
const socketName = "executor.sock"

// socketDialWait bounds the connection to an executor's socket.
const socketDialWait = 2 * time.Second

// socketDirPrefix starts the name of each provider's directory of
// socket directories, followed by the process id, a dash and a random
// suffix.
const socketDirPrefix = "gymserver-sock-"

// execSockets is the provider's state of executor sockets.
type execSockets struct {
	// root holds one directory per sandbox being started; "" when the
	// provider does not use sockets.
	root string
	// off is set once a socket could not be reached: later sandboxes keep
	// the attach stream.
	off atomic.Bool
}

// openSockets makes the provider's directory of socket directories, when
// the engine is on this host and Options.AttachStream is not set, after
// removing those of processes that are gone.
func (p *Provider) openSockets() {
	if p.opts.AttachStream || !strings.HasPrefix(p.cli.DaemonHost(), "unix://") {
		return
	}
	reapSocketDirs(os.TempDir(), p.log)
	root, err := os.MkdirTemp("", socketDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		p.log.Warn("executor sockets off: cannot make their directory", "err", err)
		return
	}
	p.sockets.root = root
}

// reapSocketDirs removes the directories of socket directories under
// dir whose process is gone.
func reapSocketDirs(dir string, log interface{ Warn(string, ...any) }) {
	names, err := filepath.Glob(filepath.Join(dir, socketDirPrefix+"*"))
	if err != nil {
		return
	}
	for _, name := range names {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(name), socketDirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if !processGone(pid) {
			continue
		}
		if err := os.RemoveAll(name); err != nil {
			log.Warn("removing the socket directories of a process that is gone", "dir", name, "err", err)
		}
	}
}

// closeSockets removes the provider's directory of socket directories.
func (p *Provider) closeSockets() error {
	if p.sockets.root == "" {
		return nil
	}
	return os.RemoveAll(p.sockets.root)
}

// socketFor makes the socket directory of a sandbox about to be created;
// it returns "" when the sandbox keeps the attach stream.
func (p *Provider) socketFor() (dir, token string) {
	if p.sockets.root == "" || p.sockets.off.Load() {
		return "", ""
	}
	dir, err := os.MkdirTemp(p.sockets.root, "")
	if err != nil {
		p.log.Warn("no socket directory for a sandbox; it keeps the attach stream", "err", err)
		return "", ""
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return dir, hex.EncodeToString(b[:])
}

// socketArgs are the executor's flags for a socket in socketMount; its
// token goes in the container's environment (socketEnv), which, unlike
// the command line, the agent cannot read in /proc.
func socketArgs() []string {
	return []string{"--socket", socketMount + "/" + socketName}
}

// socketEnv is the container's environment entry that gives the executor
// its socket's token.
func socketEnv(token string) string {
	return executor.SocketTokenEnv + "=" + token
}

// socketDialHook, when set (by tests), runs before the client connects to
// an executor's socket, with the container's id, the socket's host path
// and the token.
var socketDialHook func(id, path, token string)

// useSocket moves s's client to its executor's socket, when s has one:
// it connects, sends the token and pings the executor there. On any
// failure s keeps the attach stream. The socket directory goes either
// way.
func (s *Sandbox) useSocket(ctx context.Context) {
	if s.sockDir == "" {
		return
	}
	p := s.p
	defer func() {
		if err := os.RemoveAll(s.sockDir); err != nil {
			p.log.Warn("removing a socket directory", "dir", s.sockDir, "err", err)
		}
		s.sockDir, s.sockToken = "", ""
	}()
	path := filepath.Join(s.sockDir, socketName)
	if socketDialHook != nil {
		socketDialHook(s.id, path, s.sockToken)
	}
	c, err := s.dialSocket(ctx, path)
	var dialErr *net.OpError
	switch {
	case errors.As(err, &dialErr) && dialErr.Op == "dial":
		// An engine that does not see this directory, or an executor
		// that cannot make its socket there, will do the same for the
		// next sandbox.
		if p.sockets.off.CompareAndSwap(false, true) {
			p.log.Warn("executor sockets off: the sandboxes keep their attach streams", "container", shortID(s.id), "err", err)
		}
		return
	case err != nil:
		p.log.Warn("the sandbox keeps its attach stream", "container", shortID(s.id), "err", err)
		return
	}
	s.attached, s.exec = s.exec, c
}

// dialSocket connects to the executor's socket at path and returns a
// client that has had its answer to a ping.
func (s *Sandbox) dialSocket(ctx context.Context, path string) (*executor.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, socketDialWait)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "unix", path)
	if err != nil {
		return nil, err
	}
	uc := conn.(*net.UnixConn)
	if _, err := uc.Write([]byte(s.sockToken + "\n")); err != nil {
		uc.Close()
		return nil, fmt.Errorf("send token: %w", err)
	}
	c := executor.NewClient(uc, uc)
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := c.Ping(pctx); err != nil {
		c.Close()
		return nil, gym.Classify(fmt.Errorf("ping over the socket: %w", err), gym.ClassSandbox)
	}
	return c, nil
}
