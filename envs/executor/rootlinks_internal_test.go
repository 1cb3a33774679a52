package executor

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadRootLinks: the links of a root-owned directory that only root
// may write, with clean targets without "..", are kept; anything else is
// not, and a directory others may write gives none.
func TestReadRootLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the directory must be root's")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"bin": "usr/bin", "abs": "/usr/lib", "up": "../etc", "mid": "usr/../etc", "dot": ".", "slash": "/", "unclean": "usr//bin",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := readRootLinks(root)
	want := map[string]string{"bin": "/usr/bin", "abs": "/usr/lib"}
	if len(got) != len(want) || got["bin"] != want["bin"] || got["abs"] != want["abs"] {
		t.Fatalf("links %v, want %v", got, want)
	}
	for _, mode := range []os.FileMode{0o775, 0o757, 0o777} {
		if err := os.Chmod(root, mode); err != nil {
			t.Fatal(err)
		}
		if got := readRootLinks(root); got != nil {
			t.Errorf("mode %o: links %v, want none (others may replace them)", mode, got)
		}
	}
	if err := os.Chown(root, 1000, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := readRootLinks(root); got != nil {
		t.Errorf("owned by uid 1000: links %v, want none", got)
	}
}

// TestRootLinksResolve: only a path through a known link changes, the rest
// kept as written; drop and a touch of an entry of "/" end it.
func TestRootLinksResolve(t *testing.T) {
	var l rootLinks
	if got := l.resolve("/bin/sh"); got != "/bin/sh" {
		t.Fatalf("no links: %q", got)
	}
	l.use(map[string]string{"bin": "/usr/bin"})
	for in, want := range map[string]string{
		"/bin/sh": "/usr/bin/sh", "/bin/../etc/x": "/usr/bin/../etc/x", "/bin": "/bin", "/bin/": "/bin/",
		"/binx/sh": "/binx/sh", "bin/sh": "bin/sh", "/usr/bin/sh": "/usr/bin/sh", "/sbin/x": "/sbin/x",
	} {
		if got := l.resolve(in); got != want {
			t.Errorf("resolve(%q) = %q, want %q", in, got, want)
		}
	}
	l.touched("/tmp/x")
	l.touched("/bin/x")
	if got := l.resolve("/bin/sh"); got != "/usr/bin/sh" {
		t.Fatalf("after touching paths below entries of /: %q", got)
	}
	l.touched("/bin/")
	if got := l.resolve("/bin/sh"); got != "/bin/sh" {
		t.Fatalf("after touching /bin: %q, want the links dropped", got)
	}
	l.use(map[string]string{"bin": "/usr/bin"})
	l.drop()
	if got := l.resolve("/bin/sh"); got != "/bin/sh" {
		t.Fatalf("after drop: %q", got)
	}
}

// TestExecPath: an ELF file is started by the path the link leads to; a
// script, a FIFO, a directory or a missing file by the path as written.
func TestExecPath(t *testing.T) {
	dir := t.TempDir()
	elf, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog"), elf[:4096], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script"), []byte("#!/bin/sh\necho \"$0\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "short"), []byte("\x7fE"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	var l rootLinks
	l.use(map[string]string{"lnk": dir})
	for in, want := range map[string]string{
		"/lnk/prog": dir + "/prog", "/lnk/script": "/lnk/script", "/lnk/short": "/lnk/short",
		"/lnk/fifo": "/lnk/fifo", "/lnk/sub": "/lnk/sub", "/lnk/missing": "/lnk/missing", "/other/prog": "/other/prog",
	} {
		if got := l.execPath(in); got != want {
			t.Errorf("execPath(%q) = %q, want %q", in, got, want)
		}
	}
}
