package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// Sandbox is a sandbox of one engine of the fleet. Once its engine has
// been down, even if it is up again, every call but Close fails with
// gym.ErrSandbox, without reaching the engine: a session on an engine
// that went down ends, whether or not its container survived.
type Sandbox struct {
	f     *Fleet
	e     *engine
	inner sandbox.Sandbox
	// downs is e.downs when the sandbox started.
	downs int64
	once  sync.Once
}

var (
	_ sandbox.Sandbox   = (*Sandbox)(nil)
	_ sandbox.Committer = (*Sandbox)(nil)
	_ sandbox.Archiver  = (*Sandbox)(nil)
	_ sandbox.DirMaker  = (*Sandbox)(nil)

	_ sandbox.ZygoteStarter = (*Sandbox)(nil)
)

// newSandbox wraps inner, started on e when e had gone down downs times.
func newSandbox(f *Fleet, e *engine, inner sandbox.Sandbox, downs int64) *Sandbox {
	return &Sandbox{f: f, e: e, inner: inner, downs: downs}
}

// check fails when the sandbox's engine is down or went down since the
// sandbox started.
func (s *Sandbox) check() error {
	if s.f.isUp(s.e) && s.e.downs.Load() == s.downs {
		return nil
	}
	return gym.Classify(fmt.Errorf("sandbox %s: engine %s went down", s.inner.ID(), s.e.name), gym.ClassSandbox)
}

// ID is the inner sandbox's id.
func (s *Sandbox) ID() string { return s.inner.ID() }

// SessionID is the inner sandbox's session id.
func (s *Sandbox) SessionID() string { return s.inner.SessionID() }

// Exec runs a command on the engine.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if err := s.check(); err != nil {
		return sandbox.ExecResult{}, err
	}
	return s.inner.Exec(ctx, req)
}

// WriteFile writes a file in the sandbox.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.inner.WriteFile(ctx, path, data, mode)
}

// ReadFile reads a file of the sandbox.
func (s *Sandbox) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.inner.ReadFile(ctx, path, maxBytes)
}

// ListDir lists a directory of the sandbox.
func (s *Sandbox) ListDir(ctx context.Context, path string) ([]sandbox.DirEntry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.inner.ListDir(ctx, path)
}

// Remove deletes a path in the sandbox.
func (s *Sandbox) Remove(ctx context.Context, path string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.inner.Remove(ctx, path)
}

// KillAll kills the agent's processes.
func (s *Sandbox) KillAll(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.inner.KillAll(ctx)
}

// CopyIn installs the machinery's files.
func (s *Sandbox) CopyIn(ctx context.Context, files []sandbox.File) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.inner.CopyIn(ctx, files)
}

// Close destroys the sandbox and frees its place on the engine; it is
// idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	s.once.Do(func() { s.f.release(s.e) })
	return s.inner.Close(ctx)
}

// Commit saves the sandbox as an image on its engine; sandboxes started
// from that image go to the same engine.
func (s *Sandbox) Commit(ctx context.Context) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	c, ok := s.inner.(sandbox.Committer)
	if !ok {
		return "", fmt.Errorf("sandbox %s cannot be committed: %w", s.inner.ID(), gym.ErrInvalidArgument)
	}
	ref, err := c.Commit(ctx)
	if err != nil {
		return "", err
	}
	s.f.mu.Lock()
	s.f.snapshots[ref] = s.e
	s.f.mu.Unlock()
	return ref, nil
}

// MakeDir makes a directory with the machinery's rights, when the inner
// sandbox can (else errors.ErrUnsupported: the caller runs a Priv exec).
func (s *Sandbox) MakeDir(ctx context.Context, path string, forAgent bool) error {
	if err := s.check(); err != nil {
		return err
	}
	m, ok := s.inner.(sandbox.DirMaker)
	if !ok {
		return fmt.Errorf("sandbox %s: mkdir: %w", s.inner.ID(), errors.ErrUnsupported)
	}
	return m.MakeDir(ctx, path, forAgent)
}

// StartZygote starts the inner sandbox's verifier zygote. An inner
// sandbox that cannot keep one says so in the status, as one whose image
// has no pytest does: the evaluation then runs the usual way.
func (s *Sandbox) StartZygote(ctx context.Context, opts sandbox.ZygoteOptions) (sandbox.ZygoteStatus, error) {
	if err := s.check(); err != nil {
		return sandbox.ZygoteStatus{}, err
	}
	z, ok := s.inner.(sandbox.ZygoteStarter)
	if !ok {
		return sandbox.ZygoteStatus{Error: fmt.Sprintf("sandbox %s keeps no verifier zygote", s.inner.ID())}, nil
	}
	return z.StartZygote(ctx, opts)
}

// Archive takes the agent's files as an archive.
func (s *Sandbox) Archive(ctx context.Context, maxBytes int64) (sandbox.Capture, error) {
	if err := s.check(); err != nil {
		return sandbox.Capture{}, err
	}
	a, ok := s.inner.(sandbox.Archiver)
	if !ok {
		return sandbox.Capture{}, fmt.Errorf("sandbox %s: %w", s.inner.ID(), sandbox.ErrNotArchivable)
	}
	return a.Archive(ctx, maxBytes)
}

// Restore puts an archive's files back.
func (s *Sandbox) Restore(ctx context.Context, archive []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	a, ok := s.inner.(sandbox.Archiver)
	if !ok {
		return fmt.Errorf("sandbox %s cannot restore archives: %w", s.inner.ID(), gym.ErrInvalidArgument)
	}
	return a.Restore(ctx, archive)
}
