package executor_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// gymexecBinary builds the executor binary once per test run and returns
// its path.
func gymexecBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gymexec-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "gymexec")
		cmd := exec.Command("go", "build", "-o", binPath, "./gymexec")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = errors.New(string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("build gymexec: %v", binErr)
	}
	return binPath
}

// subprocess starts the real executor binary on the host (never with
// --container: it would kill host processes) and returns a client.
func subprocess(t testing.TB) (*executor.Client, string) {
	t.Helper()
	c, _, work := startExecutor(t)
	return c, work
}

// startExecutor is subprocess that also returns the executor's process.
func startExecutor(t testing.TB) (*executor.Client, *exec.Cmd, string) {
	t.Helper()
	work := t.TempDir()
	c, cmd := serveWith(t, exec.Command(gymexecBinary(t), "serve", "--workdir", work), (*exec.Cmd).Start)
	return c, cmd, work
}

func alive(pid int) bool {
	// A zombie still has a /proc entry; look at its state.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range pids {
		for alive(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still alive", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func sh(cmd string) []string { return []string{"/bin/sh", "-c", cmd} }

func TestExec(t *testing.T) {
	c, work := subprocess(t)
	ctx := t.Context()
	tests := []struct {
		name   string
		req    sandbox.ExecRequest
		exit   int
		stdout string
		stderr string
	}{
		{"echo", sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, 0, "hi\n", ""},
		{"exit code", sandbox.ExecRequest{Argv: sh("echo out; echo err >&2; exit 7")}, 7, "out\n", "err\n"},
		{"stdin", sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("fed\x00in")}, 0, "fed\x00in", ""},
		// Without stdin, /dev/null (one kept open, read only): a read
		// ends at once and a write fails.
		{"no stdin", sandbox.ExecRequest{Argv: sh("cat; readlink /proc/self/fd/0; echo x 2>/dev/null >&0 || echo read-only")}, 0, "/dev/null\nread-only\n", ""},
		{"env", sandbox.ExecRequest{Argv: sh(`printf %s "$GYM_X"`), Env: []string{"GYM_X=a b"}}, 0, "a b", ""},
		{"default cwd", sandbox.ExecRequest{Argv: []string{"pwd"}}, 0, work + "\n", ""},
		{"argv not shell", sandbox.ExecRequest{Argv: []string{"echo", "$HOME;", "|"}}, 0, "$HOME; |\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.Exec(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if r.ExitCode != tt.exit || string(r.Stdout) != tt.stdout || string(r.Stderr) != tt.stderr {
				t.Errorf("got exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
			}
		})
	}
	os.Mkdir(filepath.Join(work, "sub"), 0o755)
	r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"pwd"}, Dir: "sub"})
	if err != nil || string(r.Stdout) != filepath.Join(work, "sub")+"\n" {
		t.Errorf("relative dir: %q %v", r.Stdout, err)
	}
	if _, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/no/such/program"}}); !errors.Is(err, sandbox.ErrNotExist) {
		t.Errorf("missing program: %v", err)
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	c, work := subprocess(t)
	pidfile := filepath.Join(work, "pids")
	// A child in the same group, and one that escapes with setsid.
	cmd := "sleep 1000 & echo $! >> " + pidfile + "; setsid sleep 1000 & echo $! >> " + pidfile + "; sleep 1000"
	start := time.Now()
	r, err := c.Exec(t.Context(), sandbox.ExecRequest{Argv: sh(cmd), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !r.TimedOut || r.ExitCode != -1 || r.Signal != "SIGKILL" {
		t.Fatalf("result %+v, want timed out by SIGKILL", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %s", d)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
	}
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	waitGone(t, pids)
}

func TestOutputCap(t *testing.T) {
	c, _ := subprocess(t)
	const max = 1000
	// 10 MB: "a"*5MB then "b"*5MB, so head and tail are known.
	r, err := c.Exec(t.Context(), sandbox.ExecRequest{
		Argv:      sh("head -c 5000000 /dev/zero | tr '\\0' a; head -c 5000000 /dev/zero | tr '\\0' b"),
		MaxOutput: max,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("a", max/2) + strings.Repeat("b", max/2)
	if string(r.Stdout) != want || r.StdoutDropped != 10_000_000-max {
		t.Fatalf("got %d bytes (%q...), dropped %d", len(r.Stdout), r.Stdout[:10], r.StdoutDropped)
	}
}

func TestFiles(t *testing.T) {
	c, work := subprocess(t)
	ctx := t.Context()
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	files := map[string][]byte{
		"deep/a/b/bin.dat":             binary,
		"unicodé/ファイル.txt":             []byte("héllo wörld ✓ 日本語\n"),
		filepath.Join(work, "abs.txt"): []byte("absolute"),
		"empty":                        {},
	}
	for p, data := range files {
		if err := c.WriteFile(ctx, p, data, 0o600); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
		got, err := c.ReadFile(ctx, p, 1<<20)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("read %s: %q %v", p, got, err)
		}
	}
	fi, err := os.Stat(filepath.Join(work, "deep/a/b/bin.dat"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode: %v %v", fi, err)
	}
	if _, err := c.ReadFile(ctx, "missing", 10); !errors.Is(err, sandbox.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := c.ReadFile(ctx, "deep", 10); !errors.Is(err, sandbox.ErrIsDir) {
		t.Errorf("directory: %v", err)
	}
	data, err := c.ReadFile(ctx, "deep/a/b/bin.dat", 10)
	if !errors.Is(err, sandbox.ErrTooLarge) || !bytes.Equal(data, binary[:10]) {
		t.Errorf("too large: %v %v", data, err)
	}
	ents, err := c.ListDir(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "abs.txt,deep,empty,unicodé" {
		t.Errorf("list: %v", names)
	}
	if err := c.Remove(ctx, "deep"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "deep"); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "deep")); !os.IsNotExist(err) {
		t.Errorf("deep still there: %v", err)
	}
}

func TestBackgroundAndKillAll(t *testing.T) {
	c, _ := subprocess(t)
	ctx := t.Context()
	r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: sh("sleep 1000"), Background: true})
	if err != nil || r.PID == 0 {
		t.Fatalf("background: %+v %v", r, err)
	}
	// A foreground command that leaves a process behind.
	r2, err := c.Exec(ctx, sandbox.ExecRequest{Argv: sh("sleep 1000 >/dev/null 2>&1 & echo $!")})
	if err != nil {
		t.Fatal(err)
	}
	left, _ := strconv.Atoi(strings.TrimSpace(string(r2.Stdout)))
	if !alive(r.PID) || !alive(left) {
		t.Fatal("processes not running")
	}
	if err := c.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, []int{r.PID, left})
}

func TestPipelined(t *testing.T) {
	c, _ := subprocess(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := strconv.Itoa(i)
			r, err := c.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"echo", want}})
			if err != nil || strings.TrimSpace(string(r.Stdout)) != want {
				errs <- errors.New("call " + want + ": " + string(r.Stdout))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestContextCancelStopsCommand(t *testing.T) {
	c, work := subprocess(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	pidfile := filepath.Join(work, "pid")
	_, err := c.Exec(ctx, sandbox.ExecRequest{Argv: sh("echo $$ > " + pidfile + "; exec sleep 1000")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	b, _ := os.ReadFile(pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, []int{pid})
}

// TestStoppedExecutorDoesNotHangCalls stops the executor (SIGSTOP): it
// neither reads requests nor answers. Every call still returns when its
// context ends, also one whose request does not fit in the pipe, and the
// calls after it; Close returns and ends the client's goroutines.
func TestStoppedExecutorDoesNotHangCalls(t *testing.T) {
	c, cmd, _ := startExecutor(t)
	if err := c.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 4<<20) // far more than a pipe holds
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"exec", func(ctx context.Context) error {
			_, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
			return err
		}},
		{"big write", func(ctx context.Context) error { return c.WriteFile(ctx, "big", big, 0o644) }},
		{"ping", c.Ping},
		{"exec after the big write", func(ctx context.Context) error {
			_, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
			return err
		}},
		{"kill all", c.KillAll},
	}
	for _, tt := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		errc := make(chan error, 1)
		go func() { errc <- tt.call(ctx) }()
		select {
		case err := <-errc:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a stopped executor: %v, want its context's deadline", tt.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s on a stopped executor ignores its context", tt.name)
		}
		cancel()
	}
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
		// Close does not wait out the abandoned exec's cancellation.
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("close took %s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs on a stopped executor")
	}
	if err := c.Ping(t.Context()); gym.ClassOf(err) != gym.ClassSandbox {
		t.Errorf("ping after close: %v, want a sandbox error", err)
	}
}

// brokenPipe is a stream whose reads return garbage or end.
func TestBrokenStream(t *testing.T) {
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"eof", nil},
		{"garbage", []byte{0, 0, 0, 3, 0xc1, 0xc1, 0xc1}},
		{"oversized", []byte{0xff, 0xff, 0xff, 0xff}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			c := executor.NewClient(bytes.NewReader(tt.data), pw)
			go io.Copy(io.Discard, pr)
			defer c.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			err := c.Ping(ctx)
			if gym.ClassOf(err) != gym.ClassSandbox {
				t.Fatalf("ping on a broken stream: %v (class %s)", err, gym.ClassOf(err))
			}
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatal("Done not closed")
			}
		})
	}
}

func TestInProcessServe(t *testing.T) {
	// The executor in-process over pipes: the path the Docker backend uses,
	// minus the container.
	reqR, reqW := io.Pipe()
	respR, respW := io.Pipe()
	work := t.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- executor.Serve(t.Context(), reqR, respW, executor.Options{WorkDir: work})
		respW.Close()
	}()
	c := executor.NewClient(respR, reqW)
	if err := c.WriteFile(t.Context(), "x", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	r, err := c.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"cat", "x"}})
	if err != nil || string(r.Stdout) != "y" {
		t.Fatalf("%q %v", r.Stdout, err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// BenchmarkExecEchoLocal measures `echo hi` through the executor on the
// host, without Docker: the executor's own share of a step.
func BenchmarkExecEchoLocal(b *testing.B) {
	c, _ := subprocess(b)
	ctx := context.Background()
	for b.Loop() {
		r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "hi"}})
		if err != nil || string(r.Stdout) != "hi\n" {
			b.Fatalf("exec: %+v %v", r, err)
		}
	}
}

// TestNoDescriptorLeak runs commands that end every way a command can
// (exit 0, exit 1, a failed start, a timeout, in the background) and
// checks that the executor holds no more file descriptors afterwards: each
// child's pidfd and pipes are closed.
func TestNoDescriptorLeak(t *testing.T) {
	c, cmd, _ := startExecutor(t)
	ctx := t.Context()
	fds := func() int {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	reqs := []sandbox.ExecRequest{
		{Argv: sh("echo hi")},
		{Argv: sh("exit 1")},
		{Argv: []string{"/nonexistent/binary"}},
		{Argv: sh("sleep 10"), Timeout: 50 * time.Millisecond},
		{Argv: sh("sleep 0.05"), Background: true},
	}
	run := func() {
		for _, req := range reqs {
			if _, err := c.Exec(ctx, req); err != nil && !strings.Contains(err.Error(), "nonexistent") {
				t.Fatalf("%v: %v", req.Argv, err)
			}
		}
	}
	run() // the runtime's own descriptors (poller, pipes) exist from here
	// Background commands end by themselves; their waiters close their
	// pidfds when they do.
	before := -1
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n := fds(); n == before {
			break
		} else {
			before = n
		}
		time.Sleep(200 * time.Millisecond)
	}
	for range 10 {
		run()
	}
	after := fds()
	for after > before && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(50 * time.Millisecond)
		after = fds()
	}
	if after > before {
		t.Errorf("the executor holds %d descriptors after 50 commands, %d before", after, before)
	}
}

// TestWriteFileModes checks what write_file leaves: the mode asked for
// (the umask does not apply; 0644 when none is given), the data whole, and
// over a directory an ErrIsDir that leaves the directory as it was and no
// temporary file behind.
func TestWriteFileModes(t *testing.T) {
	c, work := subprocess(t)
	ctx := t.Context()
	for name, mode := range map[string]fs.FileMode{"a.sh": 0o751, "b.txt": 0, "c.txt": 0o600} {
		if err := c.WriteFile(ctx, name, []byte(name), mode); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(work, name))
		if err != nil {
			t.Fatal(err)
		}
		want := mode
		if want == 0 {
			want = 0o644
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
		if data, err := os.ReadFile(filepath.Join(work, name)); err != nil || string(data) != name {
			t.Errorf("%s: %q %v", name, data, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(work, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "d", []byte("x"), 0o644); !errors.Is(err, sandbox.ErrIsDir) {
		t.Errorf("write over a directory: %v, want ErrIsDir", err)
	}
	if fi, err := os.Stat(filepath.Join(work, "d", "e")); err != nil || !fi.IsDir() {
		t.Errorf("the directory after a write over it: %v", err)
	}
	ents, err := os.ReadDir(work)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".gymserver-write-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}
