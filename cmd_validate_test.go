package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	validateBinOnce sync.Once
	validateBin     string
	validateBinErr  error
)

// validateBinary builds the static gymserver binary once: `validate --solve`
// copies its own executable into sandboxes, so it must be the real binary,
// not the test binary.
func validateBinary(t *testing.T) string {
	t.Helper()
	validateBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gymserver-validate-")
		if err != nil {
			validateBinErr = err
			return
		}
		validateBin = filepath.Join(dir, "gymserver")
		cmd := exec.Command("go", "build", "-o", validateBin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			validateBinErr = &exec.ExitError{Stderr: out}
		}
	})
	if validateBinErr != nil {
		t.Fatalf("build gymserver: %v", validateBinErr)
	}
	return validateBin
}

// TestValidateWithoutDocker checks a config with no Docker at all: the
// environment points at a daemon that does not exist.
func TestValidateWithoutDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"validate", "--json", "examples/calculator_api/config.json"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var report struct {
		Environments []struct {
			ID string `json:"id"`
			OK bool   `json:"ok"`
		} `json:"environments"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
	}
	if len(report.Environments) != 1 || report.Environments[0].ID != "calculator_api" || !report.Environments[0].OK {
		t.Errorf("report %+v", report)
	}
}

func TestValidateBadConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"environments": [{"id": "x", "docker_image": "i", "unit_tests": ["t"], "prompt": "p", "max_action": 3}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"validate", bad}, &stdout, &stderr)
	if code == 0 {
		t.Fatal("a bad config validated")
	}
	if !strings.Contains(stderr.String(), `environments[0].max_action: unknown key (did you mean "max_actions"?)`) {
		t.Errorf("stderr does not name the key:\n%s", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}

// TestValidateSolveExamples runs `validate --solve --json` on every example
// with the real binary and the real Docker Engine.
func TestValidateSolveExamples(t *testing.T) {
	bin := validateBinary(t)
	configs, _ := filepath.Glob("examples/*/config.json")
	if len(configs) < 2 {
		t.Fatalf("found %d example configs", len(configs))
	}
	for _, cfg := range configs {
		t.Run(filepath.Base(filepath.Dir(cfg)), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(t.Context(), bin, "validate", "--solve", "--json", cfg)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			var report struct {
				Environments []struct {
					ID       string  `json:"id"`
					Solved   float64 `json:"solved_reward"`
					Unsolved float64 `json:"unsolved_reward"`
					Total    int     `json:"tests_total"`
				} `json:"environments"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
				t.Fatalf("%v\n%s", err, stdout.String())
			}
			for _, e := range report.Environments {
				if e.Solved != 1 || e.Unsolved >= 1 || e.Total < 5 {
					t.Errorf("%s: solved %v unsolved %v over %d tests", e.ID, e.Solved, e.Unsolved, e.Total)
				}
			}
		})
	}
}

// TestValidateChecksPlugins checks that validate loads the plugins the way
// rollout --dry-run does: a bad plugin setting fails it.
func TestValidateChecksPlugins(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"environments": [{"id": "x", "docker_image": "i", "unit_tests": ["t"], "prompt": "p"}],
		"plugins": [{"name": "safety_filter", "config": {"blocked_patterns": ["rm"]}}, "no_such_plugin"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"validate", bad}, &stdout, &stderr); code == 0 {
		t.Fatal("a config with bad plugins validated")
	}
	for _, want := range []string{`unknown field "blocked_patterns"`, "no_such_plugin"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestValidateOverlappingDestinations checks that validate, without
// --solve, refuses hidden tests that a copy_folders entry also fills.
func TestValidateOverlappingDestinations(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"starter/main.py":    "print('hi')\n",
		"tests/test_main.py": "def test_main(): pass\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"environments": [{"id": "x", "docker_image": "i", "unit_tests": ["t"], "prompt": "p",
		"copy_folders": [{"src": "starter", "dest": "/workspace/tests"}],
		"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"validate", cfg}, &stdout, &stderr); code == 0 {
		t.Fatal("a config with overlapping destinations validated")
	}
	want := `environments[0].hidden_tests[0].dest: "/workspace/tests" overlaps environments[0].copy_folders[0].dest`
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}
