// Package dockertest gives tests a sandbox provider on the local Docker
// Engine, with the executor built from this source tree, and checks that
// the tests leave no container behind.
package dockertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
)

// NoPruneLabel is a label no image carries: the default
// docker.Options.ImageCacheLabels of the providers made here, so that their
// pruning of the image cache touches nothing; tests of the cache set
// their own.
const NoPruneLabel = "gymserver.dockertest-prune=none"

// open connects to the Engine and makes a provider with opts, whose
// executor (unless set) is the static binary sandboxtest builds; missing
// base images are built locally, and the image cache is not pruned unless
// opts.ImageCacheLabels says which images to prune.
func open(t testing.TB, opts docker.Options) (*docker.Provider, *client.Client, error) {
	if opts.ExecutorBinary == "" {
		opts.ExecutorBinary = sandboxtest.ExecutorBinary(t)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, nil, err
	}
	if opts.Client == nil {
		opts.Client = cli
	}
	if opts.ImageCacheLabels == nil {
		// Tests of other packages may share the engine: a test provider
		// prunes only the images its test marks for it.
		opts.ImageCacheLabels = []string{NoPruneLabel}
	}
	if opts.BuildBase == nil {
		opts.BuildBase = func(ctx context.Context, ref string) error {
			return baseimage.Build(ctx, cli, ref, os.Stderr)
		}
	}
	p, err := docker.New(context.Background(), opts)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return p, cli, nil
}

// Leftovers counts the containers labelled with owner.
func Leftovers(ctx context.Context, cli *client.Client, owner string) (int, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelOwner+"="+owner))})
	return len(list), err
}

// closeAndCheck closes p and reports an error if a container of its owner
// remains afterwards.
func closeAndCheck(p *docker.Provider, cli *client.Client) error {
	ctx := context.Background()
	if err := p.Close(ctx); err != nil {
		return fmt.Errorf("close provider: %w", err)
	}
	n, err := Leftovers(ctx, cli, p.Owner())
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%d containers left behind by owner %s", n, p.Owner())
	}
	// Prepared images are a cache shared by every provider; snapshots
	// belong to their provider.
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", "gymserver.snapshot"), filters.Arg("label", sandbox.LabelOwner+"="+p.Owner()))})
	if err != nil {
		return fmt.Errorf("list images: %w", err)
	}
	if len(imgs) > 0 {
		return fmt.Errorf("%d snapshot images left behind by owner %s", len(imgs), p.Owner())
	}
	return nil
}

// New returns a provider of the test's own. It is closed when the test
// ends, and the test fails if a container of the provider remains. Close
// may also be called earlier; it is idempotent.
func New(t testing.TB, logger *slog.Logger) (*docker.Provider, *client.Client) {
	t.Helper()
	return NewWith(t, docker.Options{Logger: logger})
}

// NewWith is New with options (e.g. a warm pool); the executor, client and
// base-image builder are filled in when unset. The client returned is a
// plain one of the test's own, also when opts.Client is set.
func NewWith(t testing.TB, opts docker.Options) (*docker.Provider, *client.Client) {
	t.Helper()
	p, cli, err := open(t, opts)
	if err != nil {
		t.Fatalf("docker provider: %v", err)
	}
	t.Cleanup(func() {
		if err := closeAndCheck(p, cli); err != nil {
			t.Error(err)
		}
	})
	return p, cli
}

// Shared is one provider for all the tests of a package: made on first
// use, closed by Main after the last test.
type Shared struct {
	once sync.Once
	p    *docker.Provider
	cli  *client.Client
	err  error
}

// Provider returns the shared provider, making it on first use. With
// -short it skips the test: Docker tests are not short.
func (s *Shared) Provider(t testing.TB) *docker.Provider {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker; skipped with -short")
	}
	s.once.Do(func() { s.p, s.cli, s.err = open(t, docker.Options{}) })
	if s.err != nil {
		t.Fatalf("docker provider: %v", s.err)
	}
	return s.p
}

// Client returns the Docker client of the shared provider; call Provider
// first.
func (s *Shared) Client() *client.Client { return s.cli }

// Main runs the package's tests, then closes the shared provider and
// fails the run if it left a container behind. Use it as
// `func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }`.
func (s *Shared) Main(m *testing.M) int {
	code := m.Run()
	if s.p != nil {
		if err := closeAndCheck(s.p, s.cli); err != nil {
			fmt.Fprintln(os.Stderr, "dockertest:", err)
			code = 1
		}
	}
	return code
}
