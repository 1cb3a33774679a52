package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/internal/waittest"
)

// cacheTest is a base image of a test's own: the images prepared from it
// inherit its label, which scopes listing and pruning to this test.
type cacheTest struct {
	t     *testing.T
	cli   *client.Client
	tag   string
	label string // "key=value", carried by every image of the test
	base  string
}

// testLabelKey labels the images and containers of the image cache tests.
const testLabelKey = "gymserver.test-imgcache"

// newCacheTest makes the test's base image (the Python image plus a
// label) and removes every image and container with the label when the
// test ends.
func newCacheTest(t *testing.T) *cacheTest {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker")
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	c := &cacheTest{t: t, cli: cli, tag: hex.EncodeToString(b[:])}
	c.label = testLabelKey + "=" + c.tag
	c.base = "gymserver-imgcache-test:" + c.tag
	ctx := t.Context()
	// The base image exists before the cleanup is registered, so it goes
	// last (cleanups run in reverse order).
	t.Cleanup(c.cleanup)
	tmp, err := cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"true"},
		Labels: map[string]string{testLabelKey: c.tag}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), tmp.ID, container.RemoveOptions{Force: true})
	if _, err := cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{Reference: c.base}); err != nil {
		t.Fatal(err)
	}
	return c
}

// cleanup removes the containers, then the images (children first) that
// carry the test's label.
func (c *cacheTest) cleanup() {
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", c.label))
	if list, err := c.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f}); err == nil {
		for _, x := range list {
			_ = c.cli.ContainerRemove(ctx, x.ID, container.RemoveOptions{Force: true})
		}
	}
	list, err := c.cli.ImageList(ctx, image.ListOptions{Filters: f})
	if err != nil {
		c.t.Errorf("cleanup: %v", err)
		return
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Created > list[j].Created })
	for _, img := range list {
		if _, err := c.cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !errdefs.IsNotFound(err) {
			c.t.Errorf("cleanup: remove image %s: %v", img.ID, err)
		}
	}
}

// provider returns a provider whose own pruning only sees this test's
// images; see dockertest.NewWith.
func (c *cacheTest) provider(opts docker.Options) *docker.Provider {
	c.t.Helper()
	opts.ImageCacheLabels = []string{c.label}
	p, _ := dockertest.NewWith(c.t, opts)
	return p
}

// prepare prepares the image whose one file holds content.
func (c *cacheTest) prepare(p *docker.Provider, content string) string {
	c.t.Helper()
	ref, err := p.Prepare(c.t.Context(), sandbox.ImageSpec{BaseImage: c.base, WorkDir: "/workspace",
		Files: []sandbox.File{{Path: "/workspace/f.txt", Data: []byte(c.tag + content), Mode: 0o644}}})
	if err != nil {
		c.t.Fatal(err)
	}
	return ref
}

// use makes a stopped container from ref, which holds the image as a
// running one would. Its owner label, which it would inherit from the
// image, names no provider, so no provider reaps it.
func (c *cacheTest) use(ref string) string {
	c.t.Helper()
	resp, err := c.cli.ContainerCreate(c.t.Context(), &container.Config{Image: ref, Cmd: []string{"true"},
		Labels: map[string]string{testLabelKey: c.tag, sandbox.LabelOwner: "imgcache-test"}}, nil, nil, nil, "")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		_ = c.cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true})
	})
	return resp.ID
}

// exists reports whether the image ref is present.
func (c *cacheTest) exists(ref string) bool {
	c.t.Helper()
	_, err := c.cli.ImageInspect(c.t.Context(), ref)
	if err != nil && !errdefs.IsNotFound(err) {
		c.t.Fatal(err)
	}
	return err == nil
}

// list returns the test's cache images by ref.
func (c *cacheTest) list() map[string]docker.CachedImage {
	c.t.Helper()
	list, err := docker.ListCache(c.t.Context(), c.cli, c.label)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]docker.CachedImage{}
	for _, img := range list {
		out[img.Ref] = img
	}
	return out
}

// prune runs PruneCache on the test's images.
func (c *cacheTest) prune(opts docker.PruneOptions) map[string]docker.Removed {
	c.t.Helper()
	opts.Labels = append(opts.Labels, c.label)
	removed, err := docker.PruneCache(c.t.Context(), c.cli, opts)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]docker.Removed{}
	for _, r := range removed {
		if _, dup := out[r.Ref]; dup {
			c.t.Errorf("%s reported twice", r.Ref)
		}
		out[r.Ref] = r
	}
	return out
}

// TestImageCacheClock checks that a cache hit moves the image's last use
// (the engine's LastTagTime, which re-tagging updates), and the labels and
// listing of prepared images and snapshots.
func TestImageCacheClock(t *testing.T) {
	c := newCacheTest(t)
	ctx := t.Context()
	p := c.provider(docker.Options{})
	ref := c.prepare(p, "clock")
	before, ok := c.list()[ref]
	if !ok {
		t.Fatalf("ListCache does not list %s", ref)
	}
	wantExec, err := docker.ExecutorHash(sandboxtest.ExecutorBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if before.Kind != docker.KindPrepared || before.Executor != wantExec || before.InUse ||
		before.Size <= 0 || before.Size >= before.VirtualSize {
		t.Errorf("listed %+v, want an unused prepared image of executor %s, size between 0 and its virtual size", before, wantExec)
	}
	info, err := c.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if l := info.Config.Labels; l["gymserver.kind"] != "prepared" || l["gymserver.executor"] != wantExec || l["gymserver.prepared"] == "" {
		t.Errorf("labels %v", l)
	}
	// Make sure the clock can tell the two uses apart.
	waittest.Until(t, "the clock to pass the image's last use", 5*time.Second, func() (bool, error) {
		return time.Now().After(before.LastUsed.Add(10 * time.Millisecond)), nil
	})
	if again := c.prepare(p, "clock"); again != ref {
		t.Fatalf("second Prepare returned %s, want the cached %s", again, ref)
	}
	after := c.list()[ref]
	if after.ID != before.ID {
		t.Fatalf("image rebuilt: id %s, was %s", after.ID, before.ID)
	}
	if !after.LastUsed.After(before.LastUsed.Time) {
		t.Errorf("last use %s after a cache hit, was %s: the clock did not move", after.LastUsed, before.LastUsed)
	}
	info2, err := c.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !info2.Metadata.LastTagTime.After(info.Metadata.LastTagTime) {
		t.Errorf("LastTagTime %s after the hit, was %s", info2.Metadata.LastTagTime, info.Metadata.LastTagTime)
	}

	// A sandbox makes the image in use; its snapshot is listed as one,
	// and the prepared image is then the snapshot's parent.
	sb, err := p.Create(ctx, sandbox.Spec{Image: ref, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	snap, err := sb.(sandbox.Committer).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.DropImage(context.Background(), snap)
	list := c.list()
	if img := list[ref]; !img.InUse || len(img.UsedBy) != 1 || !strings.HasPrefix(sb.ID(), img.UsedBy[0]) || len(img.Children) != 1 {
		t.Errorf("prepared image listed as %+v, want in use by %s with one child", img, sb.ID())
	}
	if s, ok := list[snap]; !ok || s.Kind != docker.KindSnapshot || s.Owner != p.Owner() || s.Executor != "" {
		t.Errorf("snapshot listed as %+v (present %v), want kind snapshot, owner %s", s, ok, p.Owner())
	}
	// Everything stays: the prepared image is in use (and the parent of
	// the snapshot); the snapshot is held by the provider.
	r := c.prune(docker.PruneOptions{All: true, DryRun: true, Keep: func(img docker.CachedImage) bool { return img.Ref == snap }})
	if r[ref].Kept == "" || r[snap].Kept != "held by this process" {
		t.Errorf("dry run with all: %+v", r)
	}
}

// oldExecutor returns a copy of the test executor with bytes appended: it
// runs the same, but hashes differently, like an older build.
func oldExecutor(t *testing.T) string {
	t.Helper()
	bin, err := os.ReadFile(sandboxtest.ExecutorBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gymexec-old")
	if err := os.WriteFile(path, append(bin, "old build"...), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNewRemovesStaleExecutorImages prepares two images with an older
// executor, one of them used by a stopped container, and checks that New
// removes the unused one once it is idle long enough, and keeps the used
// one and the current executor's image.
func TestNewRemovesStaleExecutorImages(t *testing.T) {
	c := newCacheTest(t)
	ctx := t.Context()
	old := c.provider(docker.Options{ExecutorBinary: oldExecutor(t)})
	staleFree := c.prepare(old, "stale-free")
	staleUsed := c.prepare(old, "stale-used")
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.use(staleUsed)

	// With the default idle time, a new provider leaves the just-used
	// stale image alone: another process may be about to use it.
	cur := c.provider(docker.Options{})
	if !c.exists(staleFree) || !c.exists(staleUsed) {
		t.Fatal("New removed a stale image used within the default idle time")
	}
	current := c.prepare(cur, "current")
	if err := cur.Close(ctx); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	c.provider(docker.Options{ImageCacheMinIdle: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if c.exists(staleFree) {
		t.Errorf("New kept the unused image %s of an older executor", staleFree)
	}
	if !c.exists(staleUsed) {
		t.Errorf("New removed the image %s that a container uses", staleUsed)
	}
	if !c.exists(current) {
		t.Errorf("New removed the image %s of the current executor", current)
	}
	if !strings.Contains(logs.String(), staleFree) || !strings.Contains(logs.String(), "removed prepared images of older executors") {
		t.Errorf("New did not log the removal of %s:\n%s", staleFree, logs.String())
	}
}

// TestPruneCacheCap checks the caps: least recently used first, never an
// image in use even when over the cap, nothing removed on a dry run, and
// the provider's own cap after a build, which spares its images.
func TestPruneCacheCap(t *testing.T) {
	c := newCacheTest(t)
	ctx := t.Context()
	p := c.provider(docker.Options{})
	i1 := c.prepare(p, "1")
	i2 := c.prepare(p, "2")
	i3 := c.prepare(p, "3")
	// i2 is in use, and (a container's creation counts as a use) the
	// least recently used after hits on i3, then i1.
	c.use(i2)
	c.prepare(p, "3")
	c.prepare(p, "1")
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	list := c.list()
	if !(list[i2].LastUsed.Before(list[i3].LastUsed.Time) && list[i3].LastUsed.Before(list[i1].LastUsed.Time)) {
		t.Fatalf("last uses %s %s %s, want i2 < i3 < i1", list[i2].LastUsed, list[i3].LastUsed, list[i1].LastUsed)
	}
	if !list[i2].InUse || list[i1].InUse || list[i3].InUse {
		t.Fatalf("in use: %v %v %v, want only i2", list[i1].InUse, list[i2].InUse, list[i3].InUse)
	}

	check := func(name string, r map[string]docker.Removed) {
		t.Helper()
		if x, ok := r[i3]; !ok || x.Kept != "" || x.Reason != docker.ReasonOverCap {
			t.Errorf("%s: i3 %+v (reported %v), want removed over cap", name, x, ok)
		}
		if x, ok := r[i2]; !ok || !strings.HasPrefix(x.Kept, "in use by container") {
			t.Errorf("%s: i2 %+v (reported %v), want kept in use", name, x, ok)
		}
		if x, ok := r[i1]; ok {
			t.Errorf("%s: i1, the most recently used, reported: %+v", name, x)
		}
	}
	check("dry run", c.prune(docker.PruneOptions{MaxImages: 2, DryRun: true}))
	for _, ref := range []string{i1, i2, i3} {
		if !c.exists(ref) {
			t.Errorf("dry run removed %s", ref)
		}
	}
	// A byte cap of 1 would take every image it may.
	r := c.prune(docker.PruneOptions{MaxBytes: 1, DryRun: true})
	if r[i1].Kept != "" || r[i3].Kept != "" || r[i2].Kept == "" {
		t.Errorf("dry run with a byte cap: %+v", r)
	}
	// Recent use keeps images too.
	r = c.prune(docker.PruneOptions{MaxImages: 1, MinIdle: time.Hour, DryRun: true})
	if !strings.HasPrefix(r[i3].Kept, "used ") {
		t.Errorf("dry run with MinIdle: %+v", r)
	}

	check("prune", c.prune(docker.PruneOptions{MaxImages: 2}))
	if c.exists(i3) || !c.exists(i1) || !c.exists(i2) {
		t.Errorf("after pruning to 2 images: i1 %v i2 %v i3 %v, want i1 and i2", c.exists(i1), c.exists(i2), c.exists(i3))
	}

	// A provider capped at one image removes i1 after its build, keeps
	// i2 (in use) and the image it built and holds.
	capped := c.provider(docker.Options{ImageCacheMaxImages: 1, ImageCacheMinIdle: -1})
	j1 := c.prepare(capped, "j1")
	if c.exists(i1) || !c.exists(i2) || !c.exists(j1) {
		t.Errorf("after a capped build: i1 %v i2 %v j1 %v, want i2 and j1", c.exists(i1), c.exists(i2), c.exists(j1))
	}
	j2 := c.prepare(capped, "j2")
	if !c.exists(j1) || !c.exists(j2) {
		t.Errorf("the capped provider removed an image it holds: j1 %v j2 %v", c.exists(j1), c.exists(j2))
	}
}
