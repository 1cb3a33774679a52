package main

import (
	"bytes"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/openaitest"
	"github.com/gymserver/gymserver/policy/rollout"
)

// viewScript is an agent that echoes a <script> tag, then writes out.txt
// (rightly in even episodes, wrongly in odd ones), then calls mark_done;
// with one episode at a time, half the episodes succeed.
func viewScript() openaitest.Script {
	var episodes atomic.Int32
	return func(_ int, req openaitest.ChatRequest) openaitest.Reply {
		turns := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				turns++
			}
		}
		switch turns {
		case 0:
			episodes.Add(1)
			return openaitest.Calls(openaitest.Call("c0", "execute_command", `{"command": "echo '<script>alert(1)</script>'"}`))
		case 1:
			content := "hello"
			if episodes.Load()%2 == 0 {
				content = "wrong"
			}
			return openaitest.Calls(openaitest.Call("c1", "write_file", `{"filepath": "out.txt", "content": "`+content+`"}`))
		}
		return openaitest.Calls(openaitest.Call("c2", "mark_done", `{"message": "done"}`))
	}
}

// viewRollout runs a real in-process rollout of 4 episodes against the
// in-memory environment and returns the results file's path.
func viewRollout(t *testing.T) string {
	t.Helper()
	noDockerNoKeys(t)
	srv := openaitest.New(t, viewScript())
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{
		"environments": [{"id": "echo", "docker_image": "unused", "prompt": "p", "unit_tests": ["true"]}],
		"llm_config": {"model": "test-model", "base_url": "`+srv.URL+`", "api_key": "k"},
		"rollout_config": {"max_parallel_rollouts": 1},
		"episode_control_config": {"max_episodes": 4}
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run", "results.json")
	if code, _, stderr := runCmd(t, memLoader(t), cfg, "--output", out, "--quiet"); code != 0 {
		t.Fatalf("rollout: exit %d, stderr:\n%s", code, stderr)
	}
	return out
}

// viewCmd runs `gymserver view args` in process.
func viewCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), append([]string{"view"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestViewRollout runs a real rollout, then view on its results, and checks
// the report against the results, stats and trajectory files.
func TestViewRollout(t *testing.T) {
	results := viewRollout(t)
	code, stdout, stderr := viewCmd(t, results)
	if code != 0 {
		t.Fatalf("view: exit %d, stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout is not empty: %q", stdout)
	}
	report := strings.TrimSuffix(results, ".json") + ".html"
	if !strings.Contains(stderr, report) {
		t.Errorf("stderr does not name the report %s:\n%s", report, stderr)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)

	var recs []rollout.Record
	readFile(t, results, &recs)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	var stats rollout.Stats
	readFile(t, rollout.StatsPath(results), &stats)
	if stats.Overall.Successes != 2 || stats.Overall.SuccessRate != 0.5 {
		t.Fatalf("the agent's script did not give 2 successes of 4: %+v", stats.Overall)
	}
	for _, r := range recs {
		if !strings.Contains(page, r.TrajectoryID) {
			t.Errorf("the report does not name episode %s", r.TrajectoryID)
		}
	}
	var traj gym.Trajectory
	readFile(t, filepath.Join(filepath.Dir(results), recs[0].TrajectoryFile), &traj)
	if traj.Evaluation == nil || len(traj.Evaluation.Tests) == 0 {
		t.Fatalf("trajectory has no tests: %+v", traj.Evaluation)
	}
	for _, want := range []string{
		`<tr><th>overall</th><td>4</td><td>4</td><td>2</td><td>50.0%</td><td>0.500</td>`,
		`<tr><th>echo</th><td>4</td>`,
		`<td>echo/echo</td><td>4</td><td>4</td><td>2</td><td>50.0%</td>`,
		`data-reward="1" data-reason="completed" data-mask="false" data-task="echo/echo"`,
		`data-reward="0" data-reason="completed" data-mask="false" data-task="echo/echo"`,
		`<option>completed</option>`,
		html.EscapeString(traj.Evaluation.Tests[0].Name),
		`<td class="ok">passed</td>`,
		`<td class="bad">failed</td>`,
		`call <code>write_file</code>`,
		`exit code 0`,
		`<span class="role">system</span>`,
		`<span class="role">user</span>`,
		`<span class="role">assistant</span>`,
		`<span class="role">tool</span>`,
		// The tool's output and the call's arguments, escaped.
		"stdout:\n&lt;script&gt;alert(1)&lt;/script&gt;</pre>",
		`&#34;command&#34;: &#34;echo &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;&#34;`,
		`<div id="reward-histogram"><svg`,
		`<div id="task-success"><svg`,
		`<title>reward 0.90–1.00: 2 episodes</title>`,
		`<title>reward 0.00–0.10: 2 episodes</title>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>alert") {
		t.Error("the report has the agent's <script> unescaped")
	}
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("%d script elements, want 1 (the page's filter)", n)
	}
	for _, bad := range []string{"http://", "https://"} {
		for _, line := range strings.Split(page, "\n") {
			if strings.Contains(line, bad) && !strings.Contains(line, "http://www.w3.org/2000/svg") {
				t.Errorf("the report refers to the network: %s", line)
			}
		}
	}
	if strings.Contains(page, "No trajectory") {
		t.Error("an episode's trajectory was not found")
	}
}

// TestViewOutputs checks -o (a file, and - for stdout), a trajectory file
// as input, and that a missing stats file or trajectory is shown, not an
// error.
func TestViewOutputs(t *testing.T) {
	results := viewRollout(t)
	var recs []rollout.Record
	readFile(t, results, &recs)

	t.Run("stdout", func(t *testing.T) {
		code, stdout, stderr := viewCmd(t, results, "-o", "-")
		if code != 0 || !strings.HasPrefix(strings.TrimSpace(stdout), "<!DOCTYPE html>") || stderr != "" {
			t.Errorf("exit %d, stderr %q, stdout starts %.80q", code, stderr, stdout)
		}
	})
	t.Run("file", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "r.html")
		if code, _, stderr := viewCmd(t, "-o", out, results); code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
		if b, err := os.ReadFile(out); err != nil || !bytes.Contains(b, []byte(recs[1].TrajectoryID)) {
			t.Errorf("report %s: %v", out, err)
		}
	})
	t.Run("trajectory", func(t *testing.T) {
		traj := filepath.Join(filepath.Dir(results), recs[0].TrajectoryFile)
		code, stdout, stderr := viewCmd(t, traj, "-o", "-")
		if code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
		if !strings.Contains(stdout, recs[0].TrajectoryID) || strings.Contains(stdout, recs[1].TrajectoryID) ||
			!strings.Contains(stdout, "&lt;script&gt;") || !strings.Contains(stdout, "No stats file") {
			t.Errorf("report of one trajectory is wrong:\n%s", stdout)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if err := os.Remove(rollout.StatsPath(results)); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(filepath.Dir(results), recs[2].TrajectoryFile)); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := viewCmd(t, results, "-o", "-")
		if code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
		if !strings.Contains(stderr, "warning: episode "+recs[2].TrajectoryID) {
			t.Errorf("no warning for the missing trajectory:\n%s", stderr)
		}
		for _, want := range []string{"No stats file", "No trajectory", `<tr><th>overall</th><td>4</td><td>4</td><td>2</td><td>50.0%</td>`} {
			if !strings.Contains(stdout, want) {
				t.Errorf("the report lacks %q", want)
			}
		}
	})
}

// TestViewCompare runs two real rollouts of the same task and checks the
// comparison page of `gymserver view A B`: both runs' stats and the task
// with its difference (view's TestCompare covers tasks in one run only and
// differences of either sign).
func TestViewCompare(t *testing.T) {
	a := viewRollout(t)
	b := viewRollout(t)
	var sa, sb rollout.Stats
	readFile(t, rollout.StatsPath(a), &sa)
	readFile(t, rollout.StatsPath(b), &sb)
	code, _, stderr := viewCmd(t, a, b)
	if code != 0 {
		t.Fatalf("view A B: exit %d, stderr:\n%s", code, stderr)
	}
	out := strings.TrimSuffix(a, ".json") + ".compare.html"
	if !strings.Contains(stderr, "comparison: "+out+" (4 and 4 episodes)") {
		t.Errorf("stderr does not name the comparison %s:\n%s", out, stderr)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := sa.Tasks["echo/echo"], sb.Tasks["echo/echo"]
	if ta.Episodes != 4 || tb.Episodes != 4 {
		t.Fatalf("stats: A %+v, B %+v", ta, tb)
	}
	delta := tb.MeanReward - ta.MeanReward
	sign := ""
	if delta > 0 {
		sign = "+"
	}
	for _, want := range []string{
		fmt.Sprintf("<tr><th>A</th><td>%d</td><td>%d</td><td>%d</td>", sa.Overall.Episodes, sa.Overall.Scored, sa.Overall.Successes),
		fmt.Sprintf("<tr><th>B</th><td>%d</td><td>%d</td><td>%d</td>", sb.Overall.Episodes, sb.Overall.Scored, sb.Overall.Successes),
		"<tr><td>echo/echo</td>",
		fmt.Sprintf("<td>4</td><td>%.1f%%</td><td>%.3f</td>", 100*ta.SuccessRate, ta.MeanReward),
		fmt.Sprintf(">%s%.3f</td></tr>", sign, delta),
		"1 of 1 tasks are in both runs.",
		`id="reward-histogram-a"><svg`, `id="reward-histogram-b"><svg`,
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the comparison lacks %q", want)
		}
	}
}

// TestViewErrors checks usage errors (exit 2), -h (exit 0) and bad input
// (exit 1, a clear message, no usage).
func TestViewErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"-h"}, 0, ""},
		{"no_args", nil, 2, "usage: gymserver view"},
		{"three_args", []string{"a.json", "b.json", "c.json"}, 2, "usage: gymserver view"},
		{"second_missing", []string{write("r0.json", `[]`), filepath.Join(dir, "nope.json")}, 1, "no such file or directory"},
		{"bad_flag", []string{"--bogus", "a.json"}, 2, "not defined: -bogus"},
		{"missing_file", []string{filepath.Join(dir, "nope.json")}, 1, "no such file or directory"},
		{"config_file", []string{write("config.json", `{"environments": []}`)}, 1, "not a rollout results file"},
		{"not_json", []string{write("notes.txt", "hello")}, 1, "not a rollout results file"},
		{"array_of_numbers", []string{write("nums.json", "[1, 2]")}, 1, "not a rollout results file"},
		{"array_of_other", []string{write("other.json", `[{"id": "x"}]`)}, 1, "record 0 has no trajectory_id"},
		{"bad_stats", []string{write("r.json", `[]`)}, 1, "stats "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "bad_stats" {
				write("r.stats.json", "{")
			}
			code, stdout, stderr := viewCmd(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			switch {
			case tc.code == 0:
				if !strings.Contains(stdout, "usage: gymserver view") || stderr != "" {
					t.Errorf("-h: stdout %q, stderr %q", stdout, stderr)
				}
			case !strings.Contains(stderr, tc.want):
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
			case tc.code == 1 && strings.Contains(stderr, "usage:"):
				t.Errorf("a runtime error reprints the usage:\n%s", stderr)
			}
			if tc.code != 0 && stdout != "" {
				t.Errorf("stdout is not empty: %q", stdout)
			}
		})
	}
}
