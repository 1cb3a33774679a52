package envs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// harborTask writes a Harbor task directory: the agent must put "42" in
// answer.txt of its working directory; test.sh writes the reward and a
// reward.json with a second metric. extra adds lines to task.toml, files
// more files (relative to the task directory).
func harborTask(t *testing.T, root, id, extra string, files map[string]string) {
	t.Helper()
	all := map[string]string{
		"task.toml": `version = "1.0"
[metadata]
difficulty = "easy"
[verifier]
timeout_sec = 30.0
[environment]
docker_image = "` + baseimage.Python + `"
` + extra,
		"instruction.md": "Write 42 into answer.txt in your working directory.\n",
		"tests/test.sh": `#!/bin/bash
if [ "$(cat /workspace/answer.txt 2>/dev/null)" = "42" ]; then r=1; else r=0; fi
echo "{\"reward\": $r, \"checks\": 1, \"whoami\": $(id -u)}" > /logs/verifier/reward.json
`,
		"solution/solve.sh": "#!/bin/bash\necho 42 > /workspace/answer.txt\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for name, content := range all {
		p := filepath.Join(root, id, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// answerTasks writes, under dir/tasks, the Harbor task "answer" (see
// harborTask) and "answer-root", the same with its verifier run as root.
func answerTasks(t *testing.T, dir string) {
	t.Helper()
	harborTask(t, filepath.Join(dir, "tasks"), "answer", "", nil)
	harborTask(t, filepath.Join(dir, "tasks"), "answer-root", "", map[string]string{
		"task.toml": `version = "1.0"
[verifier]
user = "root"
[environment]
docker_image = "` + baseimage.Python + `"
`})
}

// harborEnv loads an environment over the Harbor tasks under dir.
func harborEnv(t *testing.T, dir string) (*envs.TaskEnv, config.Environment) {
	t.Helper()
	return harborEnvOn(t, dir, testProvider(t))
}

// harborEnvOn is harborEnv on the provider p.
func harborEnvOn(t *testing.T, dir string, p sandbox.Provider) (*envs.TaskEnv, config.Environment) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"environments": [{"id": "hb", "docker_image": "`+baseimage.Python+`", "tasks_dir": "tasks"}]}`), dir)
	if err != nil {
		t.Fatal(err)
	}
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	return e, cfg.Environments[0]
}

// markDone marks the episode done and returns its evaluation.
func markDone(t *testing.T, s gym.Session) *gym.Evaluation {
	t.Helper()
	r := step(t, s, call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	if r.Info.Evaluation == nil {
		t.Fatalf("no evaluation: %+v", r.Info)
	}
	return r.Info.Evaluation
}

func resetTask(t *testing.T, e *envs.TaskEnv, id string) gym.Session {
	t.Helper()
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{Task: id})
	if err != nil {
		t.Fatalf("reset %s: %v", id, err)
	}
	t.Cleanup(func() { _, _ = s.Close(t.Context()) })
	return s
}

func TestHarborTaskRewardAndMetrics(t *testing.T) {
	dir := t.TempDir()
	answerTasks(t, dir)
	e, ec := harborEnv(t, dir)
	tc, _ := ec.Task("answer")
	if tc.Prompt != "Write 42 into answer.txt in your working directory.\n" || tc.Timeouts.Test != 30*time.Second || tc.Network != "none" {
		t.Fatalf("task read from task.toml: prompt %q, test timeout %s, network %q", tc.Prompt, tc.Timeouts.Test, tc.Network)
	}

	// The reference (solution/solve.sh) scores 1; the tests were not in
	// the sandbox while the agent worked.
	s := resetTask(t, e, "answer")
	out := step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "ls /tests /logs/verifier 2>&1; id -u"})).Observation.Text
	if !strings.Contains(out, "No such file") || !strings.Contains(out, "1000") {
		t.Errorf("before evaluation the agent sees: %q", out)
	}
	calls, err := envs.ReferenceCalls(tc)
	if err != nil {
		t.Fatal(err)
	}
	var last gym.StepResult
	for _, c := range calls {
		last = step(t, s, c)
	}
	ev := last.Info.Evaluation
	if ev == nil || ev.Reward != 1 || !ev.Success || ev.ErrorClass != "" || ev.RewardKey != "reward.json:reward" ||
		ev.Metrics["checks"] != 1 || ev.Metrics["whoami"] != 1000 {
		t.Fatalf("reference evaluation %+v", ev)
	}

	// Doing nothing scores 0, unmasked.
	if ev := markDone(t, resetTask(t, e, "answer")); ev.Reward != 0 || ev.Mask || ev.ErrorClass != "" {
		t.Errorf("empty episode %+v", ev)
	}

	// [verifier] user = "root" runs test.sh as root.
	s = resetTask(t, e, "answer-root")
	step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "answer.txt", Content: "42\n"}))
	if ev := markDone(t, s); ev.Reward != 1 || ev.Metrics["whoami"] != 0 {
		t.Errorf("root verifier %+v", ev)
	}
}

// TestAttackHarborLeftoverWritesReward leaves a process that waits for
// /logs/verifier and writes a passing reward into it; the agent's
// processes die before the verifier runs, so the reward stays honest.
func TestAttackHarborLeftoverWritesReward(t *testing.T) {
	dir := t.TempDir()
	harborTask(t, filepath.Join(dir, "tasks"), "answer", "", nil)
	e, _ := harborEnv(t, dir)
	s := resetTask(t, e, "answer")
	step(t, s, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{
		Command: `nohup setsid sh -c 'while true; do echo "{\"reward\": 1}" > /logs/verifier/reward.json 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null; done' >/dev/null 2>&1 &
mkdir -p /logs/verifier 2>&1; echo planted`,
	}))
	ev := markDone(t, s)
	if ev.Reward != 0 || ev.Mask {
		t.Fatalf("a leftover process raised the reward: %+v", ev)
	}
}

// TestAttackHarborHangingCodeIsScored makes the code under test hang the
// verifier: the run is cut at the verifier timeout and scored 0,
// unmasked, so hanging does not hide a failure.
func TestAttackHarborHangingCodeIsScored(t *testing.T) {
	dir := t.TempDir()
	harborTask(t, filepath.Join(dir, "tasks"), "hang", "", map[string]string{
		"task.toml": `version = "1.0"
[verifier]
timeout_sec = 3.0
[environment]
docker_image = "` + baseimage.Python + `"
`,
		"tests/test.sh": "#!/bin/bash\nbash /workspace/check.sh && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
	})
	e, _ := harborEnv(t, dir)
	s := resetTask(t, e, "hang")
	step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "check.sh", Content: "sleep 1000\n"}))
	start := time.Now()
	ev := markDone(t, s)
	if ev.Reward != 0 || ev.Mask || ev.ErrorClass != gym.ClassVerifier || !strings.Contains(ev.Error, "did not finish") {
		t.Fatalf("hanging verifier: %+v", ev)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("evaluation took %s, want about the 3s verifier timeout", d)
	}
}

// TestHarborMissingRewardIsScored checks that a verifier that leaves no
// reward file (the agent's work broke it) is scored 0, not masked.
func TestHarborMissingRewardIsScored(t *testing.T) {
	dir := t.TempDir()
	harborTask(t, filepath.Join(dir, "tasks"), "noreward", "", map[string]string{
		"tests/test.sh": "#!/bin/bash\nset -e\nbash /workspace/check.sh\necho 1 > /logs/verifier/reward.txt\n",
	})
	e, _ := harborEnv(t, dir)
	ev := markDone(t, resetTask(t, e, "noreward"))
	if ev.Reward != 0 || ev.Mask || ev.ErrorClass != gym.ClassVerifier {
		t.Fatalf("missing reward: %+v", ev)
	}
}
