package envs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// snapshotRecord is a saved session: its sandbox's files, as an archive
// of what the agent can write or as a committed image, and the episode's
// state.
type snapshotRecord struct {
	// image is what forks start from: the session's own image for an
	// archive, the committed image otherwise; files are the task files
	// forks get (none from a committed image, which holds them).
	image   string
	files   []sandbox.File
	archive *pendingArchive
	task    *task
	snap    gym.Snapshot
}

// pendingArchive is an archive on its way from the sandbox it was taken
// in: a snapshot returns once the archive is taken, and its forks wait
// for the bytes.
type pendingArchive struct {
	// done is closed when data or err is set.
	done chan struct{}
	data []byte
	err  error
}

// wait returns the archive once it has arrived.
func (a *pendingArchive) wait(ctx context.Context) ([]byte, error) {
	select {
	case <-a.done:
		return a.data, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetchTimeout bounds the move of an archive out of its sandbox.
const fetchTimeout = 2 * time.Minute

// fetch moves the archive c out of the session's sandbox in the
// background; the session's Close waits for it before removing the
// sandbox.
func (s *session) fetch(c sandbox.Capture) *pendingArchive {
	a := &pendingArchive{done: make(chan struct{})}
	s.fetches.Add(1)
	go func() {
		defer s.fetches.Done()
		defer close(a.done)
		ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
		defer cancel()
		a.data, a.err = c.Fetch(ctx)
		if a.err != nil {
			s.env.log.Warn("snapshot archive lost", "session_id", s.id, "err", a.err)
		}
	}()
	return a
}

// DefaultSnapshotArchiveMax is the default of Options.SnapshotArchiveMax.
const DefaultSnapshotArchiveMax = 32 << 20

var _ gym.Snapshotter = (*session)(nil)

// Snapshot saves the sandbox's files and the episode's counts and elapsed
// time. The files are kept as an archive of what the agent can write when
// the sandbox can make one (sandbox.Archiver) within
// Options.SnapshotArchiveMax, else committed as an image; Mode says which
// and Fallback why not an archive. An archive is moved out of the sandbox
// after Snapshot returns (forks wait for it). Processes the agent left
// running are not saved.
func (s *session) Snapshot(ctx context.Context) (gym.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.done {
		// After the end the hidden tests may be in the sandbox: they must
		// never reach a sandbox an agent works in.
		return gym.Snapshot{}, fmt.Errorf("session %s: snapshot: episode ended (%s): %w", s.id, s.reason, gym.ErrEpisodeDone)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	snap := gym.Snapshot{
		ID:        "snap-" + hex.EncodeToString(b[:]),
		EnvID:     s.env.cfg.ID,
		TaskID:    s.task.src.ID,
		SessionID: s.id,
		Steps:     s.steps,
		Actions:   s.actions,
		Elapsed:   gym.Duration(time.Since(s.start)),
		Created:   time.Now(),
	}
	rec := snapshotRecord{task: s.task, image: s.image, files: s.files}
	limit := cmp.Or(s.env.opts.SnapshotArchiveMax, DefaultSnapshotArchiveMax)
	if a, ok := s.sb.(sandbox.Archiver); ok && limit > 0 {
		c, err := a.Archive(ctx, limit)
		switch {
		case err == nil:
			rec.archive, snap.Mode, snap.Bytes = s.fetch(c), gym.SnapshotArchive, c.Size
		case errors.Is(err, sandbox.ErrNotArchivable):
			snap.Fallback = err.Error()
		default:
			return gym.Snapshot{}, gym.Classify(fmt.Errorf("session %s: snapshot: %w", s.id, err), gym.ClassSandbox)
		}
	}
	if rec.archive == nil {
		c, ok := s.sb.(sandbox.Committer)
		if !ok {
			return gym.Snapshot{}, fmt.Errorf("session %s: snapshot: this sandbox cannot be saved: %w", s.id, gym.ErrInvalidArgument)
		}
		image, err := c.Commit(ctx)
		if err != nil {
			return gym.Snapshot{}, gym.Classify(fmt.Errorf("session %s: snapshot: %w", s.id, err), gym.ClassSandbox)
		}
		rec.image, rec.files, snap.Mode = image, nil, gym.SnapshotCommit
	}
	rec.snap = snap
	e := s.env
	e.mu.Lock()
	if e.snapshots == nil {
		e.snapshots = map[string]snapshotRecord{}
	}
	e.snapshots[snap.ID] = rec
	e.mu.Unlock()
	e.log.Info("session saved", "session_id", s.id, "snapshot", snap.ID, "steps", snap.Steps,
		"mode", snap.Mode, "bytes", snap.Bytes, "fallback", snap.Fallback)
	return snap, nil
}

// Fork starts a session from a snapshot. Its clock starts where the
// snapshot's stopped, so the global timeout counts the time already used.
// An archive is restored into a sandbox started as a reset of the task
// would start it (from the warm pool when one waits); a committed image is
// started as is. Unlike a reset's, a fork's verifier zygote starts at its
// first step.
func (e *TaskEnv) Fork(ctx context.Context, snapshotID string) (gym.Session, gym.Reset, error) {
	e.mu.Lock()
	rec, ok := e.snapshots[snapshotID]
	e.mu.Unlock()
	if !ok {
		return nil, gym.Reset{}, fmt.Errorf("environment %s: snapshot %q: %w", e.cfg.ID, snapshotID, gym.ErrNotFound)
	}
	s, err := rec.task.start(ctx, rec.image, rec.files, nil)
	if err != nil {
		return nil, gym.Reset{}, err
	}
	if rec.archive != nil {
		data, err := rec.archive.wait(ctx)
		if err == nil {
			err = s.sb.(sandbox.Archiver).Restore(ctx, data)
		}
		if err != nil {
			s.Close(context.WithoutCancel(ctx))
			return nil, gym.Reset{}, gym.Classify(fmt.Errorf("environment %s: fork %s: %w", e.cfg.ID, snapshotID, err), gym.ClassSandbox)
		}
	}
	// The verifier zygote starts at the fork's first step, not here: its
	// imports would compete with the restore (and with every other fork
	// of the call) for the CPU. A fork evaluated before any step runs its
	// tests the usual way.
	s.zygoteDue = true
	s.start = time.Now().Add(-time.Duration(rec.snap.Elapsed))
	s.steps, s.actions = rec.snap.Steps, rec.snap.Actions
	r := s.initial()
	r.ForkOf, r.Steps, r.Actions = snapshotID, s.steps, s.actions
	r.Limits.GlobalTimeout = remaining(r.Limits.GlobalTimeout, rec.snap.Elapsed)
	return s, r, nil
}

// minRemaining is the global timeout a fork reports when its snapshot had
// used the whole budget: 0 would mean "no timeout".
const minRemaining = gym.Duration(time.Millisecond)

// remaining is what is left of the global timeout budget after elapsed,
// which a forked session reports as its global_timeout (PROTOCOL.md §4.9):
// at least minRemaining, and 0 (no timeout) stays 0.
func remaining(budget, elapsed gym.Duration) gym.Duration {
	if budget <= 0 {
		return budget
	}
	return max(budget-elapsed, minRemaining)
}

// DropSnapshot deletes a snapshot and its image or archive.
func (e *TaskEnv) DropSnapshot(ctx context.Context, snapshotID string) error {
	e.mu.Lock()
	rec, ok := e.snapshots[snapshotID]
	delete(e.snapshots, snapshotID)
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("environment %s: snapshot %q: %w", e.cfg.ID, snapshotID, gym.ErrNotFound)
	}
	if d, ok := e.opts.Provider.(sandbox.ImageDropper); ok && rec.snap.Mode == gym.SnapshotCommit {
		if err := d.DropImage(ctx, rec.image); err != nil {
			return gym.Classify(fmt.Errorf("environment %s: drop snapshot %s: %w", e.cfg.ID, snapshotID, err), gym.ClassSandbox)
		}
	}
	return nil
}
