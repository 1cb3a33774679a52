package executor

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCloseRootGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the directories must be root's or another user's")
	}
	agent := &Cred{UID: 1000, GID: 1000}
	for _, c := range []struct {
		name     string
		mode     uint32
		uid, gid int
		file     bool
		noAgent  bool
		want     uint32 // the mode afterwards
		changed  bool
	}{
		{name: "755 root:root", mode: 0o755, want: 0o705, changed: true},
		{name: "1777 root:root keeps sticky", mode: 0o1777, want: 0o1707, changed: true},
		{name: "751: group differs from other", mode: 0o751, want: 0o751},
		{name: "700: no group bits", mode: 0o700, want: 0o700},
		{name: "not root's", mode: 0o755, uid: 1000, want: 0o755},
		{name: "the agent's group", mode: 0o755, gid: 1000, want: 0o755},
		{name: "another group", mode: 0o755, gid: 2000, want: 0o705, changed: true},
		{name: "no agent", mode: 0o755, noAgent: true, want: 0o755},
		{name: "a file", mode: 0o755, file: true, want: 0o755},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "root")
			if c.file {
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, c.uid, c.gid); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Chmod(dir, c.mode); err != nil {
				t.Fatal(err)
			}
			a := agent
			if c.noAgent {
				a = nil
			}
			changed, err := closeRootGroup(dir, a)
			if err != nil {
				t.Fatal(err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(dir, &st); err != nil {
				t.Fatal(err)
			}
			if got := st.Mode & 0o7777; got != c.want || changed != c.changed {
				t.Errorf("mode %o changed %v, want %o changed %v", got, changed, c.want, c.changed)
			}
			if int(st.Uid) != c.uid || int(st.Gid) != c.gid {
				t.Errorf("owner %d:%d changed, want %d:%d", st.Uid, st.Gid, c.uid, c.gid)
			}
		})
	}
	if _, err := closeRootGroup(filepath.Join(t.TempDir(), "missing"), agent); err == nil {
		t.Error("a missing directory gave no error")
	}
}
