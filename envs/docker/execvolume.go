package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
)

// Shared executor: every sandbox runs its executor from one read-only
// volume that holds the provider's executor binary, mounted over the
// image's /.gymserver, instead of from its image's copy. On a
// fuse-overlayfs engine each container's root is a mount of its own, so
// the kernel keeps a page cache per container for the same binary: with
// 128 sandboxes, 128 copies of the executor's code, each cold when its
// session's turn comes, and read through the fuse daemon at each start.
// From a volume on the engine's disk, every executor runs the same pages.
// The volume's content is the binary the image carries (both come from
// Options.ExecutorBinary, and its hash names both), so nothing the agent
// sees changes but the mount; neither the agent nor the executor can
// write it.
//
// The volume is made once per engine and executor build (see
// volumesOnce). It is mounted with the engine's copy on: if it were
// removed behind a provider's back, the engine would make it again from
// the image's /.gymserver, which holds the same binary.

// labelExecOf marks the executor volume and its markers; the value is the
// executor binary's SHA-256.
const labelExecOf = "gymserver.executor-of"

// execVolumePrefix names the executor volume of the binary whose SHA-256
// is hash (hex), and its markers.
func execVolumePrefix(hash string) string {
	if len(hash) > 12 {
		hash = hash[:12]
	}
	return "gymserver-exec-" + hash
}

// execShare is what the provider knows of its executor volume: bind is ""
// when sandboxes run the image's copy. done closes when it is known.
type execShare struct {
	done chan struct{}
	bind string
}

// executorBind returns the bind that mounts the shared executor volume at
// the executor's directory, or "" when the sandbox runs its image's copy
// (Options.ImageExecutor, or the volume could not be made). The first
// call makes the volume, with a container of image; the others wait for
// it. A failure is logged once.
func (p *Provider) executorBind(ctx context.Context, image string) string {
	if p.opts.ImageExecutor {
		return ""
	}
	p.mu.Lock()
	s := p.exec
	mine := s == nil
	if mine {
		s = &execShare{done: make(chan struct{})}
		p.exec = s
	}
	p.mu.Unlock()
	if mine {
		// A caller that gives up must not leave the volume half made for
		// the others.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), usrMakeTimeout)
		prefix := execVolumePrefix(p.execHash)
		ok, err := p.volumesOnce(mctx, prefix, image, []string{prefix}, map[string]string{labelExecOf: p.execHash},
			func(ctx context.Context) (bool, error) { return true, p.fillExecVolume(ctx, prefix, image) })
		cancel()
		switch {
		case err != nil:
			p.log.Warn("no shared executor volume; each sandbox runs its image's copy", "err", err)
		case ok:
			s.bind = prefix + ":" + path.Dir(executorPath) + ":ro"
		}
		close(s.done)
	}
	select {
	case <-s.done:
		return s.bind
	case <-ctx.Done():
		return ""
	}
}

// fillExecVolume writes the executor binary into the empty volume name,
// through a container of image that mounts it (the engine's archive
// call writes into a mounted volume), and reads it back to check it.
func (p *Provider) fillExecVolume(ctx context.Context, name, image string) error {
	bin, err := os.ReadFile(p.opts.ExecutorBinary)
	if err != nil {
		return fmt.Errorf("read executor: %w", err)
	}
	if sum := sha256.Sum256(bin); hex.EncodeToString(sum[:]) != p.execHash {
		return fmt.Errorf("executor binary %s changed since the provider started", p.opts.ExecutorBinary)
	}
	created, err := p.cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"true"}, Labels: p.labels(nil)},
		&container.HostConfig{NetworkMode: "none", Binds: []string{name + ":/gymserver-exec:nocopy"}, LogConfig: container.LogConfig{Type: "none"}},
		nil, nil, "")
	if err != nil {
		return fmt.Errorf("create the container that fills the executor volume: %w", err)
	}
	defer p.removeHelper(ctx, created.ID)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Base(executorPath), Mode: 0o755, Size: int64(len(bin))}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := p.cli.CopyToContainer(ctx, created.ID, "/gymserver-exec", &buf, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("write the executor into its volume: %w", err)
	}
	rc, _, err := p.cli.CopyFromContainer(ctx, created.ID, "/gymserver-exec/"+path.Base(executorPath))
	if err != nil {
		return fmt.Errorf("read the executor back from its volume: %w", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	got, err := tr.Next()
	if err != nil {
		return fmt.Errorf("read the executor back from its volume: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, tr); err != nil {
		return fmt.Errorf("read the executor back from its volume: %w", err)
	}
	if hex.EncodeToString(h.Sum(nil)) != p.execHash || got.Mode&0o777 != 0o755 || got.Uid != 0 {
		return fmt.Errorf("the executor read back from its volume differs (mode %o, uid %d)", got.Mode, got.Uid)
	}
	p.log.Info("made the shared executor volume", "volume", name)
	return nil
}

// remadeExecVolume matches the name of a shared executor volume the
// engine made again; such a volume has no label, and its name holds the
// start of its build's hash.
var remadeExecVolume = regexp.MustCompile(`^gymserver-exec-([0-9a-f]{12})$`)

// PruneExecutorVolumes removes the shared executor volumes of executor
// builds other than keep (a SHA-256 in hex; "" keeps none) that no
// container uses and that were made at least minAge ago (see
// VolumeMinAge), with their markers, and returns their names. A marker
// goes only with its volume: a volume in use or too new keeps its markers.
// It finds the volumes by their label, or by their name when the engine
// made them again without one.
func PruneExecutorVolumes(ctx context.Context, cli *client.Client, keep string, minAge time.Duration) ([]string, error) {
	list, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("name", "gymserver-exec-"))})
	if err != nil {
		return nil, fmt.Errorf("docker: list volumes: %w", err)
	}
	now := time.Now()
	var removed []string
	for _, v := range list.Volumes {
		hash, ok := volumeOwner(v, labelExecOf, remadeExecVolume)
		if !ok || execVolumePrefix(hash) == execVolumePrefix(keep) || v.Name != execVolumePrefix(hash) || !oldEnough(v, minAge, now) {
			continue
		}
		if err := cli.VolumeRemove(ctx, v.Name, false); err != nil {
			continue // in use, or already gone
		}
		removed = append(removed, v.Name)
		for _, m := range []string{"-ok", "-no"} {
			if err := cli.VolumeRemove(ctx, v.Name+m, false); err == nil {
				removed = append(removed, v.Name+m)
			}
		}
	}
	return removed, nil
}
