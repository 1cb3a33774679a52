package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// TestPluginChangesEpisodeInDocker: a pre_episode answer's environment
// variables reach the real sandbox (over the environment's own), and its
// command timeout bounds the agent's commands there.
func TestPluginChangesEpisodeInDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	cfg, env := calculator(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	sum, err := run(t, ctx, runSpec{
		cfg:  cfg,
		envs: []gym.Env{env},
		policy: turnsPolicy(
			[]gym.ToolCall{execute("e", "echo mark=$SEED_MARK unbuffered=$PYTHONUNBUFFERED"), execute("s", "sleep 5; echo late")},
			[]gym.ToolCall{done("d")},
		),
		plugins: []config.Plugin{{Name: "modifier", Enabled: true, Timeout: 10 * time.Second, Hooks: []string{"pre_episode"},
			Command: []string{"/bin/sh", "-c", `cat >/dev/null; echo '{"episode": {"environment_variables": {"SEED_MARK": "42"}, "command_timeout": 1}}'`}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := trajectory(t, sum, "calculator_api", 0)
	if len(tr.Steps) != 3 {
		t.Fatalf("%d steps: %+v", len(tr.Steps), tr.Steps)
	}
	if out := tr.Steps[0].Result.Output; !strings.Contains(out, "mark=42 unbuffered=1") {
		t.Errorf("echo output = %q", out)
	}
	if r := tr.Steps[1].Result; r.ErrorClass != gym.ClassToolTimeout || strings.Contains(r.Output, "late") || r.Duration > gym.Duration(4*time.Second) {
		t.Errorf("sleep step = %+v", r)
	}
	if c := tr.EpisodeChanges; c == nil || c.EnvironmentVariables["SEED_MARK"] != "42" || c.CommandTimeout != gym.Duration(time.Second) {
		t.Errorf("episode changes = %+v", c)
	}
}
