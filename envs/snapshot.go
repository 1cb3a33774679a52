package envs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// snapshotRecord is a saved session: the image of its sandbox's files and
// the episode's state.
type snapshotRecord struct {
	image string
	task  *task
	snap  gym.Snapshot
}

var _ gym.Snapshotter = (*session)(nil)

// Snapshot saves the sandbox's files as an image and the episode's counts
// and elapsed time. Processes the agent left running are not saved.
func (s *session) Snapshot(ctx context.Context) (gym.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.done {
		// After the end the hidden tests may be in the sandbox: they must
		// never reach a sandbox an agent works in.
		return gym.Snapshot{}, fmt.Errorf("session %s: snapshot: episode ended (%s): %w", s.id, s.reason, gym.ErrEpisodeDone)
	}
	c, ok := s.sb.(sandbox.Committer)
	if !ok {
		return gym.Snapshot{}, fmt.Errorf("session %s: snapshot: this sandbox cannot be saved: %w", s.id, gym.ErrInvalidArgument)
	}
	image, err := c.Commit(ctx)
	if err != nil {
		return gym.Snapshot{}, gym.Classify(fmt.Errorf("session %s: snapshot: %w", s.id, err), gym.ClassSandbox)
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
	e := s.env
	e.mu.Lock()
	if e.snapshots == nil {
		e.snapshots = map[string]snapshotRecord{}
	}
	e.snapshots[snap.ID] = snapshotRecord{image: image, task: s.task, snap: snap}
	e.mu.Unlock()
	e.log.Info("session saved", "session_id", s.id, "snapshot", snap.ID, "steps", snap.Steps)
	return snap, nil
}

// Fork starts a session from a snapshot. Its clock starts where the
// snapshot's stopped, so the global timeout counts the time already used.
func (e *TaskEnv) Fork(ctx context.Context, snapshotID string) (gym.Session, gym.Reset, error) {
	e.mu.Lock()
	rec, ok := e.snapshots[snapshotID]
	e.mu.Unlock()
	if !ok {
		return nil, gym.Reset{}, fmt.Errorf("environment %s: snapshot %q: %w", e.cfg.ID, snapshotID, gym.ErrNotFound)
	}
	// The snapshot holds the starter files as the agent left them.
	s, err := rec.task.start(ctx, rec.image, nil, nil)
	if err != nil {
		return nil, gym.Reset{}, err
	}
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

// DropSnapshot deletes a snapshot and its image.
func (e *TaskEnv) DropSnapshot(ctx context.Context, snapshotID string) error {
	e.mu.Lock()
	rec, ok := e.snapshots[snapshotID]
	delete(e.snapshots, snapshotID)
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("environment %s: snapshot %q: %w", e.cfg.ID, snapshotID, gym.ErrNotFound)
	}
	if d, ok := e.opts.Provider.(sandbox.ImageDropper); ok {
		if err := d.DropImage(ctx, rec.image); err != nil {
			return gym.Classify(fmt.Errorf("environment %s: drop snapshot %s: %w", e.cfg.ID, snapshotID, err), gym.ClassSandbox)
		}
	}
	return nil
}
