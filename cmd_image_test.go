package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// TestImageCommands runs `gymserver image ls` and `gymserver image prune`
// on prepared images of this test alone (crafted with the labels Prepare
// sets): one of another executor, one of another executor that a stopped
// container uses, and one of the binary under test.
func TestImageCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := validateBinary(t)
	cli := dockerClient(t)
	ctx := t.Context()
	current, err := docker.ExecutorHash(bin)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	testLabel := "gymserver.test-image-cmd=" + tag
	t.Cleanup(func() {
		ctx := context.Background()
		f := filters.NewArgs(filters.Arg("label", testLabel))
		if list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f}); err == nil {
			for _, c := range list {
				_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
		if list, err := cli.ImageList(ctx, image.ListOptions{Filters: f}); err == nil {
			for _, img := range list {
				_, _ = cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	mkPrepared := func(name, executor string) string {
		t.Helper()
		tmp, err := cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"true"}}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		defer cli.ContainerRemove(context.Background(), tmp.ID, container.RemoveOptions{Force: true})
		ref := docker.PreparedRepo + ":test-" + tag + "-" + name
		_, err = cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{Reference: ref, Config: &container.Config{Labels: map[string]string{
			"gymserver.prepared": name, "gymserver.kind": docker.KindPrepared, "gymserver.executor": executor,
			"gymserver.test-image-cmd": tag,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	stale := mkPrepared("stale", "0ld")
	used := mkPrepared("used", "0ld")
	cur := mkPrepared("current", current)
	user, err := cli.ContainerCreate(ctx, &container.Config{Image: used, Cmd: []string{"true"},
		Labels: map[string]string{"gymserver.test-image-cmd": tag, sandbox.LabelOwner: "image-cmd-test"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}

	gs := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gymserver %v: %v\n%s", args, err, stderr.String())
		}
		return string(out)
	}
	exists := func(ref string) bool {
		t.Helper()
		_, err := cli.ImageInspect(ctx, ref)
		if err != nil && !errdefs.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	prune := func(args ...string) pruneOutput {
		t.Helper()
		out := gs(append([]string{"image", "prune", "--json", "--label", testLabel}, args...)...)
		var r pruneOutput
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("prune %v output %q: %v", args, out, err)
		}
		return r
	}
	refs := func(list []docker.Removed) []string {
		var out []string
		for _, r := range list {
			out = append(out, r.Ref+" "+r.Reason)
		}
		sort.Strings(out)
		return out
	}

	var list []docker.CachedImage
	if err := json.Unmarshal([]byte(gs("image", "ls", "--json", "--label", testLabel)), &list); err != nil {
		t.Fatal(err)
	}
	byRef := map[string]docker.CachedImage{}
	for _, img := range list {
		byRef[img.Ref] = img
	}
	if len(list) != 3 || byRef[stale].Executor != "0ld" || byRef[cur].Executor != current ||
		!byRef[used].InUse || !strings.HasPrefix(user.ID, byRef[used].UsedBy[0]) || byRef[stale].InUse {
		t.Fatalf("image ls --json: %+v", list)
	}
	table := gs("image", "ls", "--label", testLabel)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "REF KIND SIZE LAST-USED IN-USE" {
		t.Fatalf("image ls table:\n%s", table)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if f[0] == used && f[len(f)-1] != user.ID[:12] || f[0] != used && f[len(f)-1] != "no" {
			t.Errorf("image ls row %q: wrong IN-USE", l)
		}
	}

	// The images were just made: the default --min-idle keeps them all.
	if r := prune(); len(r.Removed) != 0 || len(r.Kept) != 2 {
		t.Fatalf("prune with the default idle time: %+v", r)
	}
	dry := prune("--dry-run", "--min-idle", "0")
	if !dry.DryRun || strings.Join(refs(dry.Removed), ",") != stale+" stale executor" ||
		len(dry.Kept) != 1 || dry.Kept[0].Ref != used || !strings.HasPrefix(dry.Kept[0].Kept, "in use by container") {
		t.Fatalf("prune --dry-run: %+v", dry)
	}
	if !exists(stale) || !exists(used) || !exists(cur) {
		t.Fatal("the dry run removed an image")
	}
	// A shared executor volume of another build, new and unused: a prune
	// narrowed by --label leaves every volume (none has the label), even
	// with --min-idle 0. Without --label it would go, and with it, volumes
	// that tests of other packages run at the same time have just made.
	var vb [6]byte
	_, _ = rand.Read(vb[:])
	vol := "gymserver-exec-" + hex.EncodeToString(vb[:])
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol}); err != nil {
		t.Fatal(err)
	}
	defer cli.VolumeRemove(context.Background(), vol, true)
	r := prune("--min-idle", "0")
	if strings.Join(refs(r.Removed), ",") != stale+" stale executor" || exists(stale) || !exists(used) || !exists(cur) {
		t.Fatalf("prune: %+v; stale present %v, used %v, current %v", r, exists(stale), exists(used), exists(cur))
	}
	if _, err := cli.VolumeInspect(ctx, vol); err != nil || len(r.Volumes) != 0 {
		t.Errorf("prune --label: removed volumes %v; the other build's volume: %v, want it kept", r.Volumes, err)
	}
	// A cap of one image removes the current one, as the one in use must
	// stay.
	r = prune("--min-idle", "0", "--max-images", "1")
	if strings.Join(refs(r.Removed), ",") != cur+" "+docker.ReasonOverCap || exists(cur) || !exists(used) {
		t.Fatalf("prune --max-images 1: %+v", r)
	}
	if r := prune("--min-idle", "0", "--all"); len(r.Removed) != 0 || len(r.Kept) != 1 || !exists(used) {
		t.Fatalf("prune --all with the image in use: %+v", r)
	}
	if err := cli.ContainerRemove(ctx, user.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if r := prune("--min-idle", "0", "--all"); strings.Join(refs(r.Removed), ",") != used+" all" || exists(used) {
		t.Fatalf("prune --all: %+v", r)
	}

	// image build still works (the base image exists, so it only checks).
	if out := gs("image", "build", baseimage.Python); strings.TrimSpace(out) != baseimage.Python {
		t.Errorf("image build printed %q", out)
	}
}
