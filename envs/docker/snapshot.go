package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// snapshotRepo is the repository of the images Commit makes.
const snapshotRepo = "gymserver-snapshot"

// labelSnapshot marks snapshot images, so that they can be found and
// removed with their owner.
const labelSnapshot = "gymserver.snapshot"

var (
	_ sandbox.Committer    = (*Sandbox)(nil)
	_ sandbox.ImageDropper = (*Provider)(nil)
)

// Commit saves the container's files as an image owned by the provider;
// the container is paused while it is written. The image keeps the
// container's user, working directory, environment and command, so
// Create starts sandboxes from it like from a prepared image.
func (s *Sandbox) Commit(ctx context.Context) (string, error) {
	if err := s.enter("commit"); err != nil {
		return "", err
	}
	defer s.gate.RUnlock()
	var b [12]byte
	_, _ = rand.Read(b[:])
	ref := snapshotRepo + ":" + hex.EncodeToString(b[:])
	p := s.p
	labels := p.labels(map[string]string{labelSnapshot: "1", labelKind: KindSnapshot})
	// Register first: a provider closing meanwhile still removes it.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return "", gym.Errorf(gym.ClassUnavailable, "docker: provider closed")
	}
	p.snapshots[ref] = true
	p.mu.Unlock()
	_, err := p.cli.ContainerCommit(ctx, s.id, container.CommitOptions{
		Reference: ref,
		Pause:     true,
		Comment:   "gymserver snapshot of " + shortID(s.id),
		Config:    &container.Config{Labels: labels},
	})
	if err != nil {
		p.mu.Lock()
		delete(p.snapshots, ref)
		p.mu.Unlock()
		return "", gym.Classify(fmt.Errorf("docker: commit %s: %w", shortID(s.id), s.diagnose(err)), gym.ClassSandbox)
	}
	return ref, nil
}

// DropImage removes an image made by Commit. While sandboxes started from
// it still run, the image stays and is removed when the last of them
// closes.
func (p *Provider) DropImage(ctx context.Context, ref string) error {
	p.mu.Lock()
	known := p.snapshots[ref]
	delete(p.snapshots, ref)
	if known {
		p.dropped[ref] = true
	}
	p.mu.Unlock()
	if !known {
		return fmt.Errorf("docker: image %s is not a snapshot of this provider: %w", ref, gym.ErrNotFound)
	}
	return p.removeDropped(ctx)
}

// removeDropped removes the dropped snapshot images that no container uses
// any more; the others wait for the next call.
func (p *Provider) removeDropped(ctx context.Context) error {
	p.mu.Lock()
	refs := make([]string, 0, len(p.dropped))
	for ref := range p.dropped {
		refs = append(refs, ref)
	}
	p.mu.Unlock()
	var errs []error
	for _, ref := range refs {
		_, err := p.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
		switch {
		case err == nil || isNotFound(err):
			p.mu.Lock()
			delete(p.dropped, ref)
			p.mu.Unlock()
		case errdefs.IsConflict(err):
			// A sandbox still runs from it.
		default:
			errs = append(errs, gym.Classify(fmt.Errorf("docker: remove image %s: %w", ref, err), gym.ClassSandbox))
		}
	}
	return errors.Join(errs...)
}

// removeImage removes an image by reference or id, in use or not.
func (p *Provider) removeImage(ctx context.Context, ref string) error {
	if err := removeImage(ctx, p.cli, ref); err != nil {
		return gym.Classify(err, gym.ClassSandbox)
	}
	return nil
}

// isSnapshot reports whether ref is an image Commit made.
func (p *Provider) isSnapshot(ref string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshots[ref]
}

// removeSnapshots removes the snapshot images for which gone, given their
// owner and lease labels, returns true.
func (p *Provider) removeSnapshots(ctx context.Context, gone func(owner, lease string) bool) error {
	list, err := listSnapshots(ctx, p.cli)
	if err != nil {
		return gym.Classify(err, gym.ClassSandbox)
	}
	var errs []error
	for _, img := range list {
		if !gone(img.Labels[sandbox.LabelOwner], img.Labels[sandbox.LabelLease]) {
			continue
		}
		errs = append(errs, p.removeImage(ctx, img.ID))
	}
	return errors.Join(errs...)
}
