package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/fleet"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

// runServe serves the environments of a config over WebSocket until ctx
// ends (SIGINT/SIGTERM), then drains and returns 0.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "environments config (JSON); required")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address; a non-loopback address needs --token")
	token := fs.String("token", os.Getenv("GYMSERVER_TOKEN"), "bearer token clients must send (default $GYMSERVER_TOKEN)")
	maxFrame := fs.Int64("max-frame-bytes", wire.DefaultMaxFrameBytes, "largest request frame in bytes")
	maxSessions := fs.Int("max-sessions", server.DefaultMaxSessions, "most open sessions on the server")
	maxConnSessions := fs.Int("max-sessions-per-conn", server.DefaultMaxSessionsPerConn, "most open sessions on one connection")
	maxInflight := fs.Int("max-inflight", server.DefaultMaxInflightPerConn, "most requests in flight on one connection")
	maxResets := fs.Int("max-resets", server.DefaultMaxConcurrentResets, "most resets (container starts) running at once")
	maxQueued := fs.Int64("max-queued-bytes", server.DefaultMaxQueuedBytesPerConn, "most bytes of unanswered requests (decoded size) one connection holds; at least --max-frame-bytes")
	maxConnSnapshots := fs.Int("max-snapshots-per-conn", server.DefaultMaxSnapshotsPerConn, "most snapshots one connection holds (each an archive in memory or an image, until dropped)")
	snapshotArchiveMax := fs.Int64("snapshot-archive-max", envs.DefaultSnapshotArchiveMax, "largest archive in bytes a snapshot keeps of what the agent can write; past it, or with -1, snapshots commit the sandbox to an image")
	resetWait := fs.Duration("reset-wait", server.DefaultResetWait, "how long a reset waits for a start slot")
	idleTTL := fs.Duration("idle-ttl", server.DefaultIdleSessionTTL, "close sessions without requests for this long")
	pingInterval := fs.Duration("ping-interval", server.DefaultPingInterval, "WebSocket heartbeat period")
	warmPool := fs.Int("warm-pool", 0, "started sandboxes kept ready per environment, so resets return at once")
	floatCPUs := fs.Bool("float-cpus", false, "let sandboxes run on any core instead of pinning each to the cores the fewest sandboxes use, which keeps a busy host fair between sessions")
	reuse := fs.Int("reuse", 0, "closed sandboxes kept, recycled (processes killed, what the agent can write put back and checked), to serve later resets of their environment without a container start; at most this many in all, each for at most a minute")
	createdPool := fs.Int("created-pool", 0, "containers created but not started kept per environment, so a start the warm pool does not serve skips the create")
	var caches cacheCapFlags
	caches.register(fs)
	var engines engineFlags
	engines.register(fs)
	orphanAfter := fs.Duration("orphan-after", docker.DefaultOrphanAfter, "an image-preparing container whose executor stream is gone (e.g. this server was killed) removes itself after this long (a sandbox goes at once); 0: never")
	noJanitor := fs.Bool("no-janitor", false, "start no janitor process; without it, snapshot images of a killed server stay until the next start or gymserver reap")
	janitorLog := fs.String("janitor-log", "", "file the janitor appends what it removed to (default: none)")
	drainTimeout := fs.Duration("drain-timeout", server.DefaultDrainTimeout, "on SIGTERM, how long in-flight requests may finish")
	logLevel := fs.String("log-level", "INFO", "log level: DEBUG, INFO, WARN (or WARNING), ERROR, CRITICAL")
	ui := fs.Bool("ui", false, "serve a read-only live dashboard under /ui/ (with --token: open /ui/?token=TOKEN once; the browser keeps a cookie)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver serve --config CONFIG.json [--addr 127.0.0.1:8080] [--token T] [flags]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if *configPath == "" || fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "gymserver serve:", err)
		return 2
	}
	// Check the address before loading anything: refusing an open,
	// unauthenticated server is a usage error.
	ln, err := server.Listen(*addr, *token)
	if err != nil {
		fmt.Fprintln(stderr, "gymserver serve:", err)
		return 2
	}
	defer ln.Close()

	if *warmPool < 0 {
		fmt.Fprintln(stderr, "gymserver serve: --warm-pool must not be negative")
		return 2
	}
	if *createdPool < 0 {
		fmt.Fprintln(stderr, "gymserver serve: --created-pool must not be negative")
		return 2
	}
	if *reuse < 0 {
		fmt.Fprintln(stderr, "gymserver serve: --reuse must not be negative")
		return 2
	}
	if err := checkEngines(&engines); err != nil {
		fmt.Fprintln(stderr, "gymserver serve:", err)
		return 2
	}
	var fl *fleet.Fleet
	reg, closeEnvs, err := loadRegistry(ctx, *configPath, logger, loadOptions{
		WarmPool:    *warmPool,
		CreatedPool: *createdPool,
		Reuse:       *reuse,
		FloatCPUs:   *floatCPUs,
		OrphanAfter: orphanAfterOption(*orphanAfter),
		Janitor:     !*noJanitor,
		JanitorLog:  *janitorLog,
		Caches:      caches,
		Engines:     engines,
		OnFleet:     func(f *fleet.Fleet) { fl = f },

		SnapshotArchiveMax: *snapshotArchiveMax,
	})
	if err != nil {
		fmt.Fprintln(stderr, "gymserver serve:", err)
		return 1
	}
	so := server.Options{
		Registry:              reg,
		Token:                 *token,
		Logger:                logger,
		Version:               version(),
		MaxFrameBytes:         *maxFrame,
		MaxSessions:           *maxSessions,
		MaxSessionsPerConn:    *maxConnSessions,
		MaxInflightPerConn:    *maxInflight,
		MaxConcurrentResets:   *maxResets,
		MaxSnapshotsPerConn:   *maxConnSnapshots,
		MaxQueuedBytesPerConn: *maxQueued,
		ResetWait:             *resetWait,
		IdleSessionTTL:        *idleTTL,
		PingInterval:          *pingInterval,
		DrainTimeout:          *drainTimeout,
		UI:                    *ui,
	}
	if fl != nil {
		// Per-engine state at /v1/engines and in /metrics.
		so.Engines = func() any { return fl.Engines() }
		so.Collectors = append(so.Collectors, fl)
		so.Containers = fl.Live
	}
	srv, err := server.New(so)
	if err != nil {
		closeEnvs(context.WithoutCancel(ctx))
		fmt.Fprintln(stderr, "gymserver serve:", err)
		return 2
	}
	// Tests and fixtures read this exact line (PROTOCOL.md §8).
	fmt.Fprintf(stderr, "listening on %s\n", ln.Addr())
	if *ui {
		fmt.Fprintf(stderr, "dashboard: http://%s/ui/\n", ln.Addr())
	}
	code := 0
	if err := srv.Serve(ctx, ln); err != nil {
		logger.Error("serve", "err", err)
		code = 1
	}
	if err := closeEnvs(context.WithoutCancel(ctx)); err != nil {
		logger.Error("close environments", "err", err)
		code = 1
	}
	logger.Info("stopped")
	return code
}

// version returns the module version of this build, or "dev".
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
