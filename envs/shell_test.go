package envs_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// TestPersistentShell runs calculator_api with persistent_shell on real
// Docker: cd and exported variables carry over between execute_command
// calls, the agent's uid runs the shell, a timed-out command is killed
// with its children while the shell and its state stay, a shell the agent
// ends is replaced, and the reference solution still scores 1 with the
// shell (and a background process started from it) alive at evaluation.
func TestPersistentShell(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "examples", "calculator_api", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ec := cfg.Environments[0]
	ec.PersistentShell = true
	e, err := envs.New(cfg, ec, envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := reset(t, e)
	run := func(args gym.ExecuteCommandArgs) (string, gym.CallInfo) {
		t.Helper()
		r := step(t, s, call(gym.ToolExecuteCommand, args))
		return r.Observation.Text, r.Info.Calls[0]
	}
	for _, c := range []struct {
		cmd  string
		want string
	}{
		{"id -u; pwd", "1000\n/workspace"},
		{"mkdir -p sub && cd sub && export GYM_X='a b' && alias ll='echo aliased'", ""},
		{`pwd; echo "$GYM_X"; sh -c 'echo child:$GYM_X'`, "/workspace/sub\na b\nchild:a b"},
	} {
		if out, ci := run(gym.ExecuteCommandArgs{Command: c.cmd}); ci.ExitCode != 0 || !strings.Contains(out, c.want) {
			t.Fatalf("%q: exit %d\n%s", c.cmd, ci.ExitCode, out)
		}
	}
	// A working_directory is changed to.
	if out, _ := run(gym.ExecuteCommandArgs{Command: "pwd", WorkingDirectory: "/tmp"}); !strings.Contains(out, "/tmp") {
		t.Errorf("working_directory: %s", out)
	}
	if out, ci := run(gym.ExecuteCommandArgs{Command: "cd /workspace/sub; echo oops >&2; false"}); ci.ExitCode != 1 || !strings.Contains(out, "Exit code: 1\nstderr:\noops") {
		t.Errorf("failing command: %+v\n%s", ci, out)
	}

	start := time.Now()
	out, ci := run(gym.ExecuteCommandArgs{Command: "(sleep 300; echo late) & sleep 301", Timeout: 1})
	if !strings.Contains(out, "Timed out") || !strings.Contains(ci.Error, "timed out") {
		t.Errorf("timeout: %+v\n%s", ci, out)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("the timed-out step took %s", el)
	}
	if out, _ := run(gym.ExecuteCommandArgs{Command: `pwd; echo "$GYM_X"; cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$' || true`}); !strings.Contains(out, "/workspace/sub\na b\n0") {
		t.Errorf("after the timeout, want the state kept and no sleep left:\n%s", out)
	}

	// The agent ends its shell: the next command gets a fresh one.
	if out, ci := run(gym.ExecuteCommandArgs{Command: "exit 4"}); ci.ExitCode != 4 {
		t.Errorf("exit 4: %+v\n%s", ci, out)
	}
	if out, _ := run(gym.ExecuteCommandArgs{Command: `pwd; echo "[$GYM_X]"`}); !strings.Contains(out, "/workspace\n[]") {
		t.Errorf("fresh shell:\n%s", out)
	}

	// Something left running from the shell, then the reference solution.
	if _, ci := run(gym.ExecuteCommandArgs{Command: "nohup sleep 1000 >/dev/null 2>&1 & cd /tmp"}); ci.ExitCode != 0 {
		t.Fatalf("background from the shell: %+v", ci)
	}
	calls, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	var last gym.StepResult
	for _, c := range calls {
		last = step(t, s, c)
	}
	if ev := last.Info.Evaluation; ev == nil || ev.Reward != 1 {
		t.Fatalf("evaluation with a persistent shell: %+v", ev)
	}
}
