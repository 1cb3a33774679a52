package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// WorkDir is the working directory of the sandboxes the suite makes.
const WorkDir = "/workspace"

// sessionIDPattern is the form of sandbox.NewSessionID's ids.
var sessionIDPattern = regexp.MustCompile(`^s-[0-9a-f]{24}$`)

// Suite says what the conformance suite runs against.
type Suite struct {
	// Provider makes the sandboxes under test.
	Provider sandbox.Provider
	// BaseImage is an image with /bin/sh, coreutils and python3.
	BaseImage string
	// Processes is true for backends that run real processes in a real
	// kernel: the suite then checks commands, timeouts, background
	// processes, limits, the user and the network. Backends without it
	// (the in-memory fake) run the file checks only.
	Processes bool
	// Gone reports whether the backend still holds anything for the
	// sandbox with this id (for Docker: whether the container exists).
	Gone func(ctx context.Context, id string) (bool, error)
}

// goneWithin bounds how long a closed sandbox's resources may take to go.
const goneWithin = time.Minute

// Run runs the conformance suite. Every check gets a fresh sandbox, so the
// subtests can run in parallel and be selected with -run.
func Run(t *testing.T, s Suite) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	image, err := s.Provider.Prepare(ctx, sandbox.ImageSpec{BaseImage: s.BaseImage, WorkDir: WorkDir})
	if err != nil {
		t.Fatalf("prepare %s: %v", s.BaseImage, err)
	}
	newBox := func(t *testing.T, res sandbox.Resources) sandbox.Sandbox {
		t.Helper()
		sb, err := s.Provider.Create(t.Context(), sandbox.Spec{Image: image, WorkDir: WorkDir,
			Env: map[string]string{"GYM_TEST": "1"}, Resources: res})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() {
			if err := sb.Close(context.Background()); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return sb
	}
	box := func(t *testing.T) sandbox.Sandbox { return newBox(t, sandbox.Resources{}) }

	t.Run("Files", func(t *testing.T) {
		t.Parallel()
		testFiles(t, box(t))
	})
	t.Run("SessionID", func(t *testing.T) {
		t.Parallel()
		// The provider mints every sandbox's session id, whatever the
		// caller put in the labels.
		seen := map[string]bool{}
		for range 3 {
			sb, err := s.Provider.Create(t.Context(), sandbox.Spec{Image: image, WorkDir: WorkDir,
				Labels: map[string]string{sandbox.LabelSession: "s-caller"}})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close(context.Background())
			id := sb.SessionID()
			if !sessionIDPattern.MatchString(id) || seen[id] {
				t.Errorf("session id %q (seen before: %v), want a new s- and 24 hex digits", id, seen[id])
			}
			seen[id] = true
		}
	})
	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		sb, err := s.Provider.Create(t.Context(), sandbox.Spec{Image: image, WorkDir: WorkDir})
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Close(t.Context()); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := sb.Close(t.Context()); err != nil {
			t.Errorf("second close: %v", err)
		}
		if _, err := sb.ReadFile(t.Context(), "x", 10); !errors.Is(err, gym.ErrSandbox) {
			t.Errorf("read after close: %v, want sandbox_error", err)
		}
		if s.Gone != nil {
			// Resources may go in the background after Close.
			waittest.Until(t, "the closed sandbox gone", goneWithin, func() (bool, error) {
				return s.Gone(t.Context(), sb.ID())
			})
		}
	})
	t.Run("CopyIn", func(t *testing.T) {
		t.Parallel()
		sb := box(t)
		// A file the agent wrote is replaced; a directory CopyIn creates
		// belongs to root, so the sandbox user cannot swap its files.
		mustWrite(t, sb, "app.py", []byte("agent's version"))
		err := sb.CopyIn(t.Context(), []sandbox.File{
			{Path: WorkDir + "/app.py", Data: []byte("installed"), Mode: 0o644},
			{Path: WorkDir + "/hidden/test_a.py", Data: []byte("hidden"), Mode: 0o644},
		})
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]string{"app.py": "installed", "hidden/test_a.py": "hidden"} {
			got, err := sb.ReadFile(t.Context(), p, 100)
			if err != nil || string(got) != want {
				t.Errorf("read %s: %q %v, want %q", p, got, err, want)
			}
		}
		if s.Processes {
			r := run(t, sb, sandbox.ExecRequest{Argv: []string{"stat", "-c", "%u %a", "hidden/test_a.py", "hidden"}})
			if got := strings.Fields(string(r.Stdout)); len(got) != 4 || got[0] != "0" || got[1] != "644" || got[2] != "0" {
				t.Errorf("copied file and directory owner/mode %q, want root 644 and root", r.Stdout)
			}
		}
		if err := sb.WriteFile(t.Context(), "hidden/test_a.py", []byte("tampered"), 0o644); err == nil {
			t.Errorf("the sandbox user overwrote a copied-in file")
		}
		// Remove is the machinery's: it clears what CopyIn installed.
		if err := sb.Remove(t.Context(), "hidden"); err != nil {
			t.Errorf("remove a copied-in directory: %v", err)
		}
		if _, err := sb.ReadFile(t.Context(), "hidden/test_a.py", 100); !errors.Is(err, sandbox.ErrNotExist) {
			t.Errorf("after remove: %v, want ErrNotExist", err)
		}
	})
	t.Run("Archive", func(t *testing.T) {
		t.Parallel()
		src := box(t)
		if _, ok := src.(sandbox.Archiver); !ok {
			t.Skip("the backend's sandboxes make no archives")
		}
		testArchive(t, src, box(t))
	})
	if !s.Processes {
		return
	}
	t.Run("Exec", func(t *testing.T) {
		t.Parallel()
		testExec(t, box(t))
	})
	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		testTimeout(t, box(t))
	})
	t.Run("OutputCap", func(t *testing.T) {
		t.Parallel()
		sb := box(t)
		r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "head -c 200000 /dev/zero | tr '\\0' a; echo done >&2"}, MaxOutput: 1000})
		if len(r.Stdout) != 1000 || r.StdoutDropped != 199000 {
			t.Errorf("kept %d bytes, dropped %d; want 1000 and 199000", len(r.Stdout), r.StdoutDropped)
		}
		if string(r.Stderr) != "done\n" || r.StderrDropped != 0 {
			t.Errorf("stderr %q dropped %d", r.Stderr, r.StderrDropped)
		}
	})
	t.Run("Background", func(t *testing.T) {
		t.Parallel()
		testBackground(t, box(t))
	})
	t.Run("DiskLimit", func(t *testing.T) {
		t.Parallel()
		// Writing past the limit fails for the writer; the sandbox and
		// the host's disk are fine.
		sb := newBox(t, sandbox.Resources{DiskBytes: 32 << 20})
		r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "head -c 100000000 /dev/zero > big.bin"}, Timeout: 60 * time.Second})
		if r.ExitCode == 0 {
			t.Errorf("wrote 100 MB under a 32 MiB disk limit: %+v", r)
		}
		r = run(t, sb, sandbox.ExecRequest{Argv: []string{"stat", "-c", "%s", "big.bin"}})
		if n, _ := strconv.ParseInt(strings.TrimSpace(string(r.Stdout)), 10, 64); n > 32<<20 {
			t.Errorf("big.bin has %d bytes, over the 32 MiB limit", n)
		}
		if r := run(t, sb, sandbox.ExecRequest{Argv: []string{"echo", "alive"}}); string(r.Stdout) != "alive\n" {
			t.Errorf("after the disk limit: %+v", r)
		}
	})
	t.Run("EscapeKillAll", func(t *testing.T) {
		t.Parallel()
		testEscapeKillAll(t, box(t))
	})
	t.Run("Report", func(t *testing.T) {
		t.Parallel()
		testReport(t, box(t))
	})
	t.Run("MachineryOutOfReach", func(t *testing.T) {
		t.Parallel()
		testMachineryOutOfReach(t, box(t))
	})
	t.Run("NonRoot", func(t *testing.T) {
		t.Parallel()
		sb := box(t)
		r := run(t, sb, sandbox.ExecRequest{Argv: []string{"id", "-u"}})
		if uid := strings.TrimSpace(string(r.Stdout)); uid == "0" || uid == "" {
			t.Fatalf("commands run as uid %q, want a non-root user", uid)
		}
		mustWrite(t, sb, "owned.txt", []byte("x"))
		r = run(t, sb, sandbox.ExecRequest{Argv: []string{"stat", "-c", "%u", "owned.txt"}})
		if strings.TrimSpace(string(r.Stdout)) == "0" {
			t.Errorf("written file owned by root")
		}
		r = run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"}})
		if !strings.Contains(string(r.Stdout), "CapEff:\t0000000000000000") || !strings.Contains(string(r.Stdout), "NoNewPrivs:\t1") {
			t.Errorf("privileges not dropped:\n%s", r.Stdout)
		}
	})
	t.Run("NoNetwork", func(t *testing.T) {
		t.Parallel()
		sb := box(t)
		r := run(t, sb, sandbox.ExecRequest{Argv: []string{"ls", "/sys/class/net"}})
		if ifaces := strings.Fields(string(r.Stdout)); len(ifaces) != 1 || ifaces[0] != "lo" {
			t.Errorf("network interfaces %q, want only lo", ifaces)
		}
		r = run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c",
			"import socket\ns = socket.socket()\ns.settimeout(3)\ns.connect(('1.1.1.1', 80))"}, Timeout: 20 * time.Second})
		if r.ExitCode == 0 {
			t.Errorf("connected to the internet")
		}
	})
	t.Run("ForkBomb", func(t *testing.T) {
		t.Parallel()
		sb := newBox(t, sandbox.Resources{PIDs: 64})
		r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "b() { b | b & }; b; sleep 30"}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("fork bomb: %v", err)
		}
		if r.ExitCode == 0 && !r.TimedOut {
			t.Errorf("fork bomb finished cleanly: %+v", r)
		}
		if err := sb.KillAll(t.Context()); err != nil {
			t.Fatalf("kill all after fork bomb: %v", err)
		}
		// The sandbox still works once the bomb is gone.
		eventually(t, 30*time.Second, func() error {
			r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"echo", "alive"}, Timeout: 5 * time.Second})
			if err != nil {
				return err
			}
			if string(r.Stdout) != "alive\n" {
				return fmt.Errorf("echo: %+v", r)
			}
			return nil
		})
	})
	t.Run("MemoryHog", func(t *testing.T) {
		t.Parallel()
		sb := newBox(t, sandbox.Resources{MemoryBytes: 128 << 20})
		r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", "x = b'a' * (1 << 30)\nprint(len(x))"}, Timeout: 60 * time.Second})
		if err != nil {
			t.Fatalf("memory hog: %v", err)
		}
		if r.ExitCode == 0 {
			t.Fatalf("allocated 1 GiB under a 128 MiB limit: %+v", r)
		}
		if !r.OOMKilled && !strings.Contains(string(r.Stderr), "MemoryError") {
			t.Errorf("memory hog not classified: exit %d signal %q oom %v stderr %q", r.ExitCode, r.Signal, r.OOMKilled, r.Stderr)
		}
		if r := run(t, sb, sandbox.ExecRequest{Argv: []string{"echo", "alive"}}); string(r.Stdout) != "alive\n" {
			t.Errorf("sandbox dead after the memory hog: %+v", r)
		}
	})
}

func testFiles(t *testing.T, sb sandbox.Sandbox) {
	ctx := t.Context()
	binary := make([]byte, 256*4)
	for i := range binary {
		binary[i] = byte(i)
	}
	unicode := []byte("héllo wörld — 你好 🚀\r\n\x00tail")
	cases := map[string][]byte{
		"bin.dat":                binary,
		"deep/er/unicode-名前.txt": unicode,
		WorkDir + "/empty":       {},
	}
	for p, data := range cases {
		if err := sb.WriteFile(ctx, p, data, 0o644); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
		got, err := sb.ReadFile(ctx, p, 1<<20)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("round trip %s: got %d bytes (%v), want %d", p, len(got), err, len(data))
		}
	}
	if err := sb.WriteFile(ctx, "run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := sb.ListDir(ctx, WorkDir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]sandbox.DirEntry{}
	for _, e := range entries {
		seen[e.Name] = e
	}
	if e := seen["run.sh"]; e.Mode.Perm() != 0o755 || e.IsDir {
		t.Errorf("run.sh listed as %+v, want mode 0755", e)
	}
	if e := seen["deep"]; !e.IsDir {
		t.Errorf("deep listed as %+v, want a directory", e)
	}
	if e := seen["bin.dat"]; e.Size != int64(len(binary)) {
		t.Errorf("bin.dat size %d", e.Size)
	}
	if _, err := sb.ReadFile(ctx, "missing.txt", 10); !errors.Is(err, sandbox.ErrNotExist) || !sandbox.IsNotExist(err) {
		t.Errorf("read missing: %v, want ErrNotExist", err)
	}
	if _, err := sb.ReadFile(ctx, "deep", 10); !errors.Is(err, sandbox.ErrIsDir) {
		t.Errorf("read directory: %v, want ErrIsDir", err)
	}
	if _, err := sb.ListDir(ctx, "bin.dat"); !errors.Is(err, sandbox.ErrNotDir) {
		t.Errorf("list a file: %v, want ErrNotDir", err)
	}
	got, err := sb.ReadFile(ctx, "bin.dat", 100)
	if !errors.Is(err, sandbox.ErrTooLarge) || !bytes.Equal(got, binary[:100]) {
		t.Errorf("capped read: %d bytes, %v; want the first 100 and ErrTooLarge", len(got), err)
	}
	if err := sb.WriteFile(ctx, "deep", []byte("x"), 0o644); !errors.Is(err, sandbox.ErrIsDir) {
		t.Errorf("writing over a directory: %v, want ErrIsDir", err)
	}
	// The directory is as it was, and the failed write left nothing
	// behind.
	if _, err := sb.ReadFile(ctx, "deep/er/unicode-名前.txt", 1<<20); err != nil {
		t.Errorf("the directory's file after a write over it: %v", err)
	}
	if after, err := sb.ListDir(ctx, WorkDir); err != nil || len(after) != len(entries) {
		t.Errorf("after a failed write the working directory holds %d entries (%v), before %d: %+v", len(after), err, len(entries), after)
	}
	if err := sb.Remove(ctx, "deep"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ReadFile(ctx, "deep/er/unicode-名前.txt", 10); !errors.Is(err, sandbox.ErrNotExist) {
		t.Errorf("after remove: %v", err)
	}
	if err := sb.Remove(ctx, "never-existed"); err != nil {
		t.Errorf("remove missing: %v", err)
	}
}

func testExec(t *testing.T, sb sandbox.Sandbox) {
	r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}})
	if r.ExitCode != 3 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" {
		t.Errorf("got %+v", r)
	}
	// Arguments reach the program as they are: no shell, no quoting.
	odd := []string{"a b", `"quoted"`, "$HOME", "; rm -rf /", "ünï"}
	r = run(t, sb, sandbox.ExecRequest{Argv: append([]string{"printf", "%s\\n"}, odd...)})
	if string(r.Stdout) != strings.Join(odd, "\n")+"\n" {
		t.Errorf("argv mangled: %q", r.Stdout)
	}
	mustWrite(t, sb, "sub/dir/f", nil)
	r = run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "pwd; echo $GYM_TEST $EXTRA; cat"},
		Dir: WorkDir + "/sub/dir", Env: []string{"EXTRA=yes"}, Stdin: []byte("from stdin")})
	if want := WorkDir + "/sub/dir\n1 yes\nfrom stdin"; string(r.Stdout) != want {
		t.Errorf("cwd/env/stdin: %q, want %q", r.Stdout, want)
	}
	// A missing program is the caller's mistake, reported as not found.
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/no/such/program"}}); !errors.Is(err, sandbox.ErrNotExist) {
		t.Errorf("missing program: %v, want ErrNotExist", err)
	}
	r = run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "kill -9 $$"}})
	if r.ExitCode != -1 || r.Signal == "" {
		t.Errorf("killed by a signal: exit %d signal %q", r.ExitCode, r.Signal)
	}
	// Commands run concurrently.
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 1; echo " + strconv.Itoa(i)}})
			if err != nil || strings.TrimSpace(string(r.Stdout)) != strconv.Itoa(i) {
				t.Errorf("concurrent exec %d: %+v %v", i, r, err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("8 concurrent 1 s commands took %s", d)
	}
}

func testTimeout(t *testing.T, sb sandbox.Sandbox) {
	start := time.Now()
	r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 1000 & sleep 1000; echo never"}, Timeout: time.Second})
	if !r.TimedOut || strings.Contains(string(r.Stdout), "never") {
		t.Fatalf("got %+v, want a timeout", r)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("timeout of 1 s returned after %s", d)
	}
	// Neither the sleep nor its background sibling survives.
	eventually(t, 10*time.Second, func() error {
		if n := countProcs(t, sb, "sleep 1000"); n != 0 {
			return fmt.Errorf("%d 'sleep 1000' processes remain", n)
		}
		return nil
	})
	// A cancelled context also kills the command.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "1000"}}); err == nil {
		t.Errorf("exec with a cancelled context returned no error")
	}
	eventually(t, 10*time.Second, func() error {
		if n := countProcs(t, sb, "sleep 1000"); n != 0 {
			return fmt.Errorf("%d 'sleep 1000' processes remain after cancel", n)
		}
		return nil
	})
}

func testBackground(t *testing.T, sb sandbox.Sandbox) {
	start := time.Now()
	r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 1000"}, Background: true})
	if r.PID <= 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("background start: %+v after %s", r, time.Since(start))
	}
	run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "(sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 &"}})
	if n := countProcs(t, sb, "sleep 1000"); n < 2 {
		t.Fatalf("%d background sleeps running, want >= 2", n)
	}
	if err := sb.KillAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if n := countProcs(t, sb, "sleep 1000"); n != 0 {
			return fmt.Errorf("%d sleeps survive KillAll", n)
		}
		return nil
	})
	// The sandbox still runs commands after KillAll.
	if r := run(t, sb, sandbox.ExecRequest{Argv: []string{"echo", "ok"}}); string(r.Stdout) != "ok\n" {
		t.Errorf("after KillAll: %+v", r)
	}
}

// countProcs counts the live processes whose command line contains want.
func countProcs(t *testing.T, sb sandbox.Sandbox, want string) int {
	t.Helper()
	// The state check skips zombies, which hold no resources.
	script := `for p in /proc/[0-9]*; do
  st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' $p/status 2>/dev/null)
  [ "$st" = Z ] && continue
  tr '\0' ' ' < $p/cmdline 2>/dev/null; echo
done`
	r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}})
	n := 0
	for _, line := range strings.Split(string(r.Stdout), "\n") {
		if strings.Contains(line, want) && !strings.Contains(line, "/proc/") {
			n++
		}
	}
	return n
}

func run(t *testing.T, sb sandbox.Sandbox, req sandbox.ExecRequest) sandbox.ExecResult {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = 30 * time.Second
	}
	r, err := sb.Exec(t.Context(), req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	return r
}

func mustWrite(t *testing.T, sb sandbox.Sandbox, p string, data []byte) {
	t.Helper()
	if err := sb.WriteFile(t.Context(), p, data, 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

// eventually polls check until it returns nil or the deadline passes.
func eventually(t *testing.T, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", within, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// testEscapeKillAll starts a chain of processes that fork and exit as fast
// as they can, each new one in a new session, so that a kill that walks a
// process list always finds it stale; KillAll must still end every one.
func testEscapeKillAll(t *testing.T, sb sandbox.Sandbox) {
	// Each process appends to hops.log, so the log grows while the chain
	// lives (its pid changes too fast to be seen in /proc).
	script := `import os, time
while True:
    if os.fork():
        os._exit(0)
    os.setsid()
    with open("hops.log", "a") as f:
        f.write("x")
    time.sleep(0.001)`
	mustWrite(t, sb, "hop.py", []byte(script))
	run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "hop.py"}, Background: true})
	size := func() int {
		data, err := sb.ReadFile(t.Context(), "hops.log", 1<<30)
		if err != nil && !errors.Is(err, sandbox.ErrNotExist) {
			t.Fatal(err)
		}
		return len(data)
	}
	eventually(t, 10*time.Second, func() error {
		if n := size(); n < 50 {
			return fmt.Errorf("the chain made %d hops", n)
		}
		return nil
	})
	if err := sb.KillAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	// No waiting for it to die: KillAll returns when nothing is left.
	before := size()
	time.Sleep(300 * time.Millisecond) // give a survivor time to show itself
	if after := size(); after != before {
		t.Errorf("the chain goes on after KillAll: %d hops, then %d", before, after)
	}
}

// testReport checks the report pipe: what the command writes to /dev/fd/3
// comes back; what a process it left behind writes does not arrive after
// the result (everything is killed first, and the call does not wait for
// the leftover); the command cannot read the pipe.
func testReport(t *testing.T, sb sandbox.Sandbox) {
	start := time.Now()
	r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c",
		"echo report >/dev/fd/3; setsid sh -c 'sleep 2; echo late >/dev/fd/3' 3>/dev/fd/3 & exit 0"},
		Report: true, Timeout: 30 * time.Second})
	if string(r.Report) != "report\n" || time.Since(start) > 10*time.Second {
		t.Errorf("report %q after %s, want %q at once", r.Report, time.Since(start), "report\n")
	}
	if n := countProcs(t, sb, "sleep 2"); n != 0 {
		t.Errorf("%d leftovers of the reporting command survive it", n)
	}
	r = run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo x >/dev/fd/3; cat /dev/fd/3"},
		Report: true, Timeout: 30 * time.Second})
	if r.ExitCode == 0 || string(r.Report) != "x\n" {
		t.Errorf("reading the report pipe: exit %d, report %q; want a failure and %q", r.ExitCode, r.Report, "x\n")
	}
}

// testMachineryOutOfReach checks that the agent cannot stop, kill, trace or
// talk over the sandbox's own processes: its commands and the sandbox go on.
func testMachineryOutOfReach(t *testing.T, sb sandbox.Sandbox) {
	// File operations and kills act as the agent on threads of their
	// own; none may leave the executor's process looking like the agent.
	for i := range 20 {
		mustWrite(t, sb, fmt.Sprintf("f%d.txt", i), []byte("x"))
		if err := sb.KillAll(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sed -n 's/^Uid:[[:space:]]*\\([0-9]*\\).*/\\1/p' /proc/$PPID/status"}})
	if uid := strings.TrimSpace(string(r.Stdout)); uid == "1000" || uid == "" {
		t.Errorf("the executor's process shows uid %q after acting as the agent", uid)
	}
	for _, cmd := range []string{
		"kill -STOP $PPID",
		"kill -9 $PPID",
		"kill -STOP -1",
		"kill -9 -1",
		"echo garbage > /proc/$PPID/fd/1",
		"for f in /proc/[0-9]*/fd/1; do echo garbage > $f; done 2>/dev/null; true",
		`python3 -c 'import ctypes, sys; sys.exit(0 if ctypes.CDLL(None).ptrace(16, 1, 0, 0) == -1 else 1)'`,
	} {
		r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if r.TimedOut {
			t.Errorf("%s: timed out", cmd)
		}
		if strings.Contains(cmd, "ptrace") && r.ExitCode != 0 {
			t.Errorf("the agent can ptrace PID 1")
		}
		after := run(t, sb, sandbox.ExecRequest{Argv: []string{"echo", "alive"}, Timeout: 10 * time.Second})
		if string(after.Stdout) != "alive\n" {
			t.Fatalf("after %s: %+v", cmd, after)
		}
	}
	mustWrite(t, sb, "fifo-maker.sh", []byte("mkfifo pipe"))
	run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "fifo-maker.sh"}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := sb.ReadFile(ctx, "pipe", 100); err == nil || ctx.Err() != nil || gym.ClassOf(err) == gym.ClassSandbox {
		t.Errorf("read a FIFO: %v (ctx %v), want a prompt error that is not the sandbox's", err, ctx.Err())
	}
}

// testArchive: what the agent wrote in src, and what it deleted, is what
// dst holds after a restore of src's archive; what dst held before is
// gone; an archive over the limit is refused with ErrNotArchivable.
func testArchive(t *testing.T, src, dst sandbox.Sandbox) {
	ctx := t.Context()
	mustWrite(t, src, "a.txt", []byte("one"))
	mustWrite(t, src, "sub/dir/b.txt", []byte("two"))
	mustWrite(t, dst, "stale.txt", []byte("not in the archive"))
	c, err := src.(sandbox.Archiver).Archive(ctx, 0)
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	// Later changes are not in it.
	mustWrite(t, src, "later.txt", []byte("later"))
	data, err := c.Fetch(ctx)
	if err != nil || int64(len(data)) != c.Size {
		t.Fatalf("fetch: %d bytes, %v; want %d", len(data), err, c.Size)
	}
	if err := dst.(sandbox.Archiver).Restore(ctx, data); err != nil {
		t.Fatalf("restore: %v", err)
	}
	for p, want := range map[string]string{"a.txt": "one", "sub/dir/b.txt": "two"} {
		if got, err := dst.ReadFile(ctx, p, 100); err != nil || string(got) != want {
			t.Errorf("restored %s: %q %v, want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"stale.txt", "later.txt"} {
		if _, err := dst.ReadFile(ctx, p, 100); !errors.Is(err, sandbox.ErrNotExist) {
			t.Errorf("%s after the restore: %v, want ErrNotExist", p, err)
		}
	}
	// The restored files are the agent's: it can change them.
	mustWrite(t, dst, "sub/dir/b.txt", []byte("changed"))
	mustWrite(t, src, "big.bin", make([]byte, 64<<10))
	if _, err := src.(sandbox.Archiver).Archive(ctx, 32<<10); !errors.Is(err, sandbox.ErrNotArchivable) {
		t.Errorf("archive over the limit: %v, want ErrNotArchivable", err)
	}
}
