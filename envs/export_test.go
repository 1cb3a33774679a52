package envs

import "context"

// ArchiveArrived waits until the archive of snapshot id of e has left its
// sandbox; it returns at once for a snapshot without one.
func ArchiveArrived(ctx context.Context, e *TaskEnv, id string) error {
	e.mu.Lock()
	rec := e.snapshots[id]
	e.mu.Unlock()
	if rec.archive == nil {
		return nil
	}
	_, err := rec.archive.wait(ctx)
	return err
}
