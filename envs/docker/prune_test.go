package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
)

// fileImage imports into cli's engine an image that holds one empty file,
// name, and returns its id.
func fileImage(t *testing.T, cli *client.Client, name string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ref := "gymserver-test-prune:" + name
	rc, err := cli.ImageImport(t.Context(), image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	info, err := cli.ImageInspect(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// TestPruneVolumes checks what PruneUsrVolumes and PruneExecutorVolumes
// remove: with no minimum age, the /usr volumes of a base image that is
// gone and the executor volumes of other builds that no container uses,
// markers included, found by label or, for those the engine made again
// without one, by name; with VolumeMinAge, none of these new ones.
//
// It runs on an engine of its own: on the shared one, a prune with no
// minimum age would also remove the volumes that tests of other packages,
// run at the same time, have just made and not yet mounted.
func TestPruneVolumes(t *testing.T) {
	cli := dockertest.StartEngine(t, "prune").Client()
	ctx := t.Context()
	short := func(id string) string { return strings.TrimPrefix(id, "sha256:")[:12] }
	build := func() string {
		sum := sha256.Sum256([]byte(rand.Text()))
		return hex.EncodeToString(sum[:])
	}
	keptID, goneID := fileImage(t, cli, "kept"), fileImage(t, cli, "gone")
	kept, gone := short(keptID), short(goneID)
	keepHash, staleHash, inUseHash := build(), build(), build()
	keep, stale, inUse, staleRemade := keepHash[:12], staleHash[:12], inUseHash[:12], build()[:12]
	usrOf := func(id string) map[string]string { return map[string]string{"gymserver.usr-of": id} }
	execOf := func(hash string) map[string]string { return map[string]string{"gymserver.executor-of": hash} }
	vols := []struct {
		name   string
		labels map[string]string
		stays  bool
	}{
		{"gymserver-usr-" + kept + "-bin", usrOf(keptID), true},
		{"gymserver-usr-" + kept + "-lib", nil, true}, // made again by the engine
		{"gymserver-usr-" + kept + "-ok", usrOf(keptID), true},
		{"gymserver-usr-" + gone + "-bin", usrOf(goneID), false},
		{"gymserver-usr-" + gone + "-lib", nil, false},
		{"gymserver-usr-" + gone + "-ok", usrOf(goneID), false},
		{"gymserver-usr-" + gone + "-other", nil, true}, // not a name of ours
		{"gymserver-exec-" + keep, nil, true},
		{"gymserver-exec-" + keep + "-ok", execOf(keepHash), true},
		{"gymserver-exec-" + stale, execOf(staleHash), false},
		{"gymserver-exec-" + stale + "-ok", execOf(staleHash), false},
		{"gymserver-exec-" + stale + "-other", nil, true},
		{"gymserver-exec-" + inUse, execOf(inUseHash), true},
		{"gymserver-exec-" + inUse + "-ok", execOf(inUseHash), true},
		{"gymserver-exec-" + staleRemade, nil, false},
	}
	for _, v := range vols {
		if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: v.name, Labels: v.labels}); err != nil {
			t.Fatal(err)
		}
	}
	user, err := cli.ContainerCreate(ctx, &container.Config{Image: "gymserver-test-prune:kept", Cmd: []string{"/kept"}},
		&container.HostConfig{Binds: []string{"gymserver-exec-" + inUse + ":/v:ro"}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), user.ID, container.RemoveOptions{Force: true})
	if _, err := cli.ImageRemove(ctx, "gymserver-test-prune:gone", image.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	prune := func(age time.Duration) []string {
		t.Helper()
		usr, err := docker.PruneUsrVolumes(ctx, cli, age)
		if err != nil {
			t.Fatal(err)
		}
		exec, err := docker.PruneExecutorVolumes(ctx, cli, keepHash, age)
		if err != nil {
			t.Fatal(err)
		}
		return append(usr, exec...)
	}

	if removed := prune(docker.VolumeMinAge); len(removed) != 0 {
		t.Errorf("a prune of volumes older than VolumeMinAge removed new ones: %v", removed)
	}
	removed := prune(0)
	var goes int
	for _, v := range vols {
		if !v.stays {
			goes++
		}
		_, err := cli.VolumeInspect(ctx, v.name)
		if err != nil && !errdefs.IsNotFound(err) {
			t.Fatal(err)
		}
		if there := err == nil; there != v.stays || slices.Contains(removed, v.name) == v.stays {
			t.Errorf("%s (labels %v): there %v, reported removed %v; want it to stay: %v", v.name, v.labels, there, slices.Contains(removed, v.name), v.stays)
		}
	}
	if len(removed) != goes {
		t.Errorf("removed %v, want the %d that go", removed, goes)
	}
}
