package gymtest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// SystemPrompt is the system prompt of every gymtest episode.
const SystemPrompt = "You are an agent in an in-memory test environment. Use the tools to complete the task."

// Task is one task of an in-memory environment.
type Task struct {
	ID string
	// Prompt is the task's prompt; empty means "Do ID.".
	Prompt string
	// Expect maps a file path (relative to the working directory,
	// /workspace) to the content the agent must write there; each entry
	// is one unit_tests command, so one test case of the evaluation. A
	// task without Expect has one test that always passes.
	Expect map[string]string
	// Metadata is the task's free-form data, reported by Spec.
	Metadata map[string]any
}

// Env is an in-memory gym.Env: the real envs.TaskEnv over an in-memory
// sandbox. It is safe for concurrent use; configure it (SetMaxActions,
// SetResetHook, SetForkHook) before the first Reset.
//
// The sandbox's commands are a tiny shell: echo, cat, true, false,
// sleep SECONDS (killed by the command timeout or a cancelled step),
// crash (the sandbox dies, as when its container is killed: the call is a
// sandbox error and the evaluation is masked) and expect FILE CONTENT
// (exits 0 when FILE holds CONTENT; the tasks' unit_tests use it). Words
// may be single- or double-quoted; anything else is "command not found".
//
// Spec lists every task; Env is not a gym.TaskLister.
type Env struct {
	id         string
	tasks      []Task
	maxActions int
	resetHook  func(context.Context, gym.ResetRequest) error
	forkHook   func(ctx context.Context, snapshotID string) error
	provider   *sandboxtest.FakeProvider
	inner      *envs.TaskEnv

	// mu guards the fields below.
	mu        sync.Mutex
	open      map[string]bool
	resets    int
	snapshots map[string]bool
}

var (
	_ gym.Env    = (*Env)(nil)
	_ gym.Forker = (*Env)(nil)
)

// NewEnv returns an environment with the given id and tasks; without
// tasks it has one, named like the environment. It panics
// when they do not make a valid configuration (an id or a task id the
// config loader refuses, a task without a prompt): that is a mistake in
// the test.
func NewEnv(id string, tasks ...Task) *Env {
	p := sandboxtest.NewFakeProvider()
	p.ExecFunc = shell
	e := &Env{id: id, tasks: tasks, provider: p, open: map[string]bool{}, snapshots: map[string]bool{}}
	e.build()
	return e
}

// build makes the episode logic from the environment's settings.
func (e *Env) build() {
	type taskJSON struct {
		ID        string         `json:"id"`
		Prompt    string         `json:"prompt"`
		UnitTests []string       `json:"unit_tests,omitempty"`
		Metadata  map[string]any `json:"metadata,omitempty"`
	}
	env := map[string]any{
		"id":           e.id,
		"description":  "in-memory test environment",
		"docker_image": "gymtest",
		"unit_tests":   []string{"true"},
	}
	if e.maxActions > 0 {
		env["max_actions"] = e.maxActions
	}
	var list []taskJSON
	for _, t := range e.tasks {
		tj := taskJSON{ID: t.ID, Prompt: cmp.Or(t.Prompt, "Do "+t.ID+"."), Metadata: t.Metadata}
		for _, p := range slices.Sorted(maps.Keys(t.Expect)) {
			tj.UnitTests = append(tj.UnitTests, "expect "+Quote(p)+" "+Quote(t.Expect[p]))
		}
		list = append(list, tj)
	}
	if len(list) > 0 {
		env["tasks"] = list
	} else {
		// No task: the environment's own, as a config without tasks has.
		env["prompt"] = "Do nothing."
		delete(env, "tasks")
	}
	data, err := json.Marshal(map[string]any{"template_prompt": SystemPrompt, "environments": []any{env}})
	if err != nil {
		panic(err)
	}
	cfg, err := config.Parse(data, "/")
	if err != nil {
		panic(fmt.Sprintf("gymtest: environment %s: %v", e.id, err))
	}
	inner, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: e.provider})
	if err != nil {
		panic(fmt.Sprintf("gymtest: environment %s: %v", e.id, err))
	}
	e.inner = inner
}

// Output is what the agent sees of a command of the sandbox's shell that
// exits 0 after printing stdout (and nothing on stderr): the episode
// logic's rendering of a command's result.
func Output(stdout string) string {
	if stdout == "" {
		return "Exit code: 0"
	}
	return "Exit code: 0\nstdout:\n" + strings.TrimRight(stdout, "\n")
}

// Quote quotes s as one word of the sandbox's shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SetMaxActions sets the number of tool calls after which episodes are
// truncated (0: the configuration's default, 100) and returns e. Call it
// before the first Reset.
func (e *Env) SetMaxActions(n int) *Env {
	e.maxActions = n
	e.build()
	return e
}

// SetResetHook makes every Reset call hook first and fail with its error,
// if any; tests use it to block or fail resets. Call it before the first
// Reset. It returns e.
func (e *Env) SetResetHook(hook func(context.Context, gym.ResetRequest) error) *Env {
	e.resetHook = hook
	return e
}

// SetForkHook makes every Fork call hook first and fail with its error, if
// any; tests use it to block or fail forks. Call it before the first Fork.
// It returns e.
func (e *Env) SetForkHook(hook func(ctx context.Context, snapshotID string) error) *Env {
	e.forkHook = hook
	return e
}

// Spec describes the environment and all its tasks.
func (e *Env) Spec() gym.EnvSpec {
	spec := e.inner.Spec()
	spec.Tasks, spec.TaskCount = e.inner.Tasks(0, -1)
	return spec
}

// Provider returns the in-memory sandbox provider the sessions run on.
func (e *Env) Provider() *sandboxtest.FakeProvider { return e.provider }

// OpenSessions returns the ids of the sessions that are not closed yet,
// sorted.
func (e *Env) OpenSessions() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sortedKeys(e.open)
}

// Resets returns the number of successful resets so far.
func (e *Env) Resets() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resets
}

// Snapshots returns the ids of the snapshots not dropped yet, sorted.
func (e *Env) Snapshots() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sortedKeys(e.snapshots)
}

func sortedKeys(m map[string]bool) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Reset starts an episode (envs.TaskEnv.Reset: the named task, else the
// seed's, else one at random), after the reset hook.
func (e *Env) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	if e.resetHook != nil {
		if err := e.resetHook(ctx, req); err != nil {
			return nil, gym.Reset{}, fmt.Errorf("env %s: reset: %w", e.id, err)
		}
	}
	s, r, err := e.inner.Reset(ctx, req)
	if err != nil {
		return nil, r, err
	}
	e.mu.Lock()
	e.resets++
	e.mu.Unlock()
	return e.track(s), r, nil
}

// Fork starts a session from a snapshot (envs.TaskEnv.Fork), after the
// fork hook.
func (e *Env) Fork(ctx context.Context, snapshotID string) (gym.Session, gym.Reset, error) {
	if e.forkHook != nil {
		if err := e.forkHook(ctx, snapshotID); err != nil {
			return nil, gym.Reset{}, fmt.Errorf("env %s: fork %s: %w", e.id, snapshotID, err)
		}
	}
	s, r, err := e.inner.Fork(ctx, snapshotID)
	if err != nil {
		return nil, r, err
	}
	return e.track(s), r, nil
}

// DropSnapshot deletes a snapshot; sessions forked from it go on.
func (e *Env) DropSnapshot(ctx context.Context, snapshotID string) error {
	if err := e.inner.DropSnapshot(ctx, snapshotID); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.snapshots, snapshotID)
	e.mu.Unlock()
	return nil
}

// track records s as open until it closes.
func (e *Env) track(s gym.Session) *session {
	e.mu.Lock()
	e.open[s.ID()] = true
	e.mu.Unlock()
	return &session{Session: s, env: e}
}

// session is an envs session that the Env counts.
type session struct {
	gym.Session
	env *Env
}

var _ gym.Snapshotter = (*session)(nil)

func (s *session) Close(ctx context.Context) (gym.Result, error) {
	res, err := s.Session.Close(ctx)
	s.env.mu.Lock()
	delete(s.env.open, s.ID())
	s.env.mu.Unlock()
	return res, err
}

func (s *session) Snapshot(ctx context.Context) (gym.Snapshot, error) {
	snap, err := s.Session.(gym.Snapshotter).Snapshot(ctx)
	if err != nil {
		return snap, err
	}
	s.env.mu.Lock()
	s.env.snapshots[snap.ID] = true
	s.env.mu.Unlock()
	return snap, nil
}

// shell answers the in-memory sandbox's commands (see Env).
func shell(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	start := time.Now()
	if req.Background {
		return sandbox.ExecResult{PID: 2}, nil
	}
	command := strings.Join(req.Argv, " ")
	if len(req.Argv) == 3 && req.Argv[0] == "/bin/sh" && req.Argv[1] == "-c" {
		command = req.Argv[2]
	}
	words, err := split(command)
	if err != nil {
		return sandbox.ExecResult{ExitCode: 2, Stderr: []byte("sh: " + err.Error() + "\n")}, nil
	}
	res := run(ctx, sb, req, words)
	res.Duration = time.Since(start)
	if res.ExitCode == crashed {
		// The sandbox dies like a killed container: this call and every
		// later one fail as the sandbox's fault.
		_ = sb.Close(ctx)
		return sandbox.ExecResult{}, gym.Errorf(gym.ClassSandbox, "gymtest: sandbox %s crashed", sb.ID())
	}
	return res, nil
}

// crashed is run's exit code for the crash command.
const crashed = -1000

// run runs one command of the tiny shell.
func run(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest, words []string) sandbox.ExecResult {
	out := func(code int, stdout string) sandbox.ExecResult {
		return sandbox.ExecResult{ExitCode: code, Stdout: []byte(stdout)}
	}
	file := func(p string) string {
		if !path.IsAbs(p) && req.Dir != "" {
			p = path.Join(req.Dir, p)
		}
		return p
	}
	if len(words) == 0 {
		return out(0, "")
	}
	switch args := words[1:]; words[0] {
	case "echo":
		return out(0, strings.Join(args, " ")+"\n")
	case "cat":
		var b strings.Builder
		for _, p := range args {
			data, err := sb.ReadFile(ctx, file(p), 1<<30)
			if err != nil {
				return sandbox.ExecResult{ExitCode: 1, Stdout: []byte(b.String()), Stderr: []byte("cat: " + p + ": No such file or directory\n")}
			}
			b.Write(data)
		}
		return out(0, b.String())
	case "true":
		return out(0, "")
	case "false":
		return out(1, "")
	case "crash":
		return out(crashed, "")
	case "expect":
		if len(args) != 2 {
			return out(2, "expect: want FILE CONTENT\n")
		}
		data, err := sb.ReadFile(ctx, file(args[0]), 1<<30)
		switch {
		case err != nil:
			return out(1, args[0]+": not written\n")
		case string(data) != args[1]:
			return out(1, fmt.Sprintf("%s: content %q, want %q\n", args[0], data, args[1]))
		}
		return out(0, "")
	case "sleep":
		if len(args) != 1 {
			return out(1, "sleep: want one operand\n")
		}
		sec, err := strconv.ParseFloat(args[0], 64)
		if err != nil || sec < 0 {
			return out(1, "sleep: invalid time interval "+strconv.Quote(args[0])+"\n")
		}
		d := time.Duration(sec * float64(time.Second))
		timedOut := req.Timeout > 0 && req.Timeout < d
		if timedOut {
			d = req.Timeout
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			if timedOut {
				return sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}
			}
			return out(0, "")
		case <-ctx.Done():
			return sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL"}
		}
	}
	return sandbox.ExecResult{ExitCode: 127, Stderr: []byte("sh: " + words[0] + ": command not found\n")}
}

// split splits a command into words: runs of blanks separate them, and
// single quotes, double quotes and backslashes quote as in sh (without
// expansions).
func split(command string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(command); i++ {
		c := command[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(command[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quoted string")
			}
			w.WriteString(command[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(command) && command[i] != '"'; i++ {
				if command[i] == '\\' && i+1 < len(command) && strings.IndexByte(`"\$`+"`", command[i+1]) >= 0 {
					i++
				}
				w.WriteByte(command[i])
			}
			if i >= len(command) {
				return nil, fmt.Errorf("unterminated quoted string")
			}
			inWord = true
		case c == '\\' && i+1 < len(command):
			i++
			w.WriteByte(command[i])
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}
