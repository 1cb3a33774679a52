package docker_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
)

// uniqueExecutor returns a copy of the test executor with random bytes
// appended, and its hash: the same program (the kernel loads the ELF's
// segments and ignores what follows them) with a hash of the test's own,
// so its executor volume and prepared images are the test's alone, left
// alone by other tests that share the engine. They go when the test ends.
func uniqueExecutor(t *testing.T, cli *client.Client) (path, hash string) {
	t.Helper()
	bin, err := os.ReadFile(sandboxtest.ExecutorBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "gymexec")
	if err := os.WriteFile(path, append(bin, []byte(rand.Text())...), 0o755); err != nil {
		t.Fatal(err)
	}
	hash, err = docker.ExecutorHash(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		list, _ := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "gymserver.executor="+hash))})
		for _, img := range list {
			cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
		for _, v := range execVolumes(t, cli, hash) {
			if err := cli.VolumeRemove(ctx, v, false); err != nil {
				t.Errorf("remove %s: %v", v, err)
			}
		}
	})
	return path, hash
}

// execVolumes lists the executor volumes (and markers) of hash.
func execVolumes(t *testing.T, cli *client.Client, hash string) []string {
	t.Helper()
	list, err := cli.VolumeList(context.Background(), volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "gymserver.executor-of="+hash))})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range list.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// executorFacts says, from inside sb as root, the SHA-256 of
// /.gymserver/executor and the options of the mount at /.gymserver ("none"
// without one), and, from the host, whether the executor process (the
// child of the container's init) runs the very file of the volume name.
func executorFacts(t *testing.T, cli *client.Client, sb sandbox.Sandbox, name string) (sum, mount string, fromVolume bool) {
	t.Helper()
	const script = `sha256sum /.gymserver/executor | cut -d' ' -f1
m=$(awk '$5 == "/.gymserver" {print $6}' /proc/self/mountinfo); echo "${m:-none}"`
	code, out := run(t, sb, true, script)
	f := strings.Fields(out)
	if code != 0 || len(f) != 2 {
		t.Fatalf("facts of the executor: exit %d, %q", code, out)
	}
	info, err := cli.ContainerInspect(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	init := info.State.Pid
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", init, init))
	if err != nil || len(strings.Fields(string(kids))) != 1 {
		t.Fatalf("children of the container's init: %q %v", kids, err)
	}
	exe, err := os.Stat("/proc/" + strings.TrimSpace(string(kids)) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := cli.VolumeInspect(t.Context(), name); err == nil {
		if file, err := os.Stat(filepath.Join(v.Mountpoint, "executor")); err == nil {
			fromVolume = os.SameFile(exe, file)
		}
	}
	return f[0], f[1], fromVolume
}

// TestSharedExecutor checks that sandboxes run their executor from one
// read-only volume that holds the provider's binary, made once when two
// providers' sandboxes first start at once, that neither the agent nor
// the machinery (root) inside a sandbox can change it, and, as its twin,
// that a provider with ImageExecutor runs the image's copy from "/".
func TestSharedExecutor(t *testing.T) {
	_, cli := newProvider(t)
	bin, hash := uniqueExecutor(t, cli)
	p, _ := dockertest.NewWith(t, docker.Options{ExecutorBinary: bin, SyncRemove: true})
	p2, _ := dockertest.NewWith(t, docker.Options{ExecutorBinary: bin, SyncRemove: true})
	ctx := t.Context()
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if got := execVolumes(t, cli, hash); len(got) != 0 {
		t.Fatalf("volumes before the first sandbox: %v", got)
	}
	const n = 4
	boxes := make([]sandbox.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			prov := p
			if i%2 == 1 {
				prov = p2
			}
			boxes[i], errs[i] = prov.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
		})
	}
	wg.Wait()
	for i, sb := range boxes {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer sb.Close(context.Background())
	}
	for i, sb := range boxes {
		sum, mount, fromVolume := executorFacts(t, cli, sb, "gymserver-exec-"+hash[:12])
		if sum != hash || !fromVolume || !strings.HasPrefix(mount, "ro,") {
			t.Errorf("sandbox %d: executor sha256 %s (want %s), mount %q, runs the volume's file %v", i, sum, hash, mount, fromVolume)
		}
		info, err := cli.ContainerInspect(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, m := range info.Mounts {
			if m.Destination == "/.gymserver" {
				found = m.Type == "volume" && m.Name == "gymserver-exec-"+hash[:12] && !m.RW
			}
		}
		if !found {
			t.Errorf("sandbox %d: no read-only executor volume at /.gymserver: %+v", i, info.Mounts)
		}
	}
	if got := execVolumes(t, cli, hash); len(got) != 2 {
		t.Errorf("volumes: %v, want the executor's and its -ok marker", got)
	}
	locks, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", "gymserver-exec-"))})
	if err != nil || len(locks) != 0 {
		t.Errorf("lock containers left: %d %v", len(locks), err)
	}

	// An agent that could replace the executor would own every sandbox
	// of the engine: it cannot, and neither can root in the sandbox.
	attacks := []string{
		"cp /bin/true /.gymserver/executor",
		"echo 'exit 0' > /.gymserver/executor",
		"rm -f /.gymserver/executor",
		"mv /.gymserver/executor /.gymserver/x",
		"chmod 777 /.gymserver/executor",
		"touch /.gymserver/planted",
	}
	for _, a := range attacks {
		for _, priv := range []bool{false, true} {
			if code, out := run(t, boxes[0], priv, a); code == 0 {
				t.Errorf("%q (priv %v) succeeded: %q", a, priv, out)
			}
		}
	}
	if code, out := run(t, boxes[0], true, "mount -o remount,rw /.gymserver"); code == 0 {
		t.Errorf("remount rw succeeded: %q", out)
	}
	for i, sb := range boxes {
		if sum, _, _ := executorFacts(t, cli, sb, "gymserver-exec-"+hash[:12]); sum != hash {
			t.Errorf("sandbox %d after the attacks: executor sha256 %s", i, sum)
		}
		if code, out := run(t, sb, false, "ls -A /.gymserver && /bin/echo hi"); code != 0 || out != "executor\nhi\n" {
			t.Errorf("sandbox %d after the attacks: %d %q", i, code, out)
		}
	}

	// The twin: the image's copy, from "/".
	ip, _ := dockertest.NewWith(t, docker.Options{ExecutorBinary: bin, ImageExecutor: true, SyncRemove: true})
	sb, err := ip.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if sum, mount, fromVolume := executorFacts(t, cli, sb, "gymserver-exec-"+hash[:12]); sum != hash || mount != "none" || fromVolume {
		t.Errorf("ImageExecutor: executor sha256 %s, mount %q, runs the volume's file %v; want the image's copy", sum, mount, fromVolume)
	}
}

// TestExecutorVolumeRemade checks that a volume an earlier attempt left
// without its marker is made again before any sandbox uses it (its
// content is not trusted), and that a volume removed behind the
// provider's back is made again by the engine from the image's copy.
func TestExecutorVolumeRemade(t *testing.T) {
	_, cli := newProvider(t)
	bin, hash := uniqueExecutor(t, cli)
	ctx := t.Context()
	name := "gymserver-exec-" + hash[:12]
	// A half-made volume: a program that is not the executor, no marker.
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: map[string]string{"gymserver.executor-of": hash}}); err != nil {
		t.Fatal(err)
	}
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, User: "0:0",
		Cmd: []string{"/bin/sh", "-c", "printf '#!/bin/sh\\nexit 7\\n' > /v/executor && chmod 755 /v/executor"}},
		&container.HostConfig{NetworkMode: "none", Binds: []string{name + ":/v"}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	code := runToExit(t, cli, c.ID)
	cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	if code != 0 {
		t.Fatalf("plant: exit %d", code)
	}

	p, _ := dockertest.NewWith(t, docker.Options{ExecutorBinary: bin, SyncRemove: true})
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	// check returns the sandbox alive: the volume is checked while a
	// sandbox uses it, so that a `gymserver image prune` run at the same
	// time by a test of another package (it removes the volumes of other
	// executor builds that no container uses) cannot take it in between.
	check := func(what string) sandbox.Sandbox {
		t.Helper()
		sb, err := p.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		if sum, mount, fromVolume := executorFacts(t, cli, sb, name); sum != hash || !strings.HasPrefix(mount, "ro,") || !fromVolume {
			t.Errorf("%s: executor sha256 %s (want %s), mount %q, runs the volume's file %v", what, sum, hash, mount, fromVolume)
		}
		return sb
	}
	sb := check("after a half-made volume")
	if got := execVolumes(t, cli, hash); len(got) != 2 {
		t.Errorf("volumes: %v", got)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Removed while no sandbox uses it: the engine makes it again from
	// the image, which holds the same binary. (A prune elsewhere may have
	// removed it first; that is the same.)
	if err := cli.VolumeRemove(ctx, name, false); err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	// Made again by the engine, it carries no label: removed here, after
	// the sandbox below is closed (clean-ups run last first).
	t.Cleanup(func() { cli.VolumeRemove(context.Background(), name, false) })
	check("after the volume was removed")
	if _, err := cli.VolumeInspect(ctx, name); err != nil {
		t.Errorf("volume not made again: %v", err)
	}
}
