package harbor_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/harbor"
	"github.com/gymserver/gymserver/internal/goldentest"
)

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ptr[T any](v T) *T { return &v }

func TestLoadFolder(t *testing.T) {
	tasks, err := harbor.Load("testdata/good")
	if err != nil {
		t.Fatal(err)
	}
	hello := abs(t, "testdata/good/hello-world")
	image := abs(t, "testdata/good/image-only")
	want := []harbor.Task{{
		ID:          "hello-world",
		Dir:         hello,
		Instruction: "Create /app/hello.txt containing \"Hello, world!\".\n",
		Config: harbor.Config{
			SchemaVersion: "1.0",
			Source:        "terminal-bench",
			Task: &harbor.PackageInfo{Name: "harbor/hello-world", Description: "Write hello.txt",
				Authors: []harbor.Author{{Name: "Ada", Email: "ada@example.com"}}, Keywords: []string{"files"}},
			Metadata: map[string]any{"difficulty": "easy", "category": "file-operations",
				"tags": []any{"trivial"}, "expert_time_estimate_min": 1.5,
				"extra": map[string]any{"nested": map[string]any{"deep": true}}},
			Verifier: harbor.VerifierConfig{TimeoutSec: 120, Env: map[string]string{"TEST_DIR": "/tests"}},
			Agent:    harbor.AgentConfig{TimeoutSec: ptr(300.0)},
			Environment: harbor.EnvironmentConfig{BuildTimeoutSec: 900, CPUs: 2, MemoryMB: 1024, StorageMB: 4096,
				AllowInternet: ptr(true), Env: map[string]string{"TOKEN": "${HOST_TOKEN:-none}"}},
			Solution: harbor.SolutionConfig{Env: map[string]string{"MODE": "oracle"}},
		},
		Dockerfile:  filepath.Join(hello, "environment/Dockerfile"),
		TestsDir:    filepath.Join(hello, "tests"),
		TestScript:  filepath.Join(hello, "tests/test.sh"),
		SolutionDir: filepath.Join(hello, "solution"),
		SolveScript: filepath.Join(hello, "solution/solve.sh"),
		Warnings:    []string{"task.toml: environment.memory: is deprecated; use memory_mb"},
	}, {
		ID:          "image-only",
		Dir:         image,
		Instruction: "Do the thing.\n",
		Config: harbor.Config{
			SchemaVersion: "1.1",
			Verifier:      harbor.VerifierConfig{TimeoutSec: 600, User: "0", NetworkMode: "public"},
			Agent:         harbor.AgentConfig{User: "root"},
			Environment: harbor.EnvironmentConfig{BuildTimeoutSec: 600, DockerImage: "gymserver/python:3.11-bookworm",
				CPUs: 1, MemoryMB: 2048, StorageMB: 10240, GPUs: 1,
				NetworkMode: "allowlist", AllowedHosts: []string{"pypi.org"},
				MCPServers: []harbor.MCPServer{{Name: "fs", Transport: "stdio", Command: "mcp-fs"}},
				SkillsDir:  "/skills", Healthcheck: &harbor.Healthcheck{Command: "true"}},
		},
		Image:      "gymserver/python:3.11-bookworm",
		TestsDir:   filepath.Join(image, "tests"),
		TestScript: filepath.Join(image, "tests/test.sh"),
		Warnings: []string{
			"task.toml: environment.gpus: GPUs are not supported; the sandbox has none",
			"task.toml: environment.network_mode: allowlist networking is not supported; the sandbox gets no network",
			"task.toml: verifier.network_mode: per-phase network policies are not supported; the environment's network applies throughout",
			"task.toml: agent.user: not honoured: the agent runs as the sandbox's non-root user",
			"task.toml: verifier.user: not honoured: the tests run as the sandbox's non-root user",
			"task.toml: environment.mcp_servers: MCP servers are not supported; ignored",
			"task.toml: environment.skills_dir: skills are not supported; ignored",
			"task.toml: environment.healthcheck: health checks are not supported; the agent starts at once",
			"solution has no solve.sh; the task has no reference solution",
		},
	}}
	if diff := cmp.Diff(want, tasks); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
}

func TestLoadOneTask(t *testing.T) {
	tasks, err := harbor.Load("testdata/good/hello-world")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].ID != "hello-world" || tasks[0].Dir != abs(t, "testdata/good/hello-world") {
		t.Fatalf("got %d tasks: %+v", len(tasks), tasks)
	}
}

// TestLoadErrors checks the errors of broken tasks against golden files;
// paths are shown relative to the package.
func TestLoadErrors(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/bad/*")
	dirs = append(dirs, "testdata/mixed", "testdata/nonexistent", "testdata/good/hello-world/task.toml")
	if len(dirs) < 10 {
		t.Fatalf("found %d bad cases", len(dirs))
	}
	root := abs(t, ".") + string(filepath.Separator)
	for _, dir := range dirs {
		name := strings.ReplaceAll(strings.TrimPrefix(dir, "testdata/"), "/", "_")
		t.Run(name, func(t *testing.T) {
			tasks, err := harbor.Load(dir)
			if err == nil {
				t.Fatalf("loaded %d tasks, want an error", len(tasks))
			}
			got := strings.ReplaceAll(err.Error(), root, "") + "\n"
			goldentest.Check(t, filepath.Join("testdata/errors", name+".golden"), []byte(got))
		})
	}
}

func TestConfigHelpers(t *testing.T) {
	parse := func(t *testing.T, s string) harbor.Config {
		t.Helper()
		c, _, err := harbor.ParseConfig([]byte(s), "task.toml")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	type result struct {
		Network                   string
		Memory, Disk              int64
		CPUs                      float64
		Agent, Verifier, Building time.Duration
	}
	defaults := result{"none", 2048 << 20, 10240 << 20, 1, 0, 600 * time.Second, 600 * time.Second}
	for _, tc := range []struct {
		name, toml string
		want       result
	}{
		{"defaults", ``, defaults},
		{"allow_internet_false", "[environment]\nallow_internet = false\n", defaults},
		{"allow_internet_true", "[environment]\nallow_internet = true\n",
			result{"bridge", 2048 << 20, 10240 << 20, 1, 0, 600 * time.Second, 600 * time.Second}},
		{"mode_public", "[environment]\nnetwork_mode = \"public\"\nallow_internet = false\n",
			result{"bridge", 2048 << 20, 10240 << 20, 1, 0, 600 * time.Second, 600 * time.Second}},
		{"mode_none_wins", "[environment]\nnetwork_mode = \"no-network\"\nallow_internet = true\n", defaults},
		{"allowlist", "[environment]\nallow_internet = true\nallowed_hosts = [\"pypi.org\"]\n", defaults},
		{"sizes", "[environment]\ncpus = 4\nmemory_mb = 512\nstorage = \"1.5G\"\n",
			result{"none", 512 << 20, 1536 << 20, 4, 0, 600 * time.Second, 600 * time.Second}},
		{"old_memory_wins", "[environment]\nmemory_mb = 512\nmemory = \"2048K\"\n",
			result{"none", 2 << 20, 10240 << 20, 1, 0, 600 * time.Second, 600 * time.Second}},
		{"timeouts", "[agent]\ntimeout_sec = 1.5\n[verifier]\ntimeout_sec = 30\n[environment]\nbuild_timeout_sec = 1200\n",
			result{"none", 2048 << 20, 10240 << 20, 1, 1500 * time.Millisecond, 30 * time.Second, 20 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, tc.toml)
			got := result{c.Network(), c.MemoryBytes(), c.DiskBytes(), c.CPUs(), c.AgentTimeout(), c.VerifierTimeout(), c.BuildTimeout()}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// A zero Config, made without ParseConfig, has the same defaults.
	var zero harbor.Config
	got := result{zero.Network(), zero.MemoryBytes(), zero.DiskBytes(), zero.CPUs(), zero.AgentTimeout(), zero.VerifierTimeout(), zero.BuildTimeout()}
	if got != defaults {
		t.Errorf("zero config: got %+v, want %+v", got, defaults)
	}
}

func TestParseConfigVersionRename(t *testing.T) {
	for _, tc := range []struct{ toml, want string }{
		{``, "1.1"},
		{`version = "1.0"`, "1.0"},
		{`schema_version = "1.2"`, "1.2"},
		{"schema_version = \"1.2\"\nversion = \"1.0\"", "1.2"},
	} {
		c, _, err := harbor.ParseConfig([]byte(tc.toml), "task.toml")
		if err != nil {
			t.Fatal(err)
		}
		if c.SchemaVersion != tc.want || c.Version != "" {
			t.Errorf("%q: schema_version %q version %q, want %q", tc.toml, c.SchemaVersion, c.Version, tc.want)
		}
	}
}
