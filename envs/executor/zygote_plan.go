package executor

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Which test commands the verifier zygote runs (see zygote.go): the
// parse of the command line and the checks that make the forked child the
// process the shell would have started.

// plainPytest parses a test command line that is a plain pytest
// invocation: `pytest ARGS`, `python3 -m pytest ARGS` or
// `python -m pytest ARGS`, words separated by spaces or tabs, every word
// made only of characters the shell takes literally. It returns the
// program to look up on PATH ("pytest", "python3" or "python"), whether it
// runs pytest as a module, and pytest's arguments; ok is false for
// anything else (quotes, variables, globs, redirections, several commands,
// assignments, ...), which runs through the shell as usual.
func plainPytest(line string) (prog string, module bool, args []string, ok bool) {
	words := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 {
		return "", false, nil, false
	}
	for _, w := range words {
		for _, r := range w {
			if !literalRune(r) {
				return "", false, nil, false
			}
		}
	}
	switch {
	case words[0] == "pytest":
		return "pytest", false, words[1:], true
	case (words[0] == "python3" || words[0] == "python") && len(words) >= 3 && words[1] == "-m" && words[2] == "pytest":
		return words[0], true, words[3:], true
	}
	return "", false, nil, false
}

// literalRune reports whether the shell takes r literally anywhere in a
// word.
func literalRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("_-./:=,+@%", r)
}

// zygotePlan decides whether exec request req, whose process would get
// environment env (before de-duplication) and run in dir, runs through
// the zygote, and returns the zygote, its request and the time spent
// waiting for it (until ctx ends at most); otherwise why not.
func (s *server) zygotePlan(ctx context.Context, req request, env []string, dir string) (*zygote, zygoteReq, time.Duration, string) {
	var zr zygoteReq
	a := s.opts.Agent
	switch {
	case a == nil:
		return nil, zr, 0, "no agent identity"
	case req.Priv || req.Background || req.Shell || req.Stdin != nil:
		return nil, zr, 0, "not a plain command"
	case len(req.Argv) != 3 || req.Argv[0] != "/bin/sh" || req.Argv[1] != "-c":
		return nil, zr, 0, "not a /bin/sh -c command"
	}
	prog, module, args, ok := plainPytest(req.Argv[2])
	if !ok {
		return nil, zr, 0, "not a plain pytest command"
	}
	s.mu.Lock()
	z := s.zygote
	s.mu.Unlock()
	if z == nil {
		return nil, zr, 0, "no zygote started"
	}
	t0 := time.Now()
	why := z.await(ctx, zygoteReadyWait)
	waited := time.Since(t0)
	if why != "" {
		return nil, zr, waited, why
	}
	env = dedupEnv(env)
	m := envMap(env)
	// What Python fixes when it starts must be what the zygote started
	// with.
	for _, kv := range append(append([]string(nil), env...), mapEnv(z.env)...) {
		k, _, _ := strings.Cut(kv, "=")
		if startupVar(k) {
			zv, zok := z.env[k]
			v, ok := m[k]
			if zv != v || zok != ok {
				return nil, zr, waited, "the Python start-up variable " + k + " differs from the zygote's"
			}
		}
	}
	if pp, ok := m["PYTHONPATH"]; ok && (!filepath.IsAbs(pp) || strings.Contains(pp, ":")) {
		return nil, zr, waited, "PYTHONPATH is not one absolute directory"
	}
	// What the interpreter added to its own environment when it
	// started, a fresh one would add too.
	for k, v := range z.info.Environ {
		if _, set := z.env[k]; !set {
			if _, ok := m[k]; !ok {
				env = append(env, k+"="+v)
			}
		}
	}
	want := z.info.Python
	if !module {
		want = z.info.Pytest
	}
	if want == "" {
		return nil, zr, waited, "the zygote found no system pytest script"
	}
	var path string
	err := asAgent(a, func() error {
		path, why = lookPathSame(prog, m["PATH"], want)
		if why != "" {
			return nil
		}
		why = enterable(dir, a)
		return nil
	})
	if err != nil {
		return nil, zr, waited, err.Error()
	}
	if why != "" {
		return nil, zr, waited, why
	}
	argv0 := path
	if module {
		argv0 = z.info.Main
	}
	zr = zygoteReq{Argv: append([]string{argv0}, args...), Env: env, Dir: dir, UID: a.UID, GID: a.GID}
	return z, zr, waited, ""
}

// startupVar reports whether Python reads variable k when it starts
// (rather than when a program asks for it), or OpenSSL when a module the
// zygote holds loads it.
func startupVar(k string) bool {
	if k == "PYTHONPATH" {
		return false // the child sets sys.path from it
	}
	return strings.HasPrefix(k, "PYTHON") || k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") || k == "TZ" ||
		strings.HasPrefix(k, "OPENSSL_") // read when ssl or hashlib is imported (see _PRELOADABLE in zygote.py)
}

func mapEnv(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// lookPathSame finds name on pathVar as the shell would (the first
// directory that has it) and returns the path if it is the file want;
// otherwise why not. It runs with the agent's file-system identity.
func lookPathSame(name, pathVar, want string) (string, string) {
	wi, err := os.Stat(want)
	if err != nil {
		return "", "stat " + want + ": " + err.Error()
	}
	for _, d := range strings.Split(pathVar, ":") {
		if !filepath.IsAbs(d) {
			return "", "PATH has a relative directory before " + name
		}
		p := strings.TrimSuffix(d, "/") + "/" + name
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if !os.SameFile(fi, wi) {
			return "", p + " is not the zygote's " + want
		}
		return p, ""
	}
	return "", name + " is not on PATH"
}

// enterable says why the agent cannot make dir its working directory, ""
// when it can (with no supplementary groups).
func enterable(dir string, a *Cred) string {
	fi, err := os.Stat(dir)
	if err != nil {
		return err.Error()
	}
	if !fi.IsDir() {
		return dir + " is not a directory"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "stat " + dir
	}
	perm := fi.Mode().Perm()
	var x fs.FileMode
	switch {
	case int(st.Uid) == a.UID:
		x = perm & 0o100
	case int(st.Gid) == a.GID:
		x = perm & 0o010
	default:
		x = perm & 0o001
	}
	if x == 0 {
		return dir + " is not searchable by the agent"
	}
	return ""
}
