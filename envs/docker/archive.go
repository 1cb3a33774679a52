package docker

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

var _ sandbox.Archiver = (*Sandbox)(nil)

// maxArchive is the largest archive: one executor frame, less room for
// the frame's other fields.
const maxArchive = executor.MaxFrame - 1<<20

// Archive takes the files and directories the agent can write as a tar
// archive, which the executor keeps until Capture.Fetch moves it out (the
// move costs more than the taking: it crosses the engine's stream); see
// sandbox.Archiver. The archive holds only what changed since the
// container started, and what was deleted (see executor.Client.Capture);
// Restore puts it into a sandbox started from the same Spec. The places
// are those of the sandbox's image, listed once per image by the executor
// (see executor.Root), and the task's files put outside them.
func (s *Sandbox) Archive(ctx context.Context, maxBytes int64) (sandbox.Capture, error) {
	if maxBytes <= 0 || maxBytes > maxArchive {
		maxBytes = maxArchive
	}
	roots, err := s.roots(ctx)
	if err != nil {
		return sandbox.Capture{}, err
	}
	var id uint64
	var size int64
	since := s.changesSince()
	err = s.bounded(ctx, "archive", opBound, func(ctx context.Context) (err error) {
		id, size, err = s.exec.Capture(ctx, roots, maxBytes, since)
		return err
	})
	if err != nil {
		return sandbox.Capture{}, fmt.Errorf("docker: archive %s: %w", shortID(s.id), err)
	}
	fetch := func(ctx context.Context) (data []byte, err error) {
		err = s.bounded(ctx, "fetch archive", opBound, func(ctx context.Context) (err error) {
			data, err = s.exec.Fetch(ctx, id)
			return err
		})
		if err != nil {
			return nil, gym.Classify(fmt.Errorf("docker: fetch the archive of %s: %w", shortID(s.id), err), gym.ClassSandbox)
		}
		return data, nil
	}
	return sandbox.Capture{Size: size, Fetch: fetch}, nil
}

// sinceMargin is how much earlier than the container's start a delta
// archive looks for changes: file times come from a clock that may lag
// the one s.made was read from by a tick.
const sinceMargin = 50 * time.Millisecond

// changesSince returns the time after which a change to a file must be
// the agent's (or a restore's, or a task file's), so that an archive need
// only hold what changed after it (a delta archive; see Client.Capture in
// package executor):
// shortly before the container started. It returns the zero time, for a
// whole archive, if the wall clock went back since (then file times
// cannot be trusted to order changes).
func (s *Sandbox) changesSince() time.Time {
	wall := time.Now().Round(0).Sub(s.made.Round(0))
	if wall < time.Since(s.made)-sinceMargin {
		s.p.log.Warn("the clock went back since the sandbox started: a whole archive", "container", shortID(s.id))
		return time.Time{}
	}
	return s.made.Add(-sinceMargin)
}

// Restore puts an archive from Archive into this sandbox, which must come
// from the same Spec and not have been used by an agent; see
// sandbox.Archiver.
func (s *Sandbox) Restore(ctx context.Context, archive []byte) error {
	roots, err := s.roots(ctx)
	if err != nil {
		return err
	}
	err = s.bounded(ctx, "restore", opBound, func(ctx context.Context) error {
		return s.exec.Restore(ctx, roots, archive)
	})
	if err != nil {
		return fmt.Errorf("docker: restore into %s: %w", shortID(s.id), err)
	}
	return nil
}

// roots returns the places the agent can write in this sandbox: its
// image's, asked of the executor the first time and kept, and its task
// files outside them. The executor's answer does not depend on what the
// agent did (it cannot change what is outside those places), so any
// sandbox of the image may give it.
func (s *Sandbox) roots(ctx context.Context) ([]executor.Root, error) {
	p := s.p
	p.mu.Lock()
	roots, ok := p.roots[s.image]
	p.mu.Unlock()
	if !ok {
		err := s.bounded(ctx, "list writable places", opBound, func(ctx context.Context) (err error) {
			roots, err = s.exec.Roots(ctx)
			return err
		})
		if err != nil {
			return nil, gym.Classify(fmt.Errorf("docker: list the agent's places in %s: %w", shortID(s.id), err), gym.ClassSandbox)
		}
		p.mu.Lock()
		p.roots[s.image] = roots
		p.mu.Unlock()
	}
	out := append([]executor.Root(nil), roots...)
	for _, f := range s.files {
		if !underRoot(f, roots) {
			out = append(out, executor.Root{Path: f})
		}
	}
	return out, nil
}

// underRoot reports whether p is, or lies below, one of roots.
func underRoot(p string, roots []executor.Root) bool {
	for _, r := range roots {
		if p == r.Path || (r.Dir && strings.HasPrefix(p, r.Path+"/")) {
			return true
		}
	}
	return false
}

// filePaths returns the clean paths of files.
func filePaths(files []sandbox.File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = path.Clean(f.Path)
	}
	return out
}
