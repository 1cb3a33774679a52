package config_test

import (
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/config"
)

// TestPersistentShell decodes persistent_shell: off unless set, and a
// boolean.
func TestPersistentShell(t *testing.T) {
	const env = `{"environments": [{"id": "e", "docker_image": "img", "prompt": "p", "unit_tests": ["true"]%s}]}`
	for _, tc := range []struct {
		extra string
		want  bool
	}{{"", false}, {`, "persistent_shell": true`, true}, {`, "persistent_shell": false`, false}} {
		cfg, err := config.Parse([]byte(strings.Replace(env, "%s", tc.extra, 1)), t.TempDir())
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		if got := cfg.Environments[0].PersistentShell; got != tc.want {
			t.Errorf("%q: persistent_shell %v, want %v", tc.extra, got, tc.want)
		}
	}
	_, err := config.Parse([]byte(strings.Replace(env, "%s", `, "persistent_shell": "yes"`, 1)), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "environments[0].persistent_shell") {
		t.Errorf("string persistent_shell: %v, want an error at its path", err)
	}
}
