package docker

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestReapSocketDirs checks that a provider's start removes the socket
// directories of a process that is gone, and leaves those of live
// processes (its own, and init's) and names not of this form alone.
func TestReapSocketDirs(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	name := func(pid int, rest string) string {
		return filepath.Join(dir, socketDirPrefix+strconv.Itoa(pid)+"-"+rest)
	}
	dead := name(gone.Process.Pid, "a")
	kept := []string{name(os.Getpid(), "b"), name(1, "c"), filepath.Join(dir, socketDirPrefix+"x-d"), filepath.Join(dir, "other")}
	for _, d := range append([]string{dead}, kept...) {
		if err := os.MkdirAll(filepath.Join(d, "sandbox"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	reapSocketDirs(dir, slog.New(slog.DiscardHandler))
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the directory of a process that is gone: %v, want it removed", err)
	}
	for _, d := range kept {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v, want it kept", d, err)
		}
	}
}
