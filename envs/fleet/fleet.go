// Package fleet runs sandboxes on several Docker Engines behind one
// sandbox.Provider: one docker.Provider per engine, with placement by load,
// health checks, and images copied between engines.
//
// Placement: a new session goes to the engine, among those up and below
// their capacity, with the fewest live sessions for its capacity (the
// lowest live/capacity); a tie goes to the engine listed first. A sandbox
// started from a committed snapshot goes to the engine that holds the
// image, whatever its load; so do the forks of that snapshot. Sessions
// never move.
//
// Health: every HealthEvery each engine is pinged, bounded by
// HealthTimeout. An engine that fails is down: every call on the
// sandboxes it had fails with gym.ErrSandbox from then on, even after the
// engine is back (the episode ends as a masked sandbox_error), and
// placement skips it. It is up again, and placement uses it again, after
// a ping that succeeds.
//
// Images: Prepare and Build run on the first engine that is up (the
// home). Before a sandbox starts on another engine, the prepared image and
// its base reach that engine by `docker save` on an engine that has them
// streamed into `docker load` on it (the Engine API's ImageSave and
// ImageLoad), once per engine and image: images are named by their ids,
// which are content hashes, and concurrent requests for the same image
// and engine share one transfer; an image whose id the engine already has
// is only tagged. A base image no engine has is built by
// Options.BuildBase.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"golang.org/x/sync/singleflight"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// Defaults of Options.
const (
	DefaultHealthEvery   = 5 * time.Second
	DefaultHealthTimeout = 3 * time.Second
	// transferTimeout bounds one image transfer between engines.
	transferTimeout = 30 * time.Minute
)

// Options configure a Fleet.
type Options struct {
	// Endpoints are the engines; at least one, and at least one of them
	// reachable when New runs. One that is not joins the fleet when a
	// health check first reaches it.
	Endpoints []Endpoint
	// Docker is the template of each engine's provider options. New sets
	// Client, BuildBase and JanitorEnv per engine, and appends "/" and the
	// engine's name to a non-empty Owner.
	Docker docker.Options
	// BuildBase makes a base image on an engine when no engine has it
	// (e.g. baseimage.Build); nil: such an image is an error.
	BuildBase func(ctx context.Context, cli *client.Client, ref string) error
	// HealthEvery is the period of the health checks (default
	// DefaultHealthEvery); HealthTimeout bounds one ping (default
	// DefaultHealthTimeout).
	HealthEvery   time.Duration
	HealthTimeout time.Duration
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Fleet is a sandbox.Provider over several Docker Engines. It is safe for
// concurrent use.
type Fleet struct {
	opts    Options
	log     *slog.Logger
	engines []*engine
	flight  singleflight.Group

	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	// mu guards the fields below and the engines' up, live and ready.
	mu sync.Mutex
	// prepared are the specs of the images Prepare returned, by
	// reference.
	prepared map[string]sandbox.ImageSpec
	// snapshots are the engines holding the images Commit made.
	snapshots map[string]*engine
	closed    bool
}

// engine is one Docker Engine and its provider.
type engine struct {
	name     string
	host     string
	capacity int
	cli      *client.Client
	// opts make the provider when the engine joins.
	opts docker.Options
	// joinMu serialises attempts to join.
	joinMu sync.Mutex
	// p is nil until the engine has joined (its provider is made); set
	// once, under Fleet.mu, before up is first set. Code that reached e
	// through a check of up (or as a snapshot's engine) may read it
	// without the lock.
	p *docker.Provider

	// Guarded by Fleet.mu.
	up      bool
	lastErr string
	live    int
	// ready are the prepared images Create may start here at once.
	ready map[string]bool

	downs          atomic.Int64
	transfers      atomic.Int64
	transferBytes  atomic.Int64
	transferNanos  atomic.Int64
	sessionsPlaced atomic.Int64
}

var (
	_ sandbox.Provider       = (*Fleet)(nil)
	_ sandbox.Builder        = (*Fleet)(nil)
	_ sandbox.ImageInspector = (*Fleet)(nil)
	_ sandbox.ImageDropper   = (*Fleet)(nil)
)

// New connects to every engine, makes its provider (which reaps the
// engine and starts its janitor) and starts the health checks. An engine
// that does not answer is left down and joins (is reaped, gets its
// provider) when a health check first reaches it; New fails only when no
// engine answers, or on a configuration error.
func New(ctx context.Context, opts Options) (*Fleet, error) {
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("fleet: no engine")
	}
	if opts.HealthEvery <= 0 {
		opts.HealthEvery = DefaultHealthEvery
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	f := &Fleet{
		opts:      opts,
		log:       opts.Logger,
		prepared:  map[string]sandbox.ImageSpec{},
		snapshots: map[string]*engine{},
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	names := map[string]bool{}
	for i, ep := range opts.Endpoints {
		if ep.Name == "" {
			ep.Name = fmt.Sprintf("engine%d", i)
		}
		if names[ep.Name] {
			f.closeEngines(ctx)
			return nil, fmt.Errorf("fleet: two engines named %q", ep.Name)
		}
		names[ep.Name] = true
		e, err := f.open(ep)
		if err != nil {
			f.closeEngines(ctx)
			return nil, err
		}
		f.engines = append(f.engines, e)
	}
	// Join them all at once: one that does not answer costs at most a
	// health check's timeout.
	errs := make([]error, len(f.engines))
	f.eachEngine(func(i int, e *engine) { errs[i] = f.ping(ctx, e) })
	joined := 0
	for i, e := range f.engines {
		if errs[i] == nil {
			joined++
			continue
		}
		f.log.Warn("engine not reachable; it joins when a health check reaches it", "engine", e.name, "host", e.host, "err", errs[i])
	}
	if joined == 0 {
		f.closeEngines(ctx)
		return nil, fmt.Errorf("fleet: no engine is reachable: %w", errors.Join(errs...))
	}
	var bgCtx context.Context
	bgCtx, f.bgCancel = context.WithCancel(context.Background())
	f.bg.Add(1)
	go f.watch(bgCtx)
	return f, nil
}

// open checks an endpoint and makes its client; the engine is down until
// it joins.
func (f *Fleet) open(ep Endpoint) (*engine, error) {
	if err := ep.check(); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	cli, err := ep.Client()
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	e := &engine{name: ep.Name, host: ep.Host, capacity: ep.Capacity, cli: cli, ready: map[string]bool{}}
	if e.capacity == 0 {
		e.capacity = DefaultCapacity
	}
	o := f.opts.Docker
	o.Client = cli
	o.Logger = f.log.With("engine", e.name)
	o.JanitorEnv = append(o.JanitorEnv, ep.janitorEnv()...)
	if o.Owner != "" {
		o.Owner += "/" + e.name
	}
	o.BuildBase = func(ctx context.Context, ref string) error { return f.fetchBase(ctx, e, ref) }
	e.opts = o
	return e, nil
}

// join makes e's provider (which reaps the engine and starts its
// janitor), once; it is a no-op for an engine that has joined.
func (f *Fleet) join(ctx context.Context, e *engine) error {
	e.joinMu.Lock()
	defer e.joinMu.Unlock()
	if f.provider(e) != nil {
		return nil
	}
	p, err := docker.New(ctx, e.opts)
	if err != nil {
		return fmt.Errorf("fleet: engine %s (%s): %w", e.name, e.host, err)
	}
	f.mu.Lock()
	closed := f.closed
	if !closed {
		e.p = p
	}
	f.mu.Unlock()
	if closed {
		p.Close(ctx)
		return gym.Classify(errors.New("fleet: closed"), gym.ClassSandbox)
	}
	return nil
}

// provider returns e's provider, nil before it has joined.
func (f *Fleet) provider(e *engine) *docker.Provider {
	f.mu.Lock()
	defer f.mu.Unlock()
	return e.p
}

// Close stops the health checks and closes every engine's provider,
// which destroys its sandboxes.
func (f *Fleet) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	f.bgCancel()
	f.bg.Wait()
	return f.closeEngines(ctx)
}

// closeEngines closes the providers at once and their clients.
func (f *Fleet) closeEngines(ctx context.Context) error {
	errs := make([]error, len(f.engines))
	f.eachEngine(func(i int, e *engine) {
		if p := f.provider(e); p != nil {
			if err := p.Close(ctx); err != nil {
				errs[i] = fmt.Errorf("fleet: engine %s: %w", e.name, err)
			}
		}
		e.cli.Close()
	})
	return errors.Join(errs...)
}

// eachEngine runs fn for every engine at once and waits for them all.
func (f *Fleet) eachEngine(fn func(i int, e *engine)) {
	var wg sync.WaitGroup
	for i, e := range f.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, e)
		}()
	}
	wg.Wait()
}

// Providers returns the providers of the engines that have joined, by
// name.
func (f *Fleet) Providers() map[string]*docker.Provider {
	out := make(map[string]*docker.Provider, len(f.engines))
	for _, e := range f.engines {
		if p := f.provider(e); p != nil {
			out[e.name] = p
		}
	}
	return out
}

// home returns the first engine that is up.
func (f *Fleet) home() (*engine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.engines {
		if e.up {
			return e, nil
		}
	}
	return nil, gym.Classify(fmt.Errorf("fleet: every engine is down: %w", errNoEngine), gym.ClassSandbox)
}

// Prepare prepares the image on the home engine; Create brings it to the
// others.
func (f *Fleet) Prepare(ctx context.Context, spec sandbox.ImageSpec) (string, error) {
	e, err := f.home()
	if err != nil {
		return "", err
	}
	ref, err := e.p.Prepare(ctx, spec)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.prepared[ref] = spec
	e.ready[ref] = true
	f.mu.Unlock()
	return ref, nil
}

// Build builds the image on the home engine; it reaches the others as the
// base of the images prepared from it.
func (f *Fleet) Build(ctx context.Context, spec sandbox.BuildSpec) (string, error) {
	e, err := f.home()
	if err != nil {
		return "", err
	}
	return e.p.Build(ctx, spec)
}

// ImageWorkDir asks the first engine that is up and has the image.
func (f *Fleet) ImageWorkDir(ctx context.Context, ref string) (string, error) {
	var errs []error
	for _, e := range f.upEngines() {
		dir, err := e.p.ImageWorkDir(ctx, ref)
		if err == nil {
			return dir, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return "", gym.Classify(fmt.Errorf("fleet: every engine is down: %w", errNoEngine), gym.ClassSandbox)
	}
	return "", errors.Join(errs...)
}

// DropImage removes a committed snapshot image from its engine.
func (f *Fleet) DropImage(ctx context.Context, ref string) error {
	f.mu.Lock()
	e, ok := f.snapshots[ref]
	delete(f.snapshots, ref)
	f.mu.Unlock()
	if !ok {
		return nil
	}
	return e.p.DropImage(ctx, ref)
}

// upEngines returns the engines that are up, in order.
func (f *Fleet) upEngines() []*engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*engine
	for _, e := range f.engines {
		if e.up {
			out = append(out, e)
		}
	}
	return out
}

// Create places the sandbox (see the package doc), brings its image to
// the engine and starts it there. When the start fails and the engine no
// longer answers a ping, the engine is marked down and the next one is
// tried.
func (f *Fleet) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	tried := map[*engine]bool{}
	for {
		e, pinned, err := f.reserve(spec.Image, tried)
		if err != nil {
			return nil, err
		}
		// A down during the start ends the sandbox too.
		downs := e.downs.Load()
		sb, err := f.start(ctx, e, spec)
		if err == nil {
			e.sessionsPlaced.Add(1)
			return newSandbox(f, e, sb, downs), nil
		}
		f.release(e)
		if pinned || ctx.Err() != nil || f.ping(ctx, e) == nil {
			return nil, err
		}
		f.log.Warn("engine failed a start and does not answer; trying another", "engine", e.name, "err", err)
		tried[e] = true
	}
}

// reserve picks the engine for a sandbox of image and counts the sandbox
// as live there.
func (f *Fleet) reserve(image string, skip map[*engine]bool) (e *engine, pinned bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false, gym.Classify(errors.New("fleet: closed"), gym.ClassSandbox)
	}
	if e, ok := f.snapshots[image]; ok {
		if !e.up {
			return nil, true, gym.Classify(fmt.Errorf("fleet: snapshot image %s is on engine %s, which is down", image, e.name), gym.ClassSandbox)
		}
		e.live++
		return e, true, nil
	}
	var best *engine
	up := 0
	for _, c := range f.engines {
		if !c.up || skip[c] {
			continue
		}
		up++
		if c.live >= c.capacity {
			continue
		}
		// c.live/c.capacity < best.live/best.capacity, in integers; the
		// first listed wins a tie.
		if best == nil || c.live*best.capacity < best.live*c.capacity {
			best = c
		}
	}
	switch {
	case best != nil:
		best.live++
		return best, false, nil
	case up == 0:
		return nil, false, gym.Classify(fmt.Errorf("fleet: every engine is down: %w", errNoEngine), gym.ClassSandbox)
	default:
		return nil, false, gym.Classify(fmt.Errorf("fleet: every engine is at its capacity: %w", errNoEngine), gym.ClassResourceExhausted)
	}
}

// release uncounts a live sandbox of e.
func (f *Fleet) release(e *engine) {
	f.mu.Lock()
	e.live--
	f.mu.Unlock()
}

// start brings the image to e and starts the sandbox there.
func (f *Fleet) start(ctx context.Context, e *engine, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := f.ensureImage(ctx, e, spec.Image); err != nil {
		return nil, err
	}
	return e.p.Create(ctx, spec)
}

// ensureImage makes a prepared image ready on e: copied there with its
// base, then prepared by e's provider, which finds it (a cache hit).
// Other images (snapshots, which stay on their engine) are left as they
// are.
func (f *Fleet) ensureImage(ctx context.Context, e *engine, ref string) error {
	f.mu.Lock()
	spec, prepared := f.prepared[ref]
	ready := e.ready[ref]
	f.mu.Unlock()
	if ready || !prepared {
		return nil
	}
	if err := f.copyImages(ctx, e, []string{ref, spec.BaseImage}); err != nil {
		return err
	}
	got, err := e.p.Prepare(ctx, spec)
	if err != nil {
		return err
	}
	if got != ref {
		// The copy makes this a cache hit; a different reference means
		// the engines' providers differ (executor build), which New
		// rules out.
		return gym.Classify(fmt.Errorf("fleet: engine %s prepared %s for image %s", e.name, got, ref), gym.ClassSandbox)
	}
	f.mu.Lock()
	e.ready[ref] = true
	f.mu.Unlock()
	return nil
}

// fetchBase is the BuildBase of e's provider: the base image is copied
// from an engine that has it, or else built by Options.BuildBase.
func (f *Fleet) fetchBase(ctx context.Context, e *engine, ref string) error {
	err := f.copyImages(ctx, e, []string{ref})
	if !errors.Is(err, errNoSource) {
		return err
	}
	if f.opts.BuildBase == nil {
		return err
	}
	f.log.Info("no engine has the base image; building it", "engine", e.name, "image", ref)
	return f.opts.BuildBase(ctx, e.cli, ref)
}

// errNoSource is wrapped when no engine has an image to copy.
var errNoSource = errors.New("no engine that is up has the image")

// copyImages makes the images refs present on dst: those whose id dst
// already has are tagged, the others are saved on an engine that has them
// all and loaded into dst, in one stream. Copies of the same images to
// the same engine share one transfer.
func (f *Fleet) copyImages(ctx context.Context, dst *engine, refs []string) error {
	var missing []string
	for _, ref := range refs {
		if ref == "" {
			continue
		}
		if _, err := dst.cli.ImageInspect(ctx, ref); err == nil {
			continue
		} else if !client.IsErrNotFound(err) {
			return gym.Classify(fmt.Errorf("fleet: engine %s: inspect %s: %w", dst.name, ref, err), gym.ClassSandbox)
		}
		missing = append(missing, ref)
	}
	if len(missing) == 0 {
		return nil
	}
	src, ids, err := f.source(ctx, dst, missing)
	if err != nil {
		return err
	}
	var load []string
	for i, ref := range missing {
		// The same content under another name: a tag is enough.
		if _, err := dst.cli.ImageInspect(ctx, ids[i]); err == nil {
			if err := dst.cli.ImageTag(ctx, ids[i], ref); err != nil {
				return gym.Classify(fmt.Errorf("fleet: engine %s: tag %s: %w", dst.name, ref, err), gym.ClassSandbox)
			}
			continue
		}
		load = append(load, ref)
	}
	if len(load) == 0 {
		return nil
	}
	key := dst.name + "\x00" + strings.Join(ids, "\x00")
	_, err, _ = f.flight.Do(key, func() (any, error) {
		// One caller's cancellation must not fail the others waiting on
		// the same transfer.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transferTimeout)
		defer cancel()
		return nil, f.transfer(tctx, src, dst, load)
	})
	return err
}

// source returns an engine other than dst that is up and has every image
// of refs, and the images' ids there.
func (f *Fleet) source(ctx context.Context, dst *engine, refs []string) (*engine, []string, error) {
	for _, e := range f.upEngines() {
		if e == dst {
			continue
		}
		ids := make([]string, 0, len(refs))
		for _, ref := range refs {
			info, err := e.cli.ImageInspect(ctx, ref)
			if err != nil {
				break
			}
			ids = append(ids, info.ID)
		}
		if len(ids) == len(refs) {
			return e, ids, nil
		}
	}
	return nil, nil, gym.Classify(fmt.Errorf("fleet: images %s for engine %s: %w", strings.Join(refs, ", "), dst.name, errNoSource), gym.ClassSandbox)
}

// transfer streams `docker save refs` on src into `docker load` on dst.
func (f *Fleet) transfer(ctx context.Context, src, dst *engine, refs []string) error {
	start := time.Now()
	rc, err := src.cli.ImageSave(ctx, refs)
	if err != nil {
		return gym.Classify(fmt.Errorf("fleet: save %s on engine %s: %w", strings.Join(refs, ", "), src.name, err), gym.ClassSandbox)
	}
	defer rc.Close()
	n := &countingReader{r: rc}
	resp, err := dst.cli.ImageLoad(ctx, n, client.ImageLoadWithQuiet(true))
	if err != nil {
		return gym.Classify(fmt.Errorf("fleet: load %s on engine %s: %w", strings.Join(refs, ", "), dst.name, err), gym.ClassSandbox)
	}
	defer resp.Body.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil); err != nil {
		return gym.Classify(fmt.Errorf("fleet: load %s on engine %s: %w", strings.Join(refs, ", "), dst.name, err), gym.ClassSandbox)
	}
	took := time.Since(start)
	dst.transfers.Add(1)
	dst.transferBytes.Add(n.n)
	dst.transferNanos.Add(int64(took))
	f.log.Info("image copied between engines", "images", strings.Join(refs, ","), "from", src.name, "to", dst.name,
		"bytes", n.n, "seconds", took.Seconds())
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// watch runs the health checks until ctx ends.
func (f *Fleet) watch(ctx context.Context) {
	defer f.bg.Done()
	t := time.NewTicker(f.opts.HealthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.CheckHealth(ctx)
	}
}

// CheckHealth pings every engine at once and marks each up or down; the
// health checks call it every Options.HealthEvery.
func (f *Fleet) CheckHealth(ctx context.Context) {
	f.eachEngine(func(_ int, e *engine) { f.ping(ctx, e) })
}

// ping pings e, joins it to the fleet the first time it answers, marks it
// up or down, and returns the error.
func (f *Fleet) ping(ctx context.Context, e *engine) error {
	pctx, cancel := context.WithTimeout(ctx, f.opts.HealthTimeout)
	defer cancel()
	_, err := e.cli.Ping(pctx)
	if err == nil {
		err = f.join(ctx, e)
	}
	if ctx.Err() != nil {
		return err
	}
	f.setHealth(e, err)
	return err
}

// setHealth marks e up (err nil) or down after a health check.
func (f *Fleet) setHealth(e *engine, err error) {
	f.mu.Lock()
	was := e.up
	e.up = err == nil
	if was && err != nil {
		// Under mu, with up: a sandbox made before this sees the new
		// count (see Sandbox.check).
		e.downs.Add(1)
	}
	if err != nil {
		e.lastErr = err.Error()
		// Its images may not survive; they are checked again on return.
		clear(e.ready)
	}
	live := e.live
	f.mu.Unlock()
	switch {
	case was && err != nil:
		f.log.Warn("engine down: its sessions fail, new ones go elsewhere", "engine", e.name, "live", live, "err", err)
	case !was && err == nil && e.downs.Load() == 0:
		f.log.Info("engine joined", "engine", e.name)
	case !was && err == nil:
		f.log.Info("engine up again", "engine", e.name)
	}
}

// isUp reports whether e is up.
func (f *Fleet) isUp(e *engine) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return e.up
}

// EngineInfo is the state of one engine, as /v1/engines shows it.
type EngineInfo struct {
	Name     string `json:"name"`
	Host     string `json:"host"`
	Up       bool   `json:"up"`
	Capacity int    `json:"capacity"`
	// Sessions are the live sandboxes on the engine.
	Sessions int `json:"sessions"`
	// Placed counts the sandboxes ever started there.
	Placed int64 `json:"placed"`
	// Downs counts the times the engine went down.
	Downs int64 `json:"downs"`
	// Transfers and TransferBytes count the image loads into the engine.
	Transfers     int64 `json:"image_transfers"`
	TransferBytes int64 `json:"image_transfer_bytes"`
	// TransferSeconds is the time those loads took.
	TransferSeconds float64 `json:"image_transfer_seconds"`
	LastError       string  `json:"last_error,omitempty"`
}

// Engines returns the state of every engine, in order.
func (f *Fleet) Engines() []EngineInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]EngineInfo, len(f.engines))
	for i, e := range f.engines {
		out[i] = EngineInfo{
			Name: e.name, Host: e.host, Up: e.up, Capacity: e.capacity, Sessions: e.live,
			Placed: e.sessionsPlaced.Load(), Downs: e.downs.Load(),
			Transfers: e.transfers.Load(), TransferBytes: e.transferBytes.Load(),
			TransferSeconds: time.Duration(e.transferNanos.Load()).Seconds(), LastError: e.lastErr,
		}
	}
	return out
}

// Live returns the number of live sandboxes on all engines.
func (f *Fleet) Live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.engines {
		n += e.live
	}
	return n
}

// EngineOf returns the name of the engine a sandbox of the fleet runs on,
// or "".
func EngineOf(sb sandbox.Sandbox) string {
	if s, ok := sb.(*Sandbox); ok {
		return s.e.name
	}
	return ""
}

// PoolStats returns the warm pools of every engine, each with its
// engine's name, in the engines' order, and the sums of the engines'
// pending and failed container removals.
func (f *Fleet) PoolStats() sandbox.PoolStats {
	st := sandbox.PoolStats{Pools: []sandbox.Pool{}}
	for _, e := range f.engines {
		p := f.provider(e)
		if p == nil {
			continue
		}
		ps := p.PoolStats()
		for _, pool := range ps.Pools {
			pool.Engine = e.name
			st.Pools = append(st.Pools, pool)
		}
		st.Removing += ps.Removing
		st.RemoveErrors += ps.RemoveErrors
	}
	return st
}
