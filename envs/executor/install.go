package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// install puts files in place with the executor's own rights: whatever is
// at each path goes, missing parent directories are made (mode 0755), and
// each file is written new with mode 0644 (0755 when asked for an
// executable), so that inside a sandbox all of
// it belongs to root and the agent can read it but not change it. Every
// directory above a file that belongs to the agent gets the sticky bit:
// the agent could otherwise rename a root-owned directory out of its way
// (it may rename entries of a directory it owns) and put its own in place.
func (s *server) install(files []installFile) error {
	for _, f := range files {
		p := filepath.Clean(f.Path)
		if !filepath.IsAbs(p) || p == "/" {
			return &kindError{kindInvalid, fmt.Sprintf("install %q: want an absolute file path", f.Path)}
		}
		s.noteRemove(p)
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("install %s: %w", p, err)
		}
		s.noteInstall(p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("install %s: %w", p, err)
		}
		mode := os.FileMode(0o644)
		if f.Mode&0o111 != 0 {
			mode = 0o755
		}
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("install %s: %w", p, err)
		}
		_, werr := fh.Write(f.Data)
		if err := fh.Close(); werr != nil || err != nil {
			return fmt.Errorf("install %s: write: %v %v", p, werr, err)
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("install %s: %w", p, err)
		}
		if s.opts.Agent != nil {
			if err := s.sealParents(p); err != nil {
				return fmt.Errorf("install %s: %w", p, err)
			}
		}
	}
	return nil
}

// sealParents sets the sticky bit on every directory above p that the agent
// owns.
func (s *server) sealParents(p string) error {
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == s.opts.Agent.UID && fi.Mode()&os.ModeSticky == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|os.ModeSticky); err != nil {
				return err
			}
		}
		if d == "/" {
			return nil
		}
	}
}

// makeDir makes the absolute directory p, and the missing ones above it
// (0755, root's), mode 0755, owned by the agent when forAgent (and the
// executor acts for one), else by root; what it makes outside the
// agent's places is recorded for a recycle to remove. Changing a
// directory that was there before, outside those places and not made by
// an install or a makeDir, taints the sandbox.
func (s *server) makeDir(p string, forAgent bool) error {
	p = filepath.Clean(p)
	if !filepath.IsAbs(p) || p == "/" {
		return &kindError{kindInvalid, fmt.Sprintf("mkdir %q: want an absolute directory path", p)}
	}
	if s.outsidePlaces(p) && !s.ours(p) {
		if _, err := os.Lstat(p); err == nil {
			s.taint("%s, outside the agent's places, was changed", p)
		}
	}
	s.noteMade(p)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", p, err)
	}
	uid, gid := 0, 0
	if a := s.opts.Agent; a != nil && forAgent {
		uid, gid = a.UID, a.GID
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		return fmt.Errorf("mkdir %s: %w", p, err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", p, err)
	}
	return nil
}
