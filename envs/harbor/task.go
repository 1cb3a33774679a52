package harbor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The files of a task directory, relative to it.
const (
	ConfigFile      = "task.toml"
	InstructionFile = "instruction.md"
	DockerfilePath  = "environment/Dockerfile"
	TestsPath       = "tests"
	TestScriptPath  = "tests/test.sh"
	SolutionPath    = "solution"
	SolveScriptPath = "solution/solve.sh"
)

// composeFiles are the names that make a task a multi-container one.
var composeFiles = []string{"docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"}

// Task is one loaded Harbor task directory. Paths are absolute.
type Task struct {
	// ID is the task directory's base name.
	ID string
	// Dir is the task directory.
	Dir string
	// Instruction is instruction.md without its leading canary lines.
	Instruction string
	Config      Config
	// Dockerfile is environment/Dockerfile, or "" when there is none; its
	// build context is its directory. When both Dockerfile and Image are
	// set, Harbor uses Image unless told to build.
	Dockerfile string
	// Image is [environment] docker_image, or "".
	Image string
	// TestsDir is uploaded to /tests after the agent finishes;
	// TestScript is its test.sh.
	TestsDir, TestScript string
	// SolutionDir is uploaded to /solution for the oracle, which runs
	// SolveScript; both are "" when the task ships no solution.
	SolutionDir, SolveScript string
	// Warnings lists what the task asks for that gymserver does not honour.
	Warnings []string
}

// Load loads the task directory at path, or, when path has no task.toml,
// every immediate subdirectory of path (hidden ones excepted), sorted by
// id. It reports every problem of every task at once, each naming its
// task directory.
func Load(path string) ([]Task, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("harbor: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("harbor: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("harbor: %s is not a directory", abs)
	}
	if isFile(filepath.Join(abs, ConfigFile)) {
		t, err := loadTask(abs)
		if err != nil {
			return nil, err
		}
		return []Task{t}, nil
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("harbor: %w", err)
	}
	var tasks []Task
	var errs []error
	for _, e := range entries { // ReadDir sorts by name
		dir := filepath.Join(abs, e.Name())
		if strings.HasPrefix(e.Name(), ".") || !isDir(dir) {
			continue
		}
		if !isFile(filepath.Join(dir, ConfigFile)) {
			errs = append(errs, fmt.Errorf("harbor task %s: no %s (not a task directory)", dir, ConfigFile))
			continue
		}
		t, err := loadTask(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tasks = append(tasks, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("harbor: %s has no %s and no task directories", abs, ConfigFile)
	}
	return tasks, nil
}

// loadTask loads one task directory; dir is absolute.
func loadTask(dir string) (Task, error) {
	t := Task{ID: filepath.Base(dir), Dir: dir}
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("harbor task %s: %s", dir, fmt.Sprintf(format, a...)))
	}
	configOK := false
	data, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		fail("%v", err)
	} else if cfg, warns, err := ParseConfig(data, ConfigFile); err != nil {
		// One line per problem, each naming the task.
		for _, e := range unjoin(err) {
			fail("%v", e)
		}
	} else {
		t.Config, t.Warnings = cfg, warns
		t.Image = cfg.Environment.DockerImage
		configOK = true
	}

	if b, err := os.ReadFile(filepath.Join(dir, InstructionFile)); errors.Is(err, fs.ErrNotExist) {
		fail("missing %s", InstructionFile)
	} else if err != nil {
		fail("%v", err)
	} else {
		t.Instruction = stripCanary(string(b))
		if strings.TrimSpace(t.Instruction) == "" {
			fail("%s is empty", InstructionFile)
		}
	}

	env := filepath.Join(dir, filepath.Dir(DockerfilePath))
	for _, name := range composeFiles {
		if isFile(filepath.Join(env, name)) {
			fail("environment/%s: multi-container (docker compose) tasks are not supported", name)
		}
	}
	if p := filepath.Join(dir, DockerfilePath); isFile(p) {
		t.Dockerfile = p
	}
	if t.Dockerfile == "" && t.Image == "" && configOK {
		fail("neither %s nor [environment] docker_image", DockerfilePath)
	}

	if p := filepath.Join(dir, TestScriptPath); isFile(p) {
		t.TestsDir, t.TestScript = filepath.Join(dir, TestsPath), p
	} else {
		fail("missing %s", TestScriptPath)
	}

	if p := filepath.Join(dir, SolveScriptPath); isFile(p) {
		t.SolutionDir, t.SolveScript = filepath.Join(dir, SolutionPath), p
	} else if isDir(filepath.Join(dir, SolutionPath)) {
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s has no solve.sh; the task has no reference solution", SolutionPath))
	}

	if len(errs) > 0 {
		return Task{}, errors.Join(errs...)
	}
	return t, nil
}

// canaryLine is a data-provenance marker at the top of instruction.md: an
// HTML or hash comment that mentions a canary. Harbor hides these from
// the agent.
var canaryLine = regexp.MustCompile(`(?i)^(<!--.*canary.*-->|#.*canary.*)$`)

// stripCanary drops the leading canary lines of s and the blank lines
// after them.
func stripCanary(s string) string {
	lines := strings.Split(s, "\n")
	i := 0
	for i < len(lines) && canaryLine.MatchString(strings.TrimSpace(lines[i])) {
		i++
	}
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	return strings.Join(lines[i:], "\n")
}

// unjoin returns the errors joined in err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
