package docker_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// usrMounts returns the lines of the sandbox's mount table for /usr/bin,
// /usr/lib and /usr/lib64, as its machinery sees them.
func usrMounts(t *testing.T, sb sandbox.Sandbox) string {
	t.Helper()
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "grep -E ' /usr/(bin|lib|lib64) ' /proc/self/mountinfo || true"}, Priv: true})
	if err != nil {
		t.Fatal(err)
	}
	return string(r.Stdout)
}

// run runs a shell command in sb, as the agent or, with priv, as the
// machinery, and returns its exit code and output.
func run(t *testing.T, sb sandbox.Sandbox, priv bool, cmd string) (int, string) {
	t.Helper()
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", cmd}, Priv: priv})
	if err != nil {
		t.Fatal(err)
	}
	return r.ExitCode, string(r.Stdout) + string(r.Stderr)
}

// derivedBase commits a container of the base image after cmd ran in it
// as root, as a new base image of the test's own, removed (with its /usr
// volumes) when the test ends.
func derivedBase(t *testing.T, cli *client.Client, cmd string) string {
	t.Helper()
	ctx := t.Context()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"/bin/sh", "-c", cmd}, User: "0:0"},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	if code := runToExit(t, cli, c.ID); code != 0 {
		t.Fatalf("%s: exit %d", cmd, code)
	}
	ref := "gymserver-test-usr:" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if _, err := cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: ref}); err != nil {
		t.Fatal(err)
	}
	info, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		// The prepared images of this base go first, then the base, then
		// its volumes (which no container uses any more).
		list, _ := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "gymserver.usr-base="+info.ID))})
		for _, img := range list {
			cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
		cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
		if _, err := docker.PruneUsrVolumes(ctx, cli, 0); err != nil {
			t.Error(err)
		}
	})
	return info.ID
}

// sharedUsrSandbox prepares spec's image with p and starts a sandbox of it
// that asks for the shared /usr, closed by the test's cleanup.
func sharedUsrSandbox(t *testing.T, p *docker.Provider, spec sandbox.ImageSpec) sandbox.Sandbox {
	t.Helper()
	img, err := p.Prepare(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(t.Context(), sandbox.Spec{Image: img, WorkDir: spec.WorkDir, ShareUsr: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

// usrVolumes lists the shared /usr volumes of base.
func usrVolumes(t *testing.T, cli *client.Client, base string) []string {
	t.Helper()
	list, err := cli.VolumeList(t.Context(), volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "gymserver.usr-of="+base))})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range list.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// TestSharedUsrSameFiles checks that a sandbox with the shared /usr sees
// /usr/bin, /usr/lib and /usr/lib64 read-only from volumes, with the same files as a
// sandbox without it (names, modes, owners, sizes, times, link targets
// and contents), and that the agent's Python and pytest work from them.
func TestSharedUsrSameFiles(t *testing.T) {
	p, _ := newProvider(t)
	shared := baseSandbox(t, p, sandbox.Spec{ShareUsr: true})
	plain := baseSandbox(t, p, sandbox.Spec{})
	m := usrMounts(t, shared)
	for _, dir := range []string{"/usr/bin", "/usr/lib", "/usr/lib64"} {
		var line string
		for _, l := range strings.Split(m, "\n") {
			if f := strings.Fields(l); len(f) > 5 && f[4] == dir {
				line = l
			}
		}
		if f := strings.Fields(line); len(f) < 6 || !strings.HasPrefix(f[5], "ro") {
			t.Errorf("%s is not a read-only mount of its own in the shared sandbox: %q", dir, line)
		}
	}
	if m := usrMounts(t, plain); m != "" {
		t.Errorf("a sandbox without ShareUsr has /usr mounts: %q", m)
	}
	// Directories' own times are left out: the engine's copy does not
	// keep them, and nothing reads them.
	const listing = `cd / && find usr/bin usr/lib usr/lib64 -mindepth 1 \( -type d -printf '%p %m %U %G\n' \) -o \( ! -type d -printf '%p %m %U %G %s %T@ %l\n' \) | sort | sha256sum; find usr/bin usr/lib usr/lib64 -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum`
	code, a := run(t, shared, true, listing)
	if code != 0 {
		t.Fatalf("listing: %d %s", code, a)
	}
	_, b := run(t, plain, true, listing)
	if a != b {
		t.Errorf("/usr/bin, /usr/lib and /usr/lib64 differ: shared %q, storage driver %q", a, b)
	}
	if code, out := run(t, shared, false, "python3 -c 'import pytest, json; print(pytest.__version__)'"); code != 0 {
		t.Errorf("python3 with pytest as the agent: %d %s", code, out)
	}
}

// TestSharedUsrAttacks checks that neither the agent nor the sandbox's
// root machinery can change the shared /usr, so no sandbox can change
// what another runs: writes fail, a remount is refused, and a second
// sandbox sees the files as they were.
func TestSharedUsrAttacks(t *testing.T) {
	p, _ := newProvider(t)
	sb := baseSandbox(t, p, sandbox.Spec{ShareUsr: true})
	for _, tc := range []struct {
		priv bool
		cmd  string
	}{
		{false, "echo evil > /usr/bin/pytest-planted"},
		{false, "echo 'import os' >> /usr/lib/python3/dist-packages/pytest/__init__.py"},
		{false, "mount -o remount,rw /usr/lib"},
		{false, "touch /usr/lib64/planted"},
		{true, "echo evil > /usr/bin/pytest-planted"},
		{true, "echo 'raise SystemExit(0)' > /usr/lib/python3/dist-packages/sitecustomize.py"},
		{true, "touch /usr/lib/python3/dist-packages/pytest/__init__.py"},
		{true, "mount -o remount,rw /usr/lib"},
		{true, "umount -l /usr/lib"},
		{true, "ln -sfn /tmp/evil /usr/lib64/ld-linux-x86-64.so.2"},
		{true, "umount -l /usr/lib64"},
	} {
		if code, out := run(t, sb, tc.priv, tc.cmd); code == 0 {
			t.Errorf("root %v: %q succeeded: %s", tc.priv, tc.cmd, out)
		}
	}
	if m := usrMounts(t, sb); strings.Count(m, "\n") != 3 {
		t.Errorf("after the attacks the mounts are %q", m)
	}
	other := baseSandbox(t, p, sandbox.Spec{ShareUsr: true})
	if code, out := run(t, other, false, "test ! -e /usr/bin/pytest-planted && test ! -e /usr/lib/python3/dist-packages/sitecustomize.py && readlink /usr/lib64/ld-linux-x86-64.so.2 | grep -q x86_64-linux-gnu && python3 -m pytest --version"); code != 0 {
		t.Errorf("a second sandbox: %d %s", code, out)
	}
}

// TestSharedUsrOnlyWhenSafe checks the two cases where a sandbox must not
// get the shared /usr: a prepared image whose build put a file under
// /usr/lib (the base's copy would hide it), and a base image that lets a
// non-root user write under /usr/lib (the agent could write there without
// the volumes). Both then read /usr through the storage driver, and the
// agent sees what the image holds.
func TestSharedUsrOnlyWhenSafe(t *testing.T) {
	p, cli := newProvider(t)
	sb := sharedUsrSandbox(t, p, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace", Files: []sandbox.File{
		{Path: "/usr/lib/python3/dist-packages/gymtest_planted.py", Data: []byte("VALUE = 42\n"), Mode: 0o644},
	}})
	if m := usrMounts(t, sb); m != "" {
		t.Errorf("an image whose build wrote under /usr/lib got the shared /usr: %q", m)
	}
	if code, out := run(t, sb, false, "python3 -c 'import gymtest_planted; print(gymtest_planted.VALUE)'"); code != 0 || strings.TrimSpace(out) != "42" {
		t.Errorf("the prepared file under /usr/lib: %d %q", code, out)
	}

	base := derivedBase(t, cli, "chmod o+w /usr/lib/python3")
	sb2 := sharedUsrSandbox(t, p, sandbox.ImageSpec{BaseImage: base, WorkDir: "/workspace"})
	if m := usrMounts(t, sb2); m != "" {
		t.Errorf("a base writable by others under /usr/lib got the shared /usr: %q", m)
	}
	if code, out := run(t, sb2, false, "touch /usr/lib/python3/agent-was-here"); code != 0 {
		t.Errorf("the agent cannot write where the image lets it: %d %s", code, out)
	}
	if v := usrVolumes(t, cli, base); len(v) != 1 || !strings.HasSuffix(v[0], "-no") {
		t.Errorf("volumes of a base that cannot share: %v, want its -no marker alone", v)
	}
}

// TestSharedUsrFirstUseAtOnce starts sandboxes of a base image that has
// no volumes yet, all at once, from two providers (two servers on one
// engine): each gets the shared /usr, the base has exactly its five
// volumes (bin, lib and their marker; lib64 and its marker), and the locks
// that let one process make them are gone.
func TestSharedUsrFirstUseAtOnce(t *testing.T) {
	p, cli := newProvider(t)
	p2, _ := newProvider(t)
	ctx := t.Context()
	base := derivedBase(t, cli, "echo first-use > /etc/gymtest-first-use")
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: base, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Prepare(ctx, sandbox.ImageSpec{BaseImage: base, WorkDir: "/workspace"}); err != nil {
		t.Fatal(err)
	}
	const n = 4
	boxes := make([]sandbox.Sandbox, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prov := p
			if i%2 == 1 {
				prov = p2
			}
			boxes[i], errs[i] = prov.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace", ShareUsr: true})
		}()
	}
	wg.Wait()
	for i, sb := range boxes {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer sb.Close(context.Background())
		if m := usrMounts(t, sb); strings.Count(m, "\n") != 3 {
			t.Errorf("sandbox %d: mounts %q", i, m)
		}
		if code, out := run(t, sb, false, "cat /etc/gymtest-first-use && /bin/echo hi"); code != 0 || out != "first-use\nhi\n" {
			t.Errorf("sandbox %d: %d %q", i, code, out)
		}
	}
	if v := usrVolumes(t, cli, base); len(v) != 5 {
		t.Errorf("volumes of the base: %v, want bin, lib, ok, lib64 and lib64-ok", v)
	}
	locks, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", "gymserver-usr-"))})
	if err != nil || len(locks) != 0 {
		t.Errorf("lock containers left: %d %v", len(locks), err)
	}
}

// runToExit starts the created container id and returns its exit code
// once it has exited.
func runToExit(t *testing.T, cli *client.Client, id string) int64 {
	t.Helper()
	waitC, errC := cli.ContainerWait(t.Context(), id, container.WaitConditionNextExit)
	if err := cli.ContainerStart(t.Context(), id, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waitC:
		return r.StatusCode
	case err := <-errC:
		t.Fatal(err)
	}
	return 0
}

// TestUsrVolumesRemade removes a base image's shared /usr volumes while no
// sandbox uses them, as `docker volume prune` does behind a running
// server's back: the provider's next sandbox still has the shared /usr,
// with the programs and Python it needs, because the engine makes the
// volumes again from the sandbox's image.
func TestUsrVolumesRemade(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{SyncRemove: true})
	ctx := t.Context()
	base := derivedBase(t, cli, "echo remade > /etc/gymtest-remade")
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: base, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		sb, err := p.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace", ShareUsr: true})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer sb.Close(context.Background())
		if m := usrMounts(t, sb); strings.Count(m, "\n") != 3 {
			t.Errorf("%s: mounts %q, want /usr/bin, /usr/lib and /usr/lib64", what, m)
		}
		if code, out := run(t, sb, false, `cat /etc/gymtest-remade && /bin/echo hi && python3 -c 'import json; print("py")'`); code != 0 || out != "remade\nhi\npy\n" {
			t.Errorf("%s: exit %d, output %q", what, code, out)
		}
	}
	check("with the volumes made")
	info, err := cli.ImageInspect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	names := usrVolumes(t, cli, info.ID)
	var removed []string
	for _, n := range names {
		if strings.HasSuffix(n, "-bin") || strings.HasSuffix(n, "-lib") || strings.HasSuffix(n, "-lib64") {
			if err := cli.VolumeRemove(ctx, n, false); err != nil {
				t.Fatalf("remove %s: %v", n, err)
			}
			removed = append(removed, n)
		}
	}
	if len(removed) != 3 {
		t.Fatalf("volumes of the base: %v, want a -bin, a -lib and a -lib64", names)
	}
	// Made again by the engine, they carry no label: removed here (no
	// sandbox uses them by then).
	t.Cleanup(func() {
		for _, n := range removed {
			cli.VolumeRemove(context.Background(), n, false)
		}
	})
	check("after the volumes were removed")
}

// TestSharedUsrLib64OnlyAsDirectory checks that a base whose /usr/lib64 is
// a link (onto /usr/lib here) shares /usr/bin and /usr/lib but not it: a
// mount there would follow the link onto /usr/lib. Its programs start, and
// the base's volumes say so (a -no marker for lib64).
func TestSharedUsrLib64OnlyAsDirectory(t *testing.T) {
	p, cli := newProvider(t)
	// One Python process moves the loader's link and makes /usr/lib64 a
	// link: no program is started while the loader's path is broken.
	base := derivedBase(t, cli, `python3 -c "import os; os.rename('/usr/lib64/ld-linux-x86-64.so.2', '/usr/lib/ld-linux-x86-64.so.2'); os.rmdir('/usr/lib64'); os.symlink('lib', '/usr/lib64')"`)
	sb := sharedUsrSandbox(t, p, sandbox.ImageSpec{BaseImage: base, WorkDir: "/workspace"})
	m := usrMounts(t, sb)
	if strings.Count(m, "\n") != 2 || strings.Contains(m, " /usr/lib64 ") {
		t.Errorf("mounts %q, want /usr/bin and /usr/lib alone", m)
	}
	if code, out := run(t, sb, false, `readlink /usr/lib64 && /bin/echo hi && python3 -c 'print("py")'`); code != 0 || out != "lib\nhi\npy\n" {
		t.Errorf("exit %d, output %q", code, out)
	}
	var lib64 []string
	for _, v := range usrVolumes(t, cli, base) {
		if strings.Contains(v, "-lib64") {
			lib64 = append(lib64, v)
		}
	}
	if len(lib64) != 1 || !strings.HasSuffix(lib64[0], "-lib64-no") {
		t.Errorf("lib64 volumes of the base: %v, want its -no marker alone", lib64)
	}
}
