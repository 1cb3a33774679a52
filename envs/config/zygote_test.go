package config_test

import (
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/config"
)

// TestVerifierZygote decodes verifier_zygote: on unless set to false, and
// a boolean.
func TestVerifierZygote(t *testing.T) {
	const env = `{"environments": [{"id": "e", "docker_image": "img", "prompt": "p", "unit_tests": ["true"]%s}]}`
	for _, tc := range []struct {
		extra string
		want  bool
	}{{"", true}, {`, "verifier_zygote": null`, true}, {`, "verifier_zygote": true`, true}, {`, "verifier_zygote": false`, false}} {
		cfg, err := config.Parse([]byte(strings.Replace(env, "%s", tc.extra, 1)), t.TempDir())
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		if got := cfg.Environments[0].ZygoteOn(); got != tc.want {
			t.Errorf("%q: zygote on %v, want %v", tc.extra, got, tc.want)
		}
	}
	_, err := config.Parse([]byte(strings.Replace(env, "%s", `, "verifier_zygote": "no"`, 1)), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "environments[0].verifier_zygote") {
		t.Errorf("string verifier_zygote: %v, want an error at its path", err)
	}
}

// TestSharedUsr decodes shared_usr: on unless set to false, and a
// boolean.
func TestSharedUsr(t *testing.T) {
	const env = `{"environments": [{"id": "e", "docker_image": "img", "prompt": "p", "unit_tests": ["true"]%s}]}`
	for _, tc := range []struct {
		extra string
		want  bool
	}{{"", true}, {`, "shared_usr": true`, true}, {`, "shared_usr": false`, false}} {
		cfg, err := config.Parse([]byte(strings.Replace(env, "%s", tc.extra, 1)), t.TempDir())
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		if got := cfg.Environments[0].SharedUsrOn(); got != tc.want {
			t.Errorf("%q: shared /usr %v, want %v", tc.extra, got, tc.want)
		}
	}
	_, err := config.Parse([]byte(strings.Replace(env, "%s", `, "shared_usr": 1`, 1)), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "environments[0].shared_usr") {
		t.Errorf("number shared_usr: %v, want an error at its path", err)
	}
}
