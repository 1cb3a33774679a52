package executor

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Bounds of the interval at which idle looks for a serving executor: often
// enough that a sandbox goes soon after its timeout, rarely enough to cost
// nothing.
const (
	minOrphanPoll = 250 * time.Millisecond
	maxOrphanPoll = 5 * time.Second
)

// runIdle is the idle mode, the main process of a sandbox container;
// args[0] is "idle":
//
//	idle [--orphan-after DURATION]
//
// It blocks until SIGTERM or SIGINT. With --orphan-after, it also returns
// once no executor in serve mode has run in the container for that long,
// counting from its own start: the controller that attached the executor is
// gone, and ending the main process stops the container (which the engine
// then removes if it was created with auto-remove).
//
// A serving executor is a process whose executable is the same file as
// this one, that runs under this process's uid, and whose mode argument
// (at the position of "idle" in this process's argv) is "serve". The
// executable and uid come from the kernel; the command line alone could be
// forged by any process.
func runIdle(args []string) int {
	fs := flag.NewFlagSet("executor idle", flag.ContinueOnError)
	orphanAfter := fs.Duration("orphan-after", 0, "exit when no executor has served for this long (0: never)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "executor: usage: idle [--orphan-after DURATION]")
		return 2
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if *orphanAfter <= 0 {
		<-sig
		return 0
	}
	w, err := newServeWatch(os.Args, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "executor idle:", err)
		return 2
	}
	poll := min(max(*orphanAfter/10, minOrphanPoll), maxOrphanPoll)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	lastSeen := time.Now()
	for {
		select {
		case <-sig:
			return 0
		case <-tick.C:
		}
		// Look before judging: after a pause (docker commit freezes the
		// container) the executor is likely still there.
		if w.serving() {
			lastSeen = time.Now()
		} else if time.Since(lastSeen) >= *orphanAfter {
			fmt.Fprintf(os.Stderr, "executor idle: no executor has served for %s; exiting\n", *orphanAfter)
			return 0
		}
	}
}

// serveWatch recognises the serving executors of a container.
type serveWatch struct {
	self     int
	uid, eid int
	exe      os.FileInfo
	// prefix is the argv before the mode, the executable excluded
	// (e.g. "__executor" for the gymserver binary).
	prefix []string
}

// newServeWatch prepares a watch for the process whose argv is argv and
// whose arguments from the mode on are args.
func newServeWatch(argv, args []string) (*serveWatch, error) {
	mode := len(argv) - len(args)
	if mode < 1 || !slices.Equal(argv[mode:], args) {
		return nil, fmt.Errorf("cannot find the mode in the command line %q", argv)
	}
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("own executable: %w", err)
	}
	return &serveWatch{self: os.Getpid(), uid: os.Getuid(), eid: os.Geteuid(), exe: exe, prefix: argv[1:mode]}, nil
}

// serving reports whether a serving executor runs now.
func (w *serveWatch) serving() bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell; never stop a container on a guess
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == w.self {
			continue
		}
		if w.isServe(filepath.Join("/proc", e.Name())) {
			return true
		}
	}
	return false
}

// isServe reports whether the process at dir (/proc/PID) is a serving
// executor. Processes of other users fail the uid check; zombies have no
// executable.
//
// The executable is checked where it can be read. A serving executor
// stops being readable (its /proc/PID/exe needs CAP_SYS_PTRACE, which
// this process lacks, even at the same uid) once it has started a command
// as the agent: the child of the vfork shares its memory until exec, and
// the child's setuid marks that memory not dumpable. Such a process is
// then taken on its uid and command line alone, which is safe: the
// agent cannot start processes of this uid, and the worst a wrong answer
// does is keep an orphaned container until it is reaped.
func (w *serveWatch) isServe(dir string) bool {
	exe, err := os.Stat(filepath.Join(dir, "exe"))
	switch {
	case err == nil:
		if !os.SameFile(exe, w.exe) {
			return false
		}
	case !errors.Is(err, fs.ErrPermission):
		return false
	}
	if uid, eid, ok := procUIDs(dir); !ok || uid != w.uid || eid != w.eid {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return false
	}
	argv := strings.Split(string(bytes.TrimSuffix(b, []byte{0})), "\x00")
	n := len(w.prefix) + 1
	return len(argv) > n && slices.Equal(argv[1:n], w.prefix) && argv[n] == "serve"
}

// procUIDs reads the real and effective uid of the process at dir.
func procUIDs(dir string) (uid, eid int, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, found := strings.CutPrefix(line, "Uid:")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, false
		}
		uid, err1 := strconv.Atoi(f[0])
		eid, err2 := strconv.Atoi(f[1])
		return uid, eid, err1 == nil && err2 == nil
	}
	return 0, 0, false
}
