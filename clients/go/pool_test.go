package gymclient_test

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
)

// repoRoot is the module root, relative to this package.
const repoRoot = "../.."

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// serveBinary builds the gymserver binary once per test run.
func serveBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gymclient-pool-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "gymserver")
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// serveProc is a `gymserver serve` child process.
type serveProc struct {
	cmd  *exec.Cmd
	addr string
	done chan error // receives Wait's result
}

// startServe starts `gymserver serve` with the calculator example on addr
// ("127.0.0.1:0" for a free port), with more flags if given, and waits
// for its listening line. The test's cleanup stops it with SIGTERM when it
// still runs.
func startServe(t *testing.T, addr string, flags ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--config", "examples/calculator_api/config.json", "--addr", addr}, flags...)
	cmd := exec.Command(serveBinary(t), args...)
	cmd.Dir = repoRoot
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, done: make(chan error, 1)}
	found := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		listening := regexp.MustCompile(`^listening on (\S+)$`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it to the end first
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.addr = <-found:
		return p
	case <-time.After(2 * time.Minute):
		t.Fatal("serve did not print its address")
		return nil
	}
}

// url is the server's WebSocket URL.
func (p *serveProc) url() string { return "ws://" + p.addr + "/v1/ws" }

// stop ends the server with SIGTERM (if it runs) and waits for it.
func (p *serveProc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("serve %s did not stop after SIGTERM", p.addr)
	}
}

// kill ends the server with SIGKILL, as a crash would, and waits for it.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// openSessions reads the server's gymserver_sessions gauge.
func (p *serveProc) openSessions(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "gymserver_sessions "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatal("/metrics has no gymserver_sessions")
	return 0
}

// containersOf lists the containers still labelled as owned by the server
// process pid on this host.
func containersOf(t *testing.T, pid int) []string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=gymserver.owner",
		"--format", `{{.ID}} {{.Label "gymserver.owner"}}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, owner, ok := strings.Cut(line, " ")
		if ok && strings.HasPrefix(owner, fmt.Sprintf("%s:%d:", host, pid)) {
			ids = append(ids, id)
		}
	}
	return ids
}

var echo = gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}

// TestPoolManyServers runs a pool over three real servers: sessions are
// spread (fewest sessions first, ties round robin), a group and the forks
// of a snapshot stay on one server, a server killed mid-episode fails its
// sessions with class unavailable while the others go on, new sessions
// avoid it, and once it is back (same address) the pool uses it again
// after the backoff.
func TestPoolManyServers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	procs := []*serveProc{startServe(t, "127.0.0.1:0"), startServe(t, "127.0.0.1:0"), startServe(t, "127.0.0.1:0")}
	urls := []string{procs[0].url(), procs[1].url(), procs[2].url()}
	pool, err := gymclient.DialPool(ctx, urls, gymclient.PoolOptions{RetryMin: 200 * time.Millisecond, RetryMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	serverOf := func(s *gymclient.Session) int {
		for i, u := range urls {
			if s.Client().URL() == u {
				return i
			}
		}
		t.Fatalf("session %s is on no server of the pool (%s)", s.ID(), s.Client().URL())
		return -1
	}

	// Six resets one after the other: round robin over equal loads.
	var sessions []*gymclient.Session
	var on []int
	for range 6 {
		s, _, err := pool.Reset(ctx, "calculator_api", gym.ResetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
		on = append(on, serverOf(s))
	}
	if want := []int{0, 1, 2, 0, 1, 2}; fmt.Sprint(on) != fmt.Sprint(want) {
		t.Errorf("sessions placed on servers %v, want %v", on, want)
	}
	for i, p := range procs {
		if n := p.openSessions(t); n != 2 {
			t.Errorf("server %d holds %d sessions, want 2", i, n)
		}
	}
	// Fewest sessions first: closing two sessions of server 1 sends the
	// next reset there.
	for _, s := range []*gymclient.Session{sessions[1], sessions[4]} {
		if _, err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, _, err := pool.Reset(ctx, "calculator_api", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := serverOf(s); got != 1 {
		t.Errorf("reset after closing two sessions of server 1 went to server %d", got)
	}
	sessions = []*gymclient.Session{sessions[0], sessions[3], s, sessions[2], sessions[5]} // servers 0 0 1 2 2

	// A group goes to one server as a whole (the least loaded: 1), and
	// the forks of a snapshot to the server of its session.
	group, _, err := pool.ResetGroup(ctx, "calculator_api", gym.ResetRequest{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range group {
		if got := serverOf(g); got != 1 {
			t.Errorf("group session on server %d, want all on server 1", got)
		}
	}
	snap, err := sessions[3].Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	forks, _, err := pool.Fork(ctx, sessions[3], snap.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		if got := serverOf(f); got != 2 {
			t.Errorf("fork on server %d, want server 2 (the snapshot's)", got)
		}
	}
	if n := procs[1].openSessions(t); n != 4 {
		t.Errorf("server 1 holds %d sessions, want 4 (1 + a group of 3)", n)
	}
	all := append(append(append([]*gymclient.Session(nil), sessions...), group...), forks...)
	for _, s := range all {
		if _, err := s.Step(ctx, echo); err != nil {
			t.Fatalf("step before the kill: %v", err)
		}
	}

	// Server 1 dies mid-episode.
	deadPID := procs[1].cmd.Process.Pid
	deadAddr := procs[1].addr
	procs[1].kill()
	for _, s := range all {
		_, err := s.Step(ctx, echo)
		switch serverOf(s) {
		case 1:
			if !errors.Is(err, gym.ErrUnavailable) {
				t.Errorf("step of a session of the dead server: %v, want class unavailable", err)
			}
		default:
			if err != nil {
				t.Errorf("step of a session of a live server: %v", err)
			}
		}
	}
	// New sessions avoid it.
	for range 4 {
		s, _, err := pool.Reset(ctx, "calculator_api", gym.ResetRequest{})
		if err != nil {
			t.Fatalf("reset with one server down: %v", err)
		}
		if got := serverOf(s); got == 1 {
			t.Errorf("reset placed on the dead server")
		}
		all = append(all, s)
	}
	if st := pool.Servers()[1]; st.Connected || st.Err == nil {
		t.Errorf("dead server's status: %+v", st)
	}

	// It comes back on the same address; after the backoff the next reset
	// goes there (it has the fewest sessions).
	procs[1] = startServe(t, deadAddr)
	time.Sleep(1200 * time.Millisecond)
	s, _, err = pool.Reset(ctx, "calculator_api", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := serverOf(s); got != 1 {
		t.Errorf("reset after the server came back went to server %d, want 1", got)
	}
	if _, err := s.Step(ctx, echo); err != nil {
		t.Errorf("step on the server that came back: %v", err)
	}
	all = append(all, s)
	for _, s := range all {
		_, err := s.Close(ctx)
		if lost := s.Client().Err() != nil; lost != errors.Is(err, gym.ErrUnavailable) || !lost && err != nil {
			t.Errorf("close (connection lost: %v): %v", lost, err)
		}
	}
	for i, p := range procs {
		if n := p.openSessions(t); n != 0 {
			t.Errorf("server %d holds %d sessions after closing them", i, n)
		}
	}

	// The killed server's janitor removes its containers.
	deadline := time.Now().Add(time.Minute)
	left := containersOf(t, deadPID)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		left = containersOf(t, deadPID)
	}
	if len(left) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, left...)...).Run()
		t.Errorf("containers of the killed server left behind: %v", left)
	}
}

// TestPoolOpensConnectionsAtTheLimit holds more sessions on one server
// than one connection may (serve --max-sessions-per-conn 2): the pool
// opens a connection per two sessions, every session works, a group
// larger than the limit and a session beyond MaxConnections are refused
// as resource_exhausted, and a freed place is used again.
func TestPoolOpensConnectionsAtTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	proc := startServe(t, "127.0.0.1:0", "--max-sessions-per-conn", "2")
	pool, err := gymclient.DialPool(ctx, []string{proc.url()}, gymclient.PoolOptions{MaxConnections: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var sessions []*gymclient.Session
	for i := range 6 {
		s, _, err := pool.Reset(ctx, "calculator_api", gym.ResetRequest{})
		if err != nil {
			t.Fatalf("reset %d: %v", i, err)
		}
		sessions = append(sessions, s)
	}
	if st := pool.Servers()[0]; st.Connections != 3 || st.Sessions != 6 {
		t.Fatalf("server status %+v, want 3 connections holding 6 sessions", st)
	}
	clients := map[*gymclient.Client]int{}
	for _, s := range sessions {
		clients[s.Client()]++
		if _, err := s.Step(ctx, echo); err != nil {
			t.Fatalf("step: %v", err)
		}
	}
	for c, n := range clients {
		if n != 2 {
			t.Errorf("a connection holds %d sessions, want 2 (%p)", n, c)
		}
	}
	if _, _, err := pool.Reset(ctx, "calculator_api", gym.ResetRequest{}); !errors.Is(err, gym.ErrResourceExhausted) {
		t.Fatalf("seventh reset with 3 full connections: %v, want resource_exhausted", err)
	}
	if _, err := sessions[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pool.ResetGroup(ctx, "calculator_api", gym.ResetRequest{}, 3); !errors.Is(err, gym.ErrResourceExhausted) {
		t.Fatalf("group of 3 with max_sessions_per_connection 2: %v, want resource_exhausted", err)
	}
	s, _, err := pool.Reset(ctx, "calculator_api", gym.ResetRequest{})
	if err != nil {
		t.Fatalf("reset into the freed place: %v", err)
	}
	if s.Client() != sessions[0].Client() {
		t.Errorf("the reset went to another connection than the one with room")
	}
	sessions[0] = s
	for _, s := range sessions {
		if _, err := s.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	if n := proc.openSessions(t); n != 0 {
		t.Errorf("server holds %d sessions after closing them", n)
	}
}
