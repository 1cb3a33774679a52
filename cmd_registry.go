package main

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/fleet"
	"github.com/gymserver/gymserver/gym"
)

// pythonLevels are the log level names of Python's logging module, which
// the seed's --log-level takes, as slog levels.
var pythonLevels = map[string]slog.Level{
	"WARNING":  slog.LevelWarn,
	"CRITICAL": slog.LevelError + 4,
	"FATAL":    slog.LevelError + 4,
}

// newLogger returns a text logger on w at the named level: slog's names
// (DEBUG, INFO, WARN, ERROR, also "WARN+2") or Python's (WARNING,
// CRITICAL), in any case.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	l, ok := pythonLevels[strings.ToUpper(level)]
	if !ok {
		if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
			return nil, fmt.Errorf("log level %q: want DEBUG, INFO, WARN (or WARNING), ERROR or CRITICAL", level)
		}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// newProvider connects to the Docker Engine and returns the sandbox
// provider, with this binary as the in-sandbox executor and the
// registry-free base image builder as the fallback for images that cannot
// be pulled.
func newProvider(ctx context.Context, logger *slog.Logger, opts loadOptions) (*docker.Provider, error) {
	o, err := dockerOptions(logger, opts)
	if err != nil {
		return nil, err
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	o.Client = cli
	build := baseBuilder(logger)
	o.BuildBase = func(ctx context.Context, ref string) error { return build(ctx, cli, ref) }
	p, err := docker.New(ctx, o)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return p, nil
}

// dockerOptions returns the options of a Docker provider for opts, with
// this binary as the executor and the janitor; the caller sets Client and
// BuildBase.
func dockerOptions(logger *slog.Logger, opts loadOptions) (docker.Options, error) {
	self, err := os.Executable()
	if err != nil {
		return docker.Options{}, fmt.Errorf("find own executable: %w", err)
	}
	if !isStatic(self) {
		logger.Warn("this binary is dynamically linked; sandboxes need a matching libc. Build with CGO_ENABLED=0 for a static binary", "path", self)
	}
	var janitor []string
	if opts.Janitor {
		janitor = []string{self, janitorCommand}
		if opts.JanitorLog != "" {
			abs, err := filepath.Abs(opts.JanitorLog)
			if err != nil {
				return docker.Options{}, fmt.Errorf("janitor log: %w", err)
			}
			janitor = append(janitor, "--log", abs)
		}
	}
	return docker.Options{
		Janitor:        janitor,
		ExecutorBinary: self,
		ExecutorArgs:   []string{executorCommand},
		Logger:         logger,
		WarmPool:       opts.WarmPool,
		CreatedPool:    opts.CreatedPool,
		Reuse:          opts.Reuse,
		FloatCPUs:      opts.FloatCPUs,
		OrphanAfter:    opts.OrphanAfter,
		// Caps on the image cache; see docker.Options.
		ImageCacheMaxImages: opts.Caches.maxImages,
		ImageCacheMaxBytes:  int64(opts.Caches.maxBytes),
	}, nil
}

// baseBuilder returns the builder of the built-in base images, for
// images that cannot be pulled.
func baseBuilder(logger *slog.Logger) func(ctx context.Context, cli *client.Client, ref string) error {
	return func(ctx context.Context, cli *client.Client, ref string) error {
		if !baseimage.Known(ref) {
			return fmt.Errorf("image %s cannot be pulled and is not a built-in base image (%s)", ref, strings.Join(baseimage.Refs(), ", "))
		}
		return baseimage.Build(ctx, cli, ref, logWriter{logger})
	}
}

// loadOptions tune the Docker provider behind the environments.
type loadOptions struct {
	// WarmPool is the number of started sandboxes kept ready per
	// environment (0: none); see docker.Options.WarmPool.
	WarmPool int
	// CreatedPool is the number of containers created but not started
	// kept per environment (0: none); see docker.Options.CreatedPool.
	CreatedPool int
	// Reuse is the number of closed sandboxes kept, recycled, in all (0:
	// none); see docker.Options.Reuse.
	Reuse int
	// FloatCPUs leaves sandboxes free to run on any core instead of
	// pinning each to the least used ones; see docker.Options.FloatCPUs.
	FloatCPUs bool
	// OrphanAfter is how long a sandbox outlives the stream of its
	// executor (0: docker.DefaultOrphanAfter, negative: forever); see
	// docker.Options.OrphanAfter.
	OrphanAfter time.Duration
	// Janitor starts a janitor process that removes the provider's
	// containers and snapshot images once this process is gone, even by
	// SIGKILL; see docker.Options.Janitor.
	Janitor bool
	// JanitorLog is the file the janitor appends its log to (empty:
	// none).
	JanitorLog string
	// Caches caps the image cache (--image-cache-max-images and
	// --image-cache-max-bytes).
	Caches cacheCapFlags
	// SnapshotArchiveMax is envs.Options.SnapshotArchiveMax.
	SnapshotArchiveMax int64
	// Engines, when they name any engine, put the environments on a
	// fleet of those engines instead of the engine of $DOCKER_HOST.
	Engines engineFlags
	// OnFleet, if set, is called with the fleet when one is made.
	OnFleet func(*fleet.Fleet)
}

// orphanAfterOption turns the --orphan-after flag, where 0 means never,
// into loadOptions.OrphanAfter.
func orphanAfterOption(flag time.Duration) time.Duration {
	if flag <= 0 {
		return -1
	}
	return flag
}

// loadRegistry loads the config at path, logs its warnings, and returns
// its environments on the Docker provider (see configRegistry).
func loadRegistry(ctx context.Context, path string, logger *slog.Logger, opts loadOptions) (*gym.Registry, func(context.Context) error, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, err
	}
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	return configRegistry(ctx, cfg, logger, opts)
}

// configRegistry returns the environments of cfg, a config the caller has
// loaded (once: a command that reads the file twice could see two different
// configs and would print its warnings twice), on the Docker provider, and
// a function that closes the provider (removing every sandbox it still
// owns).
func configRegistry(ctx context.Context, cfg *config.Config, logger *slog.Logger, opts loadOptions) (*gym.Registry, func(context.Context) error, error) {
	p, err := newSandboxProvider(ctx, logger, opts)
	if err != nil {
		return nil, nil, err
	}
	reg, err := envs.NewRegistry(ctx, cfg, envs.Options{Provider: p, Logger: logger, SnapshotArchiveMax: opts.SnapshotArchiveMax})
	if err != nil {
		p.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	return reg, p.Close, nil
}

// isStatic reports whether the ELF file at path has no dynamic loader.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// logWriter turns lines written to it into log records.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.log.Info(line)
		}
	}
	return len(p), nil
}
