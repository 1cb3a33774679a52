package docker_test

import (
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// TestRootGroupClosed checks the mode of a sandbox's "/": by default the
// executor has cleared its group bits (705, root's), and nothing the
// agent or the machinery does needs them: the agent is in no group but
// its own, lists and reads through "/", runs programs and Python, and
// cannot put the bits back; with KeepRootMode "/" is as the image has it.
func TestRootGroupClosed(t *testing.T) {
	p, _ := newProvider(t)
	sb := baseSandbox(t, p, sandbox.Spec{ShareUsr: true})
	if code, out := run(t, sb, false, "stat -c '%a %U %G' /"); code != 0 || strings.TrimSpace(out) != "705 root root" {
		t.Errorf("/ is %q (exit %d), want 705 root root", out, code)
	}
	if code, out := run(t, sb, false, "id -G"); code != 0 || strings.TrimSpace(out) != "1000" {
		t.Errorf("the agent's groups are %q (exit %d), want its own alone", out, code)
	}
	for _, tc := range []struct {
		priv bool
		cmd  string
	}{
		{false, "ls / | grep -qx usr"},
		{false, "cat /etc/hostname /etc/passwd >/dev/null"},
		{false, "cd /workspace && echo x > f && cat /workspace/f && rm f"},
		{false, "/usr/bin/env true && python3 -c 'import json, http.server'"},
		{false, "python3 -m pytest --version"},
		{true, "ls / | grep -qx usr && cat /etc/shadow >/dev/null"},
	} {
		if code, out := run(t, sb, tc.priv, tc.cmd); code != 0 {
			t.Errorf("root %v: %q failed (exit %d): %s", tc.priv, tc.cmd, code, out)
		}
	}
	if code, out := run(t, sb, false, "chmod 755 /"); code == 0 {
		t.Errorf("the agent put the group bits of / back: %s", out)
	}

	kept, _ := dockertest.NewWith(t, docker.Options{KeepRootMode: true})
	sb = baseSandbox(t, kept, sandbox.Spec{ShareUsr: true})
	if code, out := run(t, sb, false, "stat -c '%a %U %G' /"); code != 0 || strings.TrimSpace(out) != "755 root root" {
		t.Errorf("with KeepRootMode / is %q (exit %d), want 755 root root", out, code)
	}
}
