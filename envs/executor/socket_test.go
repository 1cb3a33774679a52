package executor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSocketRefusesVisiblePeer checks the executor's socket on the host:
// the file is its directory owner's alone, and a peer the executor can see
// in its process namespace (this test, with the right token) is refused
// while the socket stays for the client. The accepted path needs a peer
// outside the namespace: the Docker tests cover it (TestExecutorSocket).
func TestSocketRefusesVisiblePeer(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "executor.sock")
	l, err := listenSocket(path)
	if err != nil {
		t.Fatal(err)
	}
	var st, dst syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(dir, &dst); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o600 || st.Uid != dst.Uid || st.Gid != dst.Gid {
		t.Errorf("socket mode %o owner %d:%d, want 600 and the directory's %d:%d", st.Mode&0o777, st.Uid, st.Gid, dst.Uid, dst.Gid)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveSocket(ctx, l, "token", Options{}, slog.New(slog.DiscardHandler))
	}()
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("token\n"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a peer in the executor's process namespace: read %d bytes, %v; want the connection closed", n, err)
		}
		c.Close()
	}
	cancel()
	<-done
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after the executor stopped: %v, want it removed", err)
	}
}

// TestSocketFlagsGoTogether checks that serve refuses a socket without its
// token, and that the token is no longer in its environment once it read
// it, even when serve stops at once (a bad flag).
func TestSocketFlagsGoTogether(t *testing.T) {
	for _, c := range []struct {
		args  []string
		token string
	}{{[]string{"serve", "--socket", "/tmp/x.sock"}, ""}, {[]string{"serve", "--no-such-flag"}, "t"}} {
		args := c.args
		if c.token != "" {
			t.Setenv(SocketTokenEnv, c.token)
		}
		stderr := os.Stderr
		r, w, _ := os.Pipe()
		os.Stderr = w
		code := Main(args)
		os.Stderr = stderr
		w.Close()
		msg, _ := io.ReadAll(r)
		if code != 2 {
			t.Errorf("%v, token %q: exit %d (%s), want 2", args, c.token, code, msg)
		}
		if v, ok := os.LookupEnv(SocketTokenEnv); ok {
			t.Errorf("%v: $%s still set after serve started: %q", args, SocketTokenEnv, v)
		}
	}
}
