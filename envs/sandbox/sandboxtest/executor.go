package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  string
)

// ExecutorBinary builds the static executor (envs/executor/gymexec) once
// per test process and returns its path. The binary takes the executor's
// mode as its first argument (no "__executor" prefix).
func ExecutorBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gymserver-executor-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		buildPath = filepath.Join(dir, "gymexec")
		cmd := exec.Command("go", "build", "-o", buildPath, "github.com/gymserver/gymserver/envs/executor/gymexec")
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = strings.TrimSpace(string(out)) + ": " + err.Error()
		}
	})
	if buildErr != "" {
		t.Fatalf("build executor: %s", buildErr)
	}
	return buildPath
}

// moduleRoot is the repository root, found from this file's location.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
