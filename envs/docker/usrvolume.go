package docker

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
)

// Shared /usr: a sandbox's /usr/bin and /usr/lib can come, read-only, from
// two Docker volumes on the engine's own disk that hold its base image's
// copy of them, instead of through the storage driver. On a fuse-overlayfs
// engine every path walk and every open of a non-root process pays a round
// trip to the fuse daemon, so each exec, each dynamic library and each
// Python import is slower there. Nothing the agent can see changes but the
// mounts: the agent cannot write either place (a base image where it could
// gets no volumes), and the machinery never writes there.
//
// The volumes belong to the base image, not to each prepared image: a
// prepared image whose build changed nothing under /usr/bin or /usr/lib
// says so with labelUsrBase, and every such image of one base shares one
// pair. A base image's pair is made once per engine, by a container of the
// base that the engine copies them into; a third, empty volume marks the
// pair complete (-ok), or the base as one that cannot share (-no).
//
// A base's /usr/lib64 comes from a third volume, made the same way with
// markers of its own, where the base has it as a directory of its own with
// files in it and /usr/bin and /usr/lib are shared: it holds the loader's
// link (/usr/lib64/ld-linux-x86-64.so.2 on x86-64), which the kernel reads
// at every start of a dynamically linked program, a round trip to the fuse
// daemon each time. Where it is a link (onto /usr/lib, say) or missing, a
// mount there would follow the link or add a directory the image does not
// have: the base is checked before anything is mounted there, and such a
// base shares /usr/bin and /usr/lib alone.

// labelUsrBase, on a prepared image, holds the id of its base image when
// the build left /usr/bin and /usr/lib as the base has them.
const labelUsrBase = "gymserver.usr-base"

// labelUsrOf marks the volumes of a base image's /usr/bin and /usr/lib; the
// value is the base image's id.
const labelUsrOf = "gymserver.usr-of"

// usrDirs are the directories shared from volumes. /usr itself is not: the
// engine binds its init to /sbin/docker-init, which is /usr/sbin in images
// with a merged /usr.
var usrDirs = []string{"/usr/bin", "/usr/lib"}

// usrLib64 is the directory shared from the third volume, where the base
// allows it.
const usrLib64 = "/usr/lib64"

// usrCheck returns a shell command that exits 0 when nothing under dirs
// (links aside) could be written by a user other than root: owned by root,
// not writable by others, and group-writable only by root's group.
func usrCheck(dirs ...string) string {
	return `test -z "$(find ` + strings.Join(dirs, " ") + ` -xdev ! -type l \( ! -user 0 -o -perm -o=w -o \( -perm -g=w ! -group 0 \) \) -print -quit)"`
}

// lib64Check exits 0 when the base's /usr/lib64 may be shared: a directory
// (not a link) with something in it, and nothing there that a user other
// than root could write. It runs with nothing mounted there.
var lib64Check = `test -d ` + usrLib64 + ` && ! test -L ` + usrLib64 + ` && test -n "$(ls -A ` + usrLib64 + `)" && ` + usrCheck(usrLib64)

// usrMakeTimeout bounds making one base image's volumes (a copy of about
// 100 MB here), or waiting for another process to make them.
const usrMakeTimeout = 5 * time.Minute

// usrWaitPoll is how often a process that waits for another to make the
// volumes looks for them.
const usrWaitPoll = 200 * time.Millisecond

// usrShare is what the provider knows of one base image's volumes: binds
// is nil when the base cannot share them. done closes when it is known.
type usrShare struct {
	done  chan struct{}
	binds []string
}

// usrVolumePrefix names a base image's volumes.
func usrVolumePrefix(baseID string) string {
	id := trimDigest(baseID)
	if len(id) > 12 {
		id = id[:12]
	}
	return "gymserver-usr-" + id
}

// usrBinds returns the binds that give a sandbox of the prepared image ref
// the shared /usr/bin and /usr/lib of its base, or nil when it cannot have
// them: ref does not come from Prepare, its build changed those
// directories, or its base lets non-root users write there. The first call
// for a base image makes its volumes; the others wait for it. Failures are
// logged: the sandbox then reads them through the storage driver, as
// without the option.
func (p *Provider) usrBinds(ctx context.Context, ref string) []string {
	// A ref's label does not change: prepared refs are content hashes,
	// snapshot refs are made once.
	p.mu.Lock()
	base, seen := p.usrBase[ref]
	p.mu.Unlock()
	if !seen {
		info, err := p.cli.ImageInspect(ctx, ref)
		if err != nil {
			return nil
		}
		if info.Config != nil {
			base = info.Config.Labels[labelUsrBase]
		}
		p.mu.Lock()
		p.usrBase[ref] = base
		p.mu.Unlock()
	}
	if base == "" {
		return nil
	}
	p.mu.Lock()
	s := p.usr[base]
	mine := s == nil
	if mine {
		s = &usrShare{done: make(chan struct{})}
		p.usr[base] = s
	}
	p.mu.Unlock()
	if mine {
		// A caller that gives up must not leave the volumes half made
		// for the others.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), usrMakeTimeout)
		binds, err := p.makeUsrVolumes(mctx, base)
		if err != nil {
			p.log.Warn("no shared /usr volumes; the sandboxes read /usr through the storage driver", "base", shortID(trimDigest(base)), "err", err)
		}
		if binds != nil {
			lib64, err := p.makeLib64Volume(mctx, base)
			if err != nil {
				p.log.Warn("no shared /usr/lib64 volume; the sandboxes read it through the storage driver", "base", shortID(trimDigest(base)), "err", err)
			}
			if lib64 != "" {
				binds = append(binds, lib64)
			}
		}
		cancel()
		s.binds = binds
		close(s.done)
	}
	select {
	case <-s.done:
		return s.binds
	case <-ctx.Done():
		return nil
	}
}

// makeUsrVolumes makes, unless they exist complete, the volumes of base's
// /usr/bin and /usr/lib, and returns their binds; nil and no error when
// base lets a non-root user write there. On an error it returns nil.
func (p *Provider) makeUsrVolumes(ctx context.Context, base string) ([]string, error) {
	prefix := usrVolumePrefix(base)
	names := []string{prefix + "-bin", prefix + "-lib"}
	binds := func(opts string) []string {
		out := make([]string, len(usrDirs))
		for i, dir := range usrDirs {
			out[i] = names[i] + ":" + dir + opts
		}
		return out
	}
	// The engine copies the base's directories into the new, empty
	// volumes when the container is created; the container then checks
	// them.
	fill := func(ctx context.Context) (bool, error) {
		code, err := p.runOnce(ctx, &container.Config{
			Image: base,
			Cmd:   []string{"/bin/sh", "-c", usrCheck(usrDirs...)},
			User:  machineUser,
		}, binds(""))
		if err != nil {
			return false, fmt.Errorf("copy /usr into volumes and check them: %w", err)
		}
		if code != 0 {
			p.log.Info("base image lets non-root users write under /usr/bin or /usr/lib: no shared /usr volumes", "base", shortID(trimDigest(base)), "exit", code)
			return false, nil
		}
		p.log.Info("made the shared /usr volumes", "base", shortID(trimDigest(base)), "volumes", prefix+"-{bin,lib}")
		return true, nil
	}
	ok, err := p.volumesOnce(ctx, prefix, base, names, map[string]string{labelUsrOf: base}, fill)
	if !ok || err != nil {
		return nil, err
	}
	// Mounted with the engine's copy on, as the executor volume is: a
	// volume removed behind the provider's back (a `docker volume prune`
	// while no sandbox ran) is made again by the engine at the next
	// create from the sandbox's image, whose /usr/bin and /usr/lib are
	// the base's (labelUsrBase), rather than mounted empty. A volume that
	// holds anything is not copied into.
	return binds(":ro"), nil
}

// makeLib64Volume makes, unless it exists complete, the volume of base's
// /usr/lib64 and returns its bind; "" and no error when base does not
// share it (lib64Check). On an error it returns "".
func (p *Provider) makeLib64Volume(ctx context.Context, base string) (string, error) {
	name := usrVolumePrefix(base) + "-lib64"
	fill := func(ctx context.Context) (bool, error) {
		// Checked first with nothing mounted there: a mount would follow a
		// link, or make the directory.
		code, err := p.runOnce(ctx, &container.Config{Image: base, Cmd: []string{"/bin/sh", "-c", lib64Check}, User: machineUser}, nil)
		if err != nil {
			return false, fmt.Errorf("check %s: %w", usrLib64, err)
		}
		if code != 0 {
			p.log.Info("base image's /usr/lib64 is not a directory of its own, is empty, or non-root users can write there: no shared /usr/lib64", "base", shortID(trimDigest(base)), "exit", code)
			return false, nil
		}
		// The engine copies it into the new, empty volume at the create;
		// the container checks the copy.
		code, err = p.runOnce(ctx, &container.Config{Image: base, Cmd: []string{"/bin/sh", "-c", usrCheck(usrLib64)}, User: machineUser}, []string{name + ":" + usrLib64})
		if err != nil {
			return false, fmt.Errorf("copy %s into a volume and check it: %w", usrLib64, err)
		}
		if code != 0 {
			return false, fmt.Errorf("the copy of %s in its volume fails the check (exit %d)", usrLib64, code)
		}
		p.log.Info("made the shared /usr/lib64 volume", "base", shortID(trimDigest(base)), "volume", name)
		return true, nil
	}
	ok, err := p.volumesOnce(ctx, name, base, []string{name}, map[string]string{labelUsrOf: base}, fill)
	if !ok || err != nil {
		return "", err
	}
	// With the engine's copy on, as makeUsrVolumes' binds are.
	return name + ":" + usrLib64 + ":ro", nil
}

// volumesOnce makes a set of volumes, names, once per engine: fill runs
// with them new and empty, fills them, and says whether they can be used.
// Two marker volumes keep its verdict for other processes and later runs:
// prefix-ok (usable) and prefix-no (not). The process that finds neither
// takes a lock, a container named prefix-lock of lockImage (a container's
// name is unique on an engine), and runs fill; the others wait for a
// marker. The lock carries the owner's labels, so the reaper removes it
// after a crash. Every volume and marker carries labels. It returns the
// verdict: true when the volumes can be used.
func (p *Provider) volumesOnce(ctx context.Context, prefix, lockImage string, names []string, labels map[string]string,
	fill func(ctx context.Context) (bool, error)) (bool, error) {
	// known looks for the markers; done says whether one was found.
	known := func() (ok, done bool, err error) {
		for _, m := range []string{"-ok", "-no"} {
			_, err := p.cli.VolumeInspect(ctx, prefix+m)
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return false, false, err
			}
			return m == "-ok", true, nil
		}
		return false, false, nil
	}
	if ok, done, err := known(); done || err != nil {
		return ok, err
	}
	lock, err := p.cli.ContainerCreate(ctx, &container.Config{Image: lockImage, Cmd: []string{"true"}, Labels: p.labels(nil)},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, prefix+"-lock")
	if errdefs.IsConflict(err) {
		for {
			select {
			case <-ctx.Done():
				return false, fmt.Errorf("another process makes the volumes: %w", ctx.Err())
			case <-time.After(usrWaitPoll):
			}
			if ok, done, err := known(); done || err != nil {
				return ok, err
			}
		}
	}
	if err != nil {
		return false, fmt.Errorf("lock: %w", err)
	}
	defer p.removeHelper(ctx, lock.ID)
	if ok, done, err := known(); done || err != nil { // made while we took the lock
		return ok, err
	}
	// What an earlier attempt left is made again: the engine copies an
	// image's files only into an empty volume, and a half-filled one must
	// not be used.
	for _, n := range names {
		if err := p.cli.VolumeRemove(ctx, n, false); err != nil && !isNotFound(err) {
			return false, fmt.Errorf("remove incomplete volume %s: %w", n, err)
		}
		if _, err := p.cli.VolumeCreate(ctx, volume.CreateOptions{Name: n, Labels: labels}); err != nil {
			return false, fmt.Errorf("create volume %s: %w", n, err)
		}
	}
	ok, err := fill(ctx)
	if err != nil {
		return false, err
	}
	marker := prefix + "-ok"
	if !ok {
		// The volumes go; the marker says so to the other processes and
		// to later runs.
		for _, n := range names {
			if err := p.cli.VolumeRemove(ctx, n, false); err != nil && !isNotFound(err) {
				return false, fmt.Errorf("remove volume %s: %w", n, err)
			}
		}
		marker = prefix + "-no"
	}
	if _, err := p.cli.VolumeCreate(ctx, volume.CreateOptions{Name: marker, Labels: labels}); err != nil {
		return false, fmt.Errorf("create volume %s: %w", marker, err)
	}
	return ok, nil
}

// runOnce creates a container of cfg with binds, no network and no log,
// runs it to its end and removes it, and returns its exit code. The
// engine fills empty volumes among binds from the image at the create.
func (p *Provider) runOnce(ctx context.Context, cfg *container.Config, binds []string) (int64, error) {
	cfg.Labels = p.labels(nil)
	created, err := p.cli.ContainerCreate(ctx, cfg, &container.HostConfig{
		NetworkMode: "none",
		Binds:       binds,
		LogConfig:   container.LogConfig{Type: "none"},
	}, nil, nil, "")
	if err != nil {
		return 0, err
	}
	defer p.removeHelper(ctx, created.ID)
	waitC, errC := p.cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	if err := p.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return 0, err
	}
	select {
	case r := <-waitC:
		return r.StatusCode, nil
	case err := <-errC:
		return 0, err
	}
}

// removeHelper removes a container the provider made for its own work,
// logging a failure.
func (p *Provider) removeHelper(ctx context.Context, id string) {
	if err := p.cli.ContainerRemove(context.WithoutCancel(ctx), id, container.RemoveOptions{Force: true}); err != nil && !isNotFound(err) {
		p.log.Warn("remove a helper container", "container", shortID(id), "err", err)
	}
}

// usrUnchanged reports whether the prepare container id left /usr/bin,
// /usr/lib and /usr/lib64 as its image has them (the engine's list of
// changes names no path there).
func (p *Provider) usrUnchanged(ctx context.Context, id string) (bool, error) {
	changes, err := p.cli.ContainerDiff(ctx, id)
	if err != nil {
		return false, err
	}
	for _, c := range changes {
		for _, dir := range slices.Concat(usrDirs, []string{usrLib64}) {
			if c.Path == dir || strings.HasPrefix(c.Path, dir+"/") {
				return false, nil
			}
		}
	}
	return true, nil
}

// VolumeMinAge is how old a shared volume must be before a prune removes
// it. A provider makes its volumes before its sandboxes mount them, and
// other providers wait for their marker meanwhile; a prune by a server of
// another build starting in that moment would take them away (marker
// included) and leave those providers waiting until usrMakeTimeout.
const VolumeMinAge = 10 * time.Minute

// oldEnough reports whether v was made at least minAge before now. A
// volume whose creation time cannot be read counts as new unless minAge
// is 0.
func oldEnough(v *volume.Volume, minAge time.Duration, now time.Time) bool {
	if minAge <= 0 {
		return true
	}
	created, err := time.Parse(time.RFC3339, v.CreatedAt)
	return err == nil && now.Sub(created) >= minAge
}

// remadeUsrVolume matches the name of a shared /usr volume the engine made
// again (see "Removed behind a server's back" in the README); such a
// volume has no label, and its name holds its base image's short id.
var remadeUsrVolume = regexp.MustCompile(`^gymserver-usr-([0-9a-f]{12})-(bin|lib|lib64)$`)

// volumeOwner returns what a shared volume belongs to (a base image, an
// executor build): the value of label on v or, for a volume the engine
// made again without labels, the first group of remade in its name. ok is
// false for any other volume.
func volumeOwner(v *volume.Volume, label string, remade *regexp.Regexp) (string, bool) {
	if owner, ok := v.Labels[label]; ok {
		return owner, true
	}
	m := remade.FindStringSubmatch(v.Name)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// PruneUsrVolumes removes the shared /usr volumes whose base image is gone,
// that no container uses and that were made at least minAge ago (see
// VolumeMinAge), and returns their names. It finds them by their label,
// or by their name when the engine made them again without one.
func PruneUsrVolumes(ctx context.Context, cli *client.Client, minAge time.Duration) ([]string, error) {
	list, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("name", "gymserver-usr-"))})
	if err != nil {
		return nil, fmt.Errorf("docker: list volumes: %w", err)
	}
	now := time.Now()
	var removed []string
	for _, v := range list.Volumes {
		base, ok := volumeOwner(v, labelUsrOf, remadeUsrVolume)
		if !ok || !oldEnough(v, minAge, now) {
			continue
		}
		if _, err := cli.ImageInspect(ctx, base); !isNotFound(err) {
			continue
		}
		if err := cli.VolumeRemove(ctx, v.Name, false); err != nil {
			continue // in use, or already gone
		}
		removed = append(removed, v.Name)
	}
	return removed, nil
}
