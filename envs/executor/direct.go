package executor

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Commands started without the shell. A step's command line runs as
// `/bin/sh -c LINE`, and for a line that is only a program and its
// arguments the shell does nothing but split it into words, find the
// program on PATH, and fork and wait for it (Debian's dash forks even for
// the last command of -c). The executor then starts the program itself:
// one process start instead of two. It starts the process the shell would
// have started: same argv (argv[0] as written), environment (with PWD as
// the shell sets it), directory, identity, limits and descriptors; it
// reports a signal's end as the shell does (exit status 128+N, and the
// signal's name on stderr but for SIGINT and SIGPIPE). Only the order of
// the environment differs (the shell exports its variables in an order of
// its own), and the program's parent is the executor. Anything else, or a
// program the kernel refuses to run (a script without #!, say), runs
// through the shell.

// shellNames are dash's builtins and reserved words: a first word among
// them is not a program the shell would look up on PATH.
var shellNames = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`! { } case do done elif else esac fi for if in then until while
		. : [ alias bg break cd chdir command continue echo eval exec exit export false fc fg getopts
		hash jobs kill local printf pwd read readonly return set shift test times trap true type
		ulimit umask unalias unset wait`) {
		shellNames[w] = true
	}
}

// plainCommand splits a command line that is a program and its
// arguments, every word made only of characters the shell takes
// literally, the program neither a builtin, a reserved word nor an
// assignment; ok is false for anything else.
func plainCommand(line string) (words []string, ok bool) {
	words = strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 || shellNames[words[0]] || strings.ContainsRune(words[0], '=') {
		return nil, false
	}
	for _, w := range words {
		for _, r := range w {
			if !literalRune(r) {
				return nil, false
			}
		}
	}
	return words, true
}

// directCmd returns the command that starts the program of cmd, an exec
// request's `/bin/sh -c LINE` ready to start, without the shell, or nil
// when the request or its line is not one the executor starts directly.
// A program named through one of links is looked at and started through
// the path the link leads to (see rootLinks).
func directCmd(req request, cmd *exec.Cmd, links *rootLinks) *exec.Cmd {
	if req.Priv || req.Background || req.Shell || len(req.Argv) != 3 || req.Argv[0] != "/bin/sh" || req.Argv[1] != "-c" {
		return nil
	}
	words, ok := plainCommand(req.Argv[2])
	if !ok {
		return nil
	}
	env := dedupEnv(cmd.Env)
	m := envMap(env)
	path := programPath(words[0], m, links)
	if path == "" {
		return nil
	}
	// The shell keeps PWD when it names the directory it starts in, and
	// otherwise sets it to the directory's physical path.
	if pwd, ok := m["PWD"]; !ok || !filepath.IsAbs(pwd) || !sameFile(pwd, cmd.Dir) {
		phys, err := filepath.EvalSymlinks(cmd.Dir)
		if err != nil {
			return nil
		}
		env = append(slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PWD=") }), "PWD="+phys)
	}
	return &exec.Cmd{
		Path:        links.execPath(path),
		Args:        words,
		Dir:         cmd.Dir,
		Env:         env,
		SysProcAttr: cmd.SysProcAttr,
		Stdin:       cmd.Stdin,
		Stdout:      cmd.Stdout,
		Stderr:      cmd.Stderr,
		ExtraFiles:  cmd.ExtraFiles,
		WaitDelay:   cmd.WaitDelay,
	}
}

// programPath is the file the shell would run for the command's first
// word: the word itself when it is an absolute path, else the first file
// of that name in PATH's directories. It is "" when the shell might do
// something else: a relative path, no PATH or a relative directory in it,
// a name found nowhere, or a first match that is not a regular file with
// an execute bit. A match the agent cannot run fails to start, and the
// command then runs through the shell, which goes on along PATH. Files
// are looked at through links (the same files, see rootLinks); the path
// returned is as the shell would name it.
func programPath(name string, env map[string]string, links *rootLinks) string {
	regular := func(p string) bool {
		fi, err := os.Stat(links.resolve(p))
		return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
	}
	if strings.ContainsRune(name, '/') {
		if filepath.IsAbs(name) && regular(name) {
			return name
		}
		return ""
	}
	pathVar, ok := env["PATH"]
	if !ok {
		return ""
	}
	for _, d := range strings.Split(pathVar, ":") {
		if !filepath.IsAbs(d) {
			return ""
		}
		p := strings.TrimSuffix(d, "/") + "/" + name
		if _, err := os.Lstat(links.resolve(p)); err != nil {
			continue
		}
		if regular(p) {
			return p
		}
		return ""
	}
	return ""
}

// sameFile reports whether paths a and b name the same file.
func sameFile(a, b string) bool {
	ai, err1 := os.Stat(a)
	bi, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(ai, bi)
}

// shellSignalEnd turns the end of a program started without the shell by
// signal ws.Signal() into what the shell would have reported: exit
// status 128+N, and the message it writes to its stderr (none for SIGINT
// and SIGPIPE).
func shellSignalEnd(ws syscall.WaitStatus) (syscall.WaitStatus, string) {
	sig := ws.Signal()
	out := syscall.WaitStatus((128 + int(sig)) << 8)
	if sig == syscall.SIGINT || sig == syscall.SIGPIPE {
		return out, ""
	}
	msg := signalText(sig)
	if ws.CoreDump() {
		msg += " (core dumped)"
	}
	return out, msg + "\n"
}

// signalText is the C library's description of sig (strsignal), which
// the shell prints: Go's with its first letter in upper case for the
// classic signals, "Real-time signal N" from SIGRTMIN (34) on.
func signalText(sig syscall.Signal) string {
	switch {
	case sig >= 34:
		return "Real-time signal " + strconv.Itoa(int(sig)-34)
	case sig >= 32:
		return "Unknown signal " + strconv.Itoa(int(sig))
	}
	s := sig.String()
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}
