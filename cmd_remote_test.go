package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/rollout"
)

// startServe starts `gymserver serve` on a free port, with more flags
// if given, and returns its WebSocket URL; the server is stopped with
// SIGTERM when the test ends and must exit 0.
func startServe(t *testing.T, bin, config string, flags ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--config", config, "--addr", "127.0.0.1:0"}, flags...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`^listening on (\S+)$`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve exited: %v", err)
			}
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("serve did not stop after SIGTERM")
		}
	})
	select {
	case a := <-addr:
		return "ws://" + a + "/v1/ws"
	case <-time.After(2 * time.Minute):
		t.Fatal("serve did not print its address")
		return ""
	}
}

// TestRolloutInProcessAndRemoteAgree runs the same scripted (oracle)
// rollout in process and through `--server` against a running
// `gymserver serve`, and compares rewards and trajectories.
func TestRolloutInProcessAndRemoteAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := validateBinary(t)
	url := startServe(t, bin, calculatorConfig)
	dir := t.TempDir()
	run := func(name string, extra ...string) string {
		out := filepath.Join(dir, name, "results.json")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		args := append([]string{"rollout", calculatorConfig, "--policy", "oracle", "--output", out, "--quiet"}, extra...)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "OPENROUTER_API_KEY=", "OPENAI_API_KEY=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		return out
	}
	local := run("local")
	remote := run("remote", "--server", url)

	var lrecs, rrecs []rollout.Record
	readFile(t, local, &lrecs)
	readFile(t, remote, &rrecs)
	if len(lrecs) != 1 || len(rrecs) != 1 {
		t.Fatalf("%d local and %d remote results, want 1 each", len(lrecs), len(rrecs))
	}
	var lt, rt gym.Trajectory
	readFile(t, filepath.Join(filepath.Dir(local), lrecs[0].TrajectoryFile), &lt)
	readFile(t, filepath.Join(filepath.Dir(remote), rrecs[0].TrajectoryFile), &rt)
	if lt.EpisodeResult.FinalScore != 1 || rt.EpisodeResult.FinalScore != lt.EpisodeResult.FinalScore ||
		rt.EpisodeResult.Success != lt.EpisodeResult.Success || rt.EpisodeResult.TerminatedReason != lt.EpisodeResult.TerminatedReason {
		t.Errorf("local result %+v, remote %+v", lt.EpisodeResult, rt.EpisodeResult)
	}
	if len(lt.Steps) < 2 || len(lt.Evaluation.Tests) < 10 {
		t.Fatalf("local trajectory has %d steps and %d tests; nothing to compare", len(lt.Steps), len(lt.Evaluation.Tests))
	}
	if diff := cmp.Diff(equivalent(t, lt), equivalent(t, rt)); diff != "" {
		t.Errorf("trajectories differ (-local +remote):\n%s", diff)
	}
}

// equivalent keeps what must match between two runs of the same script:
// the calls, their outcomes, the transcript's roles and tool call ids, and
// the per-test verdicts; not times, ids or durations.
func equivalent(t *testing.T, tr gym.Trajectory) any {
	t.Helper()
	type step struct {
		Name, Args       string
		ExitCode         int
		Success, Blocked bool
		Class            gym.ErrorClass
	}
	type msg struct {
		Role       string
		ToolCallID string
		Calls      int
	}
	var out struct {
		Steps    []step
		Messages []msg
		Tests    map[string]string
	}
	for _, s := range tr.Steps {
		var args any
		_ = json.Unmarshal([]byte(s.Action.ToolCall.Function.Arguments), &args)
		b, _ := json.Marshal(args)
		out.Steps = append(out.Steps, step{s.Action.ToolCall.Function.Name, string(b), s.Result.ExitCode, s.Result.Success, s.Result.Blocked, s.Result.ErrorClass})
	}
	for _, m := range tr.Messages {
		out.Messages = append(out.Messages, msg{string(m.Role), m.ToolCallID, len(m.ToolCalls)})
	}
	if tr.Evaluation == nil {
		t.Fatalf("trajectory %s has no evaluation", tr.TrajectoryID)
	}
	out.Tests = map[string]string{}
	for _, c := range tr.Evaluation.Tests {
		out.Tests[c.Name] = c.Status
	}
	return out
}

// TestRolloutOverTwoServers runs an oracle rollout through `--server`
// with two running servers: every episode succeeds and both servers
// serve some of them.
func TestRolloutOverTwoServers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := validateBinary(t)
	urls := []string{startServe(t, bin, calculatorConfig), startServe(t, bin, calculatorConfig)}
	out := filepath.Join(t.TempDir(), "results.json")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "rollout", calculatorConfig, "--policy", "oracle", "--output", out, "--quiet",
		"--episodes", "4", "--parallel", "4", "--server", urls[0]+","+urls[1])
	cmd.Env = append(os.Environ(), "OPENROUTER_API_KEY=", "OPENAI_API_KEY=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rollout: %v\n%s", err, b)
	}
	var recs []rollout.Record
	readFile(t, out, &recs)
	if len(recs) != 4 {
		t.Fatalf("%d results, want 4", len(recs))
	}
	for _, r := range recs {
		if r.EpisodeResult.FinalScore != 1 || !r.EpisodeResult.Success {
			t.Errorf("episode %d: result %+v, want a full score", r.Episode, r.EpisodeResult)
		}
	}
	total := 0
	for _, u := range urls {
		n := resetsServed(t, u)
		if n == 0 {
			t.Errorf("server %s served no reset; the rollout did not spread its sessions", u)
		}
		total += n
	}
	if total != 4 {
		t.Errorf("the servers served %d resets in all, want 4", total)
	}
}

// resetsServed reads the number of resets a server served from its
// /metrics, given its WebSocket URL.
func resetsServed(t *testing.T, wsURL string) int {
	t.Helper()
	u := strings.Replace(strings.TrimSuffix(wsURL, "/v1/ws"), "ws://", "http://", 1) + "/metrics"
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "gymserver_reset_seconds_count{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += v
	}
	return n
}
