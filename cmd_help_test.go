package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpExitsZero checks that every command's -h prints its usage on
// stdout and exits 0, and that a bad flag still exits 2 with the usage on
// stderr.
func TestHelpExitsZero(t *testing.T) {
	noDockerNoKeys(t)
	cmds := [][]string{
		{"rollout"}, {"serve"}, {"validate"}, {"image", "build"}, {"image", "ls"},
		{"image", "prune"}, {"reap"}, {"image"}, {"view"}, {"bench"}, {},
	}
	for _, cmd := range cmds {
		for _, h := range []string{"-h", "--help", "-help"} {
			args := append(append([]string(nil), cmd...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				var out, errb bytes.Buffer
				if code := run(t.Context(), args, &out, &errb); code != 0 {
					t.Errorf("exit %d, want 0; stderr:\n%s", code, errb.String())
				}
				if !strings.Contains(out.String(), "usage") && !strings.Contains(out.String(), "Commands:") {
					t.Errorf("stdout has no usage:\n%s", out.String())
				}
				if errb.Len() != 0 {
					t.Errorf("stderr is not empty:\n%s", errb.String())
				}
			})
		}
	}
	// -h after the config, as with the seed's main.py.
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"rollout", calculatorConfig, "-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "--llm-enable-caching") && !strings.Contains(out.String(), "-llm-enable-caching") {
		t.Errorf("rollout CONFIG -h: exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, cmd := range [][]string{{"rollout", "--bogus"}, {"serve", "--bogus"}, {"reap", "--bogus"}, {"bench", "--bogus"}} {
		var out, errb bytes.Buffer
		code := run(t.Context(), cmd, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "not defined: -bogus") || !strings.Contains(errb.String(), "usage: gymserver") || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s", cmd, code, out.String(), errb.String())
		}
	}
}

// TestLogLevels checks that the seed's Python level names are accepted.
func TestLogLevels(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"DEBUG", true}, {"INFO", true}, {"WARN", true}, {"WARNING", true}, {"warning", true},
		{"ERROR", true}, {"CRITICAL", true}, {"WARN+2", true}, {"LOUD", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l, err := newLogger(&buf, tt.name)
			if (err == nil) != tt.ok {
				t.Fatalf("newLogger(%q): %v", tt.name, err)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "WARNING") {
					t.Errorf("error does not name the levels: %v", err)
				}
				return
			}
			if tt.name == "WARNING" {
				l.Info("hidden")
				l.Warn("shown")
				if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "shown") {
					t.Errorf("WARNING logs:\n%s", s)
				}
			}
		})
	}
	var out, errb bytes.Buffer
	if code := rolloutWith(t.Context(), []string{calculatorConfig, "--dry-run", "--log-level", "WARNING"}, &out, &errb, noLoader(t)); code != 0 {
		t.Errorf("rollout --log-level WARNING: exit %d; stderr:\n%s", code, errb.String())
	}
}
