package config_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/config"
)

// benchTasks is the size of the generated datasets.
const benchTasks = 1000

// taskTexts returns the prompt (~200 bytes), starter file (~300 bytes),
// hidden test (~400 bytes) and reference (~100 bytes) of generated task i.
func taskTexts(i int) (prompt, starter, test, ref string) {
	name := fmt.Sprintf("f%04d", i)
	prompt = pad(fmt.Sprintf("Implement %s(x) in /workspace/mod.py: it returns x plus %d. Keep the name and use only the standard library. ", name, i), 200)
	starter = pad(fmt.Sprintf("def %s(x):\n    \"\"\"Return x plus %d.\"\"\"\n    raise NotImplementedError\n\n# ", name, i), 300) + "\n"
	test = pad(fmt.Sprintf("from mod import %s\n\ndef test_zero():\n    assert %s(0) == %d\n\ndef test_one():\n    assert %s(1) == %d\n\n# ", name, name, i, name, i+1), 400) + "\n"
	ref = fmt.Sprintf("def %s(x):\n    return x + %d\n", name, i)
	return prompt, starter, test, ref
}

// pad fills s with dots up to n bytes.
func pad(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat(".", n-len(s))
}

// writeJSONLDataset writes the tasks as one environment with a JSONL
// tasks_file and returns the config's path.
func writeJSONLDataset(tb testing.TB, dir string) string {
	tb.Helper()
	var lines []string
	for i := range benchTasks {
		prompt, starter, test, ref := taskTexts(i)
		line, err := json.Marshal(map[string]any{
			"id":                 fmt.Sprintf("t%04d", i),
			"prompt":             prompt,
			"files":              map[string]string{"mod.py": starter},
			"hidden_files":       map[string]string{"tests/test_mod.py": test},
			"reference_solution": map[string]any{"contents": map[string]string{"mod.py": ref}},
		})
		if err != nil {
			tb.Fatal(err)
		}
		lines = append(lines, string(line))
	}
	writeFile(tb, filepath.Join(dir, "tasks.jsonl"), strings.Join(lines, "\n")+"\n")
	return writeConfig(tb, dir, []map[string]any{{
		"id":           "dataset",
		"docker_image": "gymserver/python:3.11-bookworm",
		"unit_tests":   []string{"python3 -m pytest -q tests/"},
		"tasks_file":   "tasks.jsonl",
	}})
}

// writeSeedDataset writes the same tasks the seed's way: one environment
// per task, whose starter file, hidden test and reference are folders
// and files on disk. It returns the config's path.
func writeSeedDataset(tb testing.TB, dir string) string {
	tb.Helper()
	var envs []map[string]any
	for i := range benchTasks {
		prompt, starter, test, ref := taskTexts(i)
		id := fmt.Sprintf("t%04d", i)
		writeFile(tb, filepath.Join(dir, id, "starter", "mod.py"), starter)
		writeFile(tb, filepath.Join(dir, id, "tests", "test_mod.py"), test)
		writeFile(tb, filepath.Join(dir, id, "solution", "mod.py"), ref)
		envs = append(envs, map[string]any{
			"id":           id,
			"docker_image": "gymserver/python:3.11-bookworm",
			"unit_tests":   []string{"python3 -m pytest -q tests/"},
			"prompt":       prompt,
			"copy_folders": []map[string]string{{"src": id + "/starter", "dest": "/workspace"}},
			"hidden_tests": []map[string]string{{"src": id + "/tests", "dest": "/workspace/tests"}},
			"reference_solution": map[string]any{
				"files": []map[string]string{{"src": id + "/solution/mod.py", "dest": "/workspace/mod.py"}},
			},
		})
	}
	return writeConfig(tb, dir, envs)
}

func writeConfig(tb testing.TB, dir string, envs []map[string]any) string {
	tb.Helper()
	data, err := json.Marshal(map[string]any{"environments": envs})
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, "config.json")
	writeFile(tb, p, string(data))
	return p
}

func writeFile(tb testing.TB, p, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkLoadTasks measures config.Load of a 1,000-task dataset given as
// one environment with a JSONL tasks_file, beside the baseline: the same
// tasks as 1,000 seed-style environments with copy_folders, hidden_tests
// and reference files on disk. Besides time and allocations per Load it
// reports heap_MiB, the live heap a loaded config holds. The baseline's
// Load only checks the folders; their files are read at each task's first
// reset. Run: go test -run '^$' -bench LoadTasks -benchtime 20x ./envs/config/
func BenchmarkLoadTasks(b *testing.B) {
	for _, c := range []struct {
		name  string
		write func(testing.TB, string) string
	}{
		{"jsonl", writeJSONLDataset},
		{"baseline-envs", writeSeedDataset},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := c.write(b, b.TempDir())
			load := func() *config.Config {
				cfg, err := config.Load(path)
				if err != nil {
					b.Fatal(err)
				}
				if n := countTasks(cfg); n != benchTasks {
					b.Fatalf("loaded %d tasks, want %d", n, benchTasks)
				}
				return cfg
			}
			heap := heapMiB(load)
			b.ReportAllocs()
			for b.Loop() {
				load()
			}
			b.ReportMetric(heap, "heap_MiB")
		})
	}
}

// countTasks counts the tasks of every environment of cfg.
func countTasks(cfg *config.Config) int {
	n := 0
	for _, e := range cfg.Environments {
		n += len(e.Tasks)
	}
	return n
}

// heapMiB returns the growth of the live heap, in MiB, while the result
// of load is held.
func heapMiB(load func() *config.Config) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cfg := load()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(cfg)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
}
