package docker_test

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// nonce makes the test's build contexts, and so its images, its own.
func nonce(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// writeFiles writes name → content under a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// removeImageAtEnd removes ref when the test ends.
func removeImageAtEnd(t *testing.T, cli *client.Client, ref string) {
	t.Cleanup(func() {
		if _, err := cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("remove %s: %v", ref, err)
		}
	})
}

// buildCounter is a log handler that counts the builds a provider makes
// (its "built image" records): a cache hit re-tags the image, so the
// Engine's tag events cannot tell a hit from a build.
type buildCounter struct {
	mu sync.Mutex
	n  int
}

func (c *buildCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *buildCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *buildCounter) WithGroup(string) slog.Handler            { return c }
func (c *buildCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "built image" {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return nil
}

func (c *buildCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// countingProvider returns a provider whose builds are counted.
func countingProvider(t *testing.T) (*docker.Provider, *client.Client, *buildCounter) {
	c := &buildCounter{}
	p, cli := dockertest.NewWith(t, docker.Options{Logger: slog.New(c)})
	return p, cli, c
}

// readImageFile returns the content of path in image ref, from a created
// (never started) container.
func readImageFile(t *testing.T, cli *client.Client, ref, path string) string {
	t.Helper()
	ctx := t.Context()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: ref, Cmd: []string{"true"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	rc, _, err := cli.CopyFromContainer(ctx, c.ID, path)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// leftoverContainers lists the containers whose command mentions marker:
// a build's intermediate containers run its RUN lines.
func leftoverContainers(ctx context.Context, cli *client.Client, marker string) ([]string, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list {
		if strings.Contains(c.Command, marker) {
			out = append(out, c.ID[:12]+" "+c.Command)
		}
	}
	return out, nil
}

// checkNoLeftovers fails the test if a container mentioning marker is
// still there at the deadline; removal after a cancelled build is
// asynchronous.
func checkNoLeftovers(t *testing.T, cli *client.Client, marker string, within time.Duration) {
	t.Helper()
	waittest.Until(t, "the intermediate containers to go", within, func() (bool, error) {
		left, err := leftoverContainers(t.Context(), cli, marker)
		return len(left) == 0, err
	})
}

func TestBuildCache(t *testing.T) {
	p, cli, builds := countingProvider(t)
	ctx := t.Context()
	n := nonce(t)
	// Two stages, the second FROM naming the first: a stage name is not
	// an image to pull.
	dockerfile := "FROM " + baseimage.Python + " AS base\n" +
		"COPY hello.txt /opt/hello.txt\n" +
		"FROM base\n" +
		"RUN cat /opt/hello.txt /opt/hello.txt > /opt/copy.txt # " + n + "\n"
	dir := writeFiles(t, map[string]string{"Dockerfile": dockerfile, "hello.txt": "hello " + n + "\n"})
	spec := docker.BuildSpec{ContextDir: dir, Name: "task-" + n}

	// Two concurrent calls: one builds, the other waits for it.
	var wg sync.WaitGroup
	refs := make([]string, 2)
	errs := make([]error, 2)
	for i := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refs[i], errs[i] = p.Build(ctx, spec)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ref := refs[0]
	removeImageAtEnd(t, cli, ref)
	if refs[1] != ref || !strings.HasPrefix(ref, docker.BuildRepo+":") || len(ref) != len(docker.BuildRepo)+1+24 {
		t.Fatalf("refs %q", refs)
	}
	checkNoLeftovers(t, cli, n, 0)

	info, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	l := info.Config.Labels
	if l["gymserver.kind"] != docker.KindBuild || l["gymserver.task"] != spec.Name ||
		len(l["gymserver.build"]) != 64 || !strings.HasSuffix(ref, ":"+l["gymserver.build"][:24]) {
		t.Errorf("labels %v of %s", l, ref)
	}
	if got, want := readImageFile(t, cli, ref, "/opt/copy.txt"), strings.Repeat("hello "+n+"\n", 2); got != want {
		t.Errorf("/opt/copy.txt = %q, want %q", got, want)
	}

	// The same content again: no build, not even a cached one.
	again, err := p.Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again != ref {
		t.Errorf("second build %s, first %s", again, ref)
	}
	if n := builds.count(); n != 1 {
		t.Errorf("%d builds of %s for two calls with the same content (one concurrent), want 1", n, ref)
	}

	// A changed context file is a new image.
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("changed "+n+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err := p.Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	removeImageAtEnd(t, cli, changed)
	if changed == ref {
		t.Fatalf("changed context gave the same image %s", ref)
	}
	if got, want := readImageFile(t, cli, changed, "/opt/copy.txt"), strings.Repeat("changed "+n+"\n", 2); got != want {
		t.Errorf("/opt/copy.txt = %q, want %q", got, want)
	}
	// So is a changed mode.
	if err := os.Chmod(filepath.Join(dir, "hello.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	moded, err := p.Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	removeImageAtEnd(t, cli, moded)
	if moded == changed {
		t.Errorf("changed mode gave the same image %s", moded)
	}
	checkNoLeftovers(t, cli, n, 0)
}

func TestBuildFailure(t *testing.T) {
	p, cli := newProvider(t)
	n := nonce(t)
	name := "broken-" + n
	dir := writeFiles(t, map[string]string{
		"docker/Dockerfile.task": "FROM " + baseimage.Python + "\n" +
			"RUN echo preparing-" + n + " && echo bad-thing-" + n + " >&2 && exit 3\n",
	})
	_, err := p.Build(t.Context(), docker.BuildSpec{ContextDir: dir, Dockerfile: "docker/Dockerfile.task", Name: name})
	if err == nil {
		t.Fatal("a failing RUN built")
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{name, "Step 2/", "preparing-" + n, "bad-thing-" + n, "non-zero code: 3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if c := gym.ClassOf(err); c != gym.ClassInvalidArgument {
		t.Errorf("class %s, want %s: %v", c, gym.ClassInvalidArgument, err)
	}
	imgs, err := cli.ImageList(t.Context(), image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "gymserver.task="+name))})
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 0 {
		t.Errorf("failed build left %d images", len(imgs))
	}
	checkNoLeftovers(t, cli, n, 0)
}

func TestBuildTimeout(t *testing.T) {
	p, cli := newProvider(t)
	n := nonce(t)
	dir := writeFiles(t, map[string]string{"Dockerfile": "FROM " + baseimage.Python + "\nRUN sleep 60 # " + n + "\n"})
	start := time.Now()
	_, err := p.Build(t.Context(), docker.BuildSpec{ContextDir: dir, Name: "slow-" + n, Timeout: 3 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "timed out") || gym.ClassOf(err) != gym.ClassSandbox {
		t.Fatalf("got %v (class %s), want a sandbox_error timeout", err, gym.ClassOf(err))
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("build returned after %s", d)
	}
	checkNoLeftovers(t, cli, n, 60*time.Second)
}

func TestBuildBadSpec(t *testing.T) {
	p, _ := newProvider(t)
	dir := writeFiles(t, map[string]string{"Dockerfile": "FROM " + baseimage.Python + "\n", "sub/x": "x"})
	for _, tc := range []struct {
		name string
		spec docker.BuildSpec
		want string
	}{
		{"no_name", docker.BuildSpec{ContextDir: dir}, "no task name"},
		{"no_context", docker.BuildSpec{Name: "t"}, "no context directory"},
		{"missing_context", docker.BuildSpec{ContextDir: filepath.Join(dir, "nope"), Name: "t"}, "no such file"},
		{"outside", docker.BuildSpec{ContextDir: filepath.Join(dir, "sub"), Dockerfile: "../Dockerfile", Name: "t"}, "not inside the context"},
		{"missing_dockerfile", docker.BuildSpec{ContextDir: filepath.Join(dir, "sub"), Name: "t"}, "no such file"},
		{"dockerfile_is_dir", docker.BuildSpec{ContextDir: dir, Dockerfile: "sub", Name: "t"}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Build(t.Context(), tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) || gym.ClassOf(err) != gym.ClassInvalidArgument {
				t.Fatalf("got %v (class %s), want an invalid_argument error mentioning %q", err, gym.ClassOf(err), tc.want)
			}
		})
	}
}

// TestBuildDockerignore checks that .dockerignore shapes both the context
// sent and the cache key.
func TestBuildDockerignore(t *testing.T) {
	p, cli, builds := countingProvider(t)
	ctx := t.Context()
	n := nonce(t)
	dir := writeFiles(t, map[string]string{
		"Dockerfile":    "FROM " + baseimage.Python + "\nCOPY . /ctx/\n",
		".dockerignore": "# comment\nsecret\n*.log\n!keep.log\n",
		"app.txt":       n,
		"keep.log":      "kept",
		"a.log":         "dropped",
		"secret/key":    "hidden",
	})
	spec := docker.BuildSpec{ContextDir: dir, Name: "ignore-" + n}
	ref, err := p.Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	removeImageAtEnd(t, cli, ref)
	if got := readImageFile(t, cli, ref, "/ctx/app.txt"); got != n {
		t.Errorf("/ctx/app.txt = %q", got)
	}
	if got := readImageFile(t, cli, ref, "/ctx/keep.log"); got != "kept" {
		t.Errorf("/ctx/keep.log = %q", got)
	}
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: ref, Cmd: []string{"true"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	for _, path := range []string{"/ctx/secret/key", "/ctx/secret", "/ctx/a.log"} {
		if _, err := cli.ContainerStatPath(ctx, c.ID, path); !errdefs.IsNotFound(err) {
			t.Errorf("stat %s: %v; want not found, .dockerignore excludes it", path, err)
		}
	}

	// An ignored file does not change the key; a kept one does.
	if err := os.WriteFile(filepath.Join(dir, "secret/key"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := builds.count()
	same, err := p.Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if same != ref || builds.count() != before {
		t.Errorf("changing an ignored file rebuilt: %s, first %s", same, ref)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep.log"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := p.Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	removeImageAtEnd(t, cli, other)
	if other == ref {
		t.Errorf("changing a kept file gave the same image %s", ref)
	}
}
