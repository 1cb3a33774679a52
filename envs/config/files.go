package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// skipDirs are never copied into a sandbox: folders (or symlinks to
// folders) with these names are left out, on purpose and documented.
var skipDirs = map[string]bool{"__pycache__": true, ".git": true, ".pytest_cache": true}

// Bounds of one copy besides maxCopyBytes. Symlinks can make a small tree
// look deep or wide (two links to the same folder copy it twice), so the
// walk is bounded even where the loop check does not apply.
const (
	maxCopyDepth   = 64
	maxCopyEntries = 100_000
)

// Files reads the copy's source from the host and returns the files to
// place in the sandbox: one for a file, every regular file below it for a
// folder, following symlinks as CopySpec describes. Executable files keep
// mode 0755, others get 0644.
func (c CopySpec) Files() ([]sandbox.File, error) {
	var files []sandbox.File
	err := c.walk(func(host, dest string, info fs.FileInfo) error {
		data, err := os.ReadFile(host)
		if err != nil {
			return err
		}
		files = append(files, sandbox.File{Path: dest, Data: data, Mode: fileMode(info.Mode())})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}

// walk calls fn, in lexical order, for every regular file the copy places
// in the sandbox with its host path, its sandbox path and its FileInfo
// (the target's, for a symlink). It stops at the first error, which names
// the host path at fault. Load and Files both walk with it, so what loads
// is what gets copied.
func (c CopySpec) walk(fn func(host, dest string, info fs.FileInfo) error) error {
	info, err := followStat(c.Src)
	if err != nil {
		return err
	}
	w := walker{fn: fn}
	return w.visit(c.Src, c.Dest, info, nil)
}

type walker struct {
	fn      func(host, dest string, info fs.FileInfo) error
	bytes   int64
	entries int
}

// visit copies host, whose followed FileInfo is info, to dest. parents are
// the folders above it in this walk, for the loop check.
func (w *walker) visit(host, dest string, info fs.FileInfo, parents []fs.FileInfo) error {
	w.entries++
	if w.entries > maxCopyEntries {
		return fmt.Errorf("more than %d files and folders to copy", maxCopyEntries)
	}
	switch {
	case info.Mode().IsRegular():
		w.bytes += info.Size()
		if w.bytes > maxCopyBytes {
			return fmt.Errorf("more than %d MiB to copy", maxCopyBytes>>20)
		}
		return w.fn(host, dest, info)
	case info.IsDir():
		for _, p := range parents {
			if os.SameFile(p, info) {
				return fmt.Errorf("%s: symlink loop: it leads back to a folder above it", host)
			}
		}
		if len(parents) >= maxCopyDepth {
			return fmt.Errorf("%s: more than %d folders deep", host, maxCopyDepth)
		}
		entries, err := os.ReadDir(host)
		if err != nil {
			return err
		}
		parents = append(parents, info)
		for _, de := range entries {
			p := filepath.Join(host, de.Name())
			ci, err := followStat(p)
			if err != nil {
				return err
			}
			if ci.IsDir() && skipDirs[de.Name()] {
				continue
			}
			if err := w.visit(p, path.Join(dest, de.Name()), ci, parents); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("%s: %s: only regular files, folders and symlinks to them can be copied", host, fileKind(info.Mode()))
	}
}

// followStat is os.Stat, with the reason named when p is a symlink that
// cannot be followed.
func followStat(p string) (fs.FileInfo, error) {
	info, err := os.Stat(p)
	if err == nil {
		return info, nil
	}
	li, lerr := os.Lstat(p)
	if lerr != nil || li.Mode()&fs.ModeSymlink == 0 {
		return nil, err
	}
	target, _ := os.Readlink(p)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("%s: symlink loop (it points to %q)", p, target)
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: dangling symlink to %q", p, target)
	}
	return nil, fmt.Errorf("%s: symlink to %q: %w", p, target, err)
}

// fileKind names a file type that cannot be copied.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "a special file (" + m.Type().String() + ")"
}

func fileMode(m fs.FileMode) fs.FileMode {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}
