package plugin

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// seedAdapter is the Python adapter that runs Real Work plugin modules: a
// copy of clients/python/gymserver/seedplugins.py (go generate keeps it
// so; a test checks they agree), carried here so the Python package need
// not be installed where the plugin runs.
//
//go:generate cp ../../clients/python/gymserver/seedplugins.py seedplugins.py
//go:embed seedplugins.py
var seedAdapter string

// PythonEnv names the environment variable that chooses the Python of
// module plugins; without it they run with python3 from PATH.
const PythonEnv = "GYMSERVER_PYTHON"

// modulePattern matches a dotted Python module path, as Real Work configs
// name their plugin modules ("my_custom_plugins.analyzer").
var modulePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)

// IsModuleName reports whether a plugin name without a command names a
// Python module: a dotted name that is not a built-in or a seed alias.
func IsModuleName(name string) bool {
	_, builtin := builtins[name]
	_, alias := SeedAliases[name]
	return !builtin && !alias && modulePattern.MatchString(name)
}

// SeedClass is one plugin class of a module, as the adapter found it.
type SeedClass struct {
	Class   string `json:"class"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Kind is the seed's plugin type ("trajectory_analyzer", ...), empty
	// for a direct BasePlugin subclass.
	Kind  string `json:"kind"`
	Hooks []Hook `json:"hooks"`
}

// Module is a plugin module written for Real Work, run by the Python
// adapter (clients/python/gymserver/seedplugins.py) as an external plugin:
// one process per hook call, the event on stdin, the answer on stdout.
// The module is imported from the config's directory and PYTHONPATH; its
// plugin classes get the entry's config. Load runs the adapter once to
// list the classes and their hooks, so a module that does not import, or
// holds no plugin class, fails Load (and `rollout --dry-run`). The
// classes' attributes are kept between calls in a state file in a
// temporary directory that Close removes.
type Module struct {
	name    string
	module  string
	classes []SeedClass
	hooks   []Hook
	ext     *External

	stateOnce sync.Once
	stateDir  string
	stateErr  error
}

var _ Plugin = (*Module)(nil)

// newModule finds the Python, and runs the adapter once to list the
// module's plugin classes, within timeout.
func newModule(c config.Plugin, dir string, timeout time.Duration) (*Module, error) {
	python := os.Getenv(PythonEnv)
	if python == "" {
		python = "python3"
	}
	path, err := exec.LookPath(python)
	if err != nil {
		return nil, gym.Classify(fmt.Errorf("python module %s: no Python to run it (set %s or put python3 on PATH): %w", c.Name, PythonEnv, err), gym.ClassNotFound)
	}
	cfgJSON := "{}"
	if len(c.Config) > 0 {
		cfgJSON = string(c.Config)
	}
	pythonPath := dir
	if pp := os.Getenv("PYTHONPATH"); pp != "" {
		pythonPath += string(os.PathListSeparator) + pp
	}
	m := &Module{
		name:   c.Name,
		module: c.Name,
		ext: &External{
			name: c.Name,
			argv: []string{path, "-c", seedAdapter, "handle", c.Name},
			dir:  dir,
			env:  []string{"PYTHONPATH=" + pythonPath, "GYMSERVER_SEEDPLUGIN_CONFIG=" + cfgJSON},
		},
	}
	if timeout <= 0 {
		timeout = config.DefaultPluginTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := m.describe(ctx, path); err != nil {
		return nil, err
	}
	return m, nil
}

// describe runs the adapter's describe command and keeps its answer.
func (m *Module) describe(ctx context.Context, python string) error {
	cmd := exec.CommandContext(ctx, python, "-c", seedAdapter, "describe", m.module)
	cmd.Dir = m.ext.dir
	cmd.Env = append(os.Environ(), m.ext.env...)
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = maxAnswer, 4<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	msg := strings.TrimSpace(stderr.String())
	if ctx.Err() != nil {
		return gym.Classify(fmt.Errorf("python module %s: not loaded within its timeout: %w", m.module, ctx.Err()), gym.ClassInvalidArgument)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		// The adapter's verdict on the module: not found, does not
		// import, no plugin class.
		class := gym.ClassInvalidArgument
		if strings.HasPrefix(msg, "module "+m.module+" not found") {
			class = gym.ClassNotFound
		}
		return gym.Classify(fmt.Errorf("python module %s: %s", m.module, lastLines(msg, 8)), class)
	}
	if err != nil {
		return gym.Classify(fmt.Errorf("python module %s: %s: %w: %s", m.module, python, err, lastLines(msg, 8)), gym.ClassInvalidArgument)
	}
	var d struct {
		Plugins []SeedClass `json:"plugins"`
		Hooks   []Hook      `json:"hooks"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil {
		return gym.Classify(fmt.Errorf("python module %s: the adapter's answer is not JSON: %w", m.module, err), gym.ClassInternal)
	}
	for _, h := range d.Hooks {
		if !slices.Contains(AllHooks, h) {
			return gym.Classify(fmt.Errorf("python module %s: unknown hook %q", m.module, h), gym.ClassInvalidArgument)
		}
	}
	m.classes, m.hooks = d.Plugins, d.Hooks
	return nil
}

// lastLines returns the last n lines of s, where a traceback ends.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Name is the plugin's name in the config: the module path.
func (m *Module) Name() string { return m.name }

// Hooks returns the hooks the module's classes handle: their
// supported_hooks and their kinds' (see the adapter's documentation).
func (m *Module) Hooks() []Hook { return slices.Clone(m.hooks) }

// Classes returns the module's plugin classes.
func (m *Module) Classes() []SeedClass { return slices.Clone(m.classes) }

// Handle runs the adapter once for ev.
func (m *Module) Handle(ctx context.Context, ev *Event) (Response, error) {
	m.stateOnce.Do(func() {
		m.stateDir, m.stateErr = os.MkdirTemp("", "gymserver-seedplugin-*")
		if m.stateErr == nil {
			m.ext.env = append(m.ext.env, "GYMSERVER_SEEDPLUGIN_STATE="+filepath.Join(m.stateDir, "state.pickle"))
		}
	})
	if m.stateErr != nil {
		return Response{}, fmt.Errorf("python module %s: state directory: %w", m.module, m.stateErr)
	}
	r, err := m.ext.Handle(ctx, ev)
	if err != nil {
		return Response{}, fmt.Errorf("python module %s: %w", m.module, err)
	}
	return r, nil
}

// Close removes the state directory.
func (m *Module) Close() error {
	if m.stateDir == "" {
		return nil
	}
	return os.RemoveAll(m.stateDir)
}
