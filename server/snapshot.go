package server

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// Snapshots belong to the connection that took them, like sessions: the
// connection's table maps each snapshot id to the environment that holds
// it (gym.Snapshot.EnvID), which fork and drop_snapshot are routed to.
// When the connection goes away, teardown drops them all.

// snapshot runs snapshot on s, its turn having come.
func (c *conn) snapshot(req wire.Request, s *session) {
	_, envOK := c.srv.forkers[s.env]
	snapper, sessOK := s.gs.(gym.Snapshotter)
	if !envOK || !sessOK {
		c.reply(req.ID, nil, errorf(gym.ClassInvalidArgument, wire.ReasonUnsupported,
			"session %s: environment %s does not support snapshots", s.id, s.env))
		return
	}
	if err := c.reserveSnapshot(); err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	start := time.Now()
	snap, err := snapper.Snapshot(c.ctx)
	if err != nil {
		c.unreserveSnapshot()
		if s.isClosing() {
			err = s.closedErr()
		}
		c.reply(req.ID, nil, err)
		return
	}
	env := snap.EnvID
	if _, ok := c.srv.forkers[env]; !ok {
		// The environment answers for its snapshots under the id the
		// server knows it by.
		env = s.env
	}
	c.mu.Lock()
	_, dup := c.snapshots[snap.ID]
	if !dup {
		c.snapshots[snap.ID] = env
	}
	c.mu.Unlock()
	if dup {
		c.unreserveSnapshot()
		c.reply(req.ID, nil, gym.Errorf(gym.ClassInternal, "session %s: snapshot: environment %s reused snapshot id %s", s.id, env, snap.ID))
		return
	}
	c.srv.metrics.snapshots.Inc()
	c.srv.metrics.snapshot.WithLabelValues(s.env).Observe(time.Since(start).Seconds())
	c.log.Debug("snapshot", "session_id", s.id, "env", env, "snapshot", snap.ID, "step", snap.Steps)
	c.reply(req.ID, wire.SnapshotResult{Snapshot: wire.FromSnapshot(snap)}, nil)
}

// reserveSnapshot claims a snapshot slot on the connection.
func (c *conn) reserveSnapshot() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if max := c.srv.opts.MaxSnapshotsPerConn; c.snapReserved >= max {
		return errorf(gym.ClassResourceExhausted, wire.ReasonMaxSnapshots,
			"connection has %d snapshots, the maximum (max_snapshots_per_connection); drop snapshots first", max)
	}
	c.snapReserved++
	return nil
}

func (c *conn) unreserveSnapshot() {
	c.mu.Lock()
	c.snapReserved--
	c.mu.Unlock()
}

// snapshotEnv returns the environment of one of the connection's snapshots.
func (c *conn) snapshotEnv(id string) (gym.Forker, string, error) {
	if id == "" {
		return nil, "", errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field snapshot is required")
	}
	c.mu.Lock()
	env, ok := c.snapshots[id]
	c.mu.Unlock()
	if !ok {
		return nil, "", errUnknownSnapshot(id)
	}
	return c.srv.forkers[env], env, nil
}

// errUnknownSnapshot is the error of a snapshot id the connection does not
// hold: never taken, dropped, or another connection's.
func errUnknownSnapshot(id string) error {
	return errorf(gym.ClassNotFound, wire.ReasonUnknownSnapshot, "snapshot %q is not held by this connection", id)
}

// takeSnapshot removes a snapshot from the connection's table and returns
// its environment.
func (c *conn) takeSnapshot(id string) (gym.Forker, string, bool) {
	c.mu.Lock()
	env, ok := c.snapshots[id]
	delete(c.snapshots, id)
	if ok {
		c.snapReserved--
	}
	c.mu.Unlock()
	if !ok {
		return nil, "", false
	}
	c.srv.metrics.snapshots.Dec()
	return c.srv.forkers[env], env, true
}

// dropSnapshot handles drop_snapshot.
func (c *conn) dropSnapshot(req wire.Request) {
	if req.Snapshot == "" {
		c.reply(req.ID, nil, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field snapshot is required"))
		return
	}
	forker, env, ok := c.takeSnapshot(req.Snapshot)
	if !ok {
		c.reply(req.ID, nil, errUnknownSnapshot(req.Snapshot))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.srv.opts.CloseTimeout)
	defer cancel()
	if err := forker.DropSnapshot(ctx, req.Snapshot); err != nil {
		c.reply(req.ID, nil, fmt.Errorf("drop snapshot %s of %s: %w", req.Snapshot, env, err))
		return
	}
	c.reply(req.ID, wire.DropSnapshotResult{Snapshot: req.Snapshot}, nil)
}

// dropAllSnapshots drops every snapshot of the connection and returns how
// many it dropped. Failures are logged: the environment's own cleanup
// (provider close, reaping) is the fallback.
func (c *conn) dropAllSnapshots() int {
	c.mu.Lock()
	ids := make([]string, 0, len(c.snapshots))
	for id := range c.snapshots {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	var g errgroup.Group
	g.SetLimit(32)
	for _, id := range ids {
		g.Go(func() error {
			forker, env, ok := c.takeSnapshot(id)
			if !ok {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.srv.opts.CloseTimeout)
			defer cancel()
			if err := forker.DropSnapshot(ctx, id); err != nil {
				c.log.Warn("drop snapshot", "snapshot", id, "env", env, "err", err)
			}
			return nil
		})
	}
	g.Wait()
	return len(ids)
}

// forked is one session started by fork or reset_group.
type forked struct {
	gs gym.Session
	r  gym.Reset
}

// fork handles fork: n sessions from one snapshot, started concurrently
// (each holding a reset slot), all or none.
func (c *conn) fork(req wire.Request) {
	forker, env, err := c.snapshotEnv(req.Snapshot)
	if err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	what := "fork " + req.Snapshot
	c.startGroup(req, env, what, func(ctx context.Context) (gym.Session, gym.Reset, error) {
		start := time.Now()
		gs, r, err := forker.Fork(ctx, req.Snapshot)
		if err == nil {
			c.srv.metrics.fork.WithLabelValues(env).Observe(time.Since(start).Seconds())
		}
		return gs, r, err
	})
}

// startGroup starts req.N sessions (0 means 1) of env with start,
// concurrently, each holding a reset slot, and replies with all of them or
// with the first error and none kept. what names the request in errors.
func (c *conn) startGroup(req wire.Request, env, what string, start func(context.Context) (gym.Session, gym.Reset, error)) {
	n := req.N
	if n < 0 {
		c.reply(req.ID, nil, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field n must be positive, got %d", n))
		return
	}
	if n == 0 {
		n = 1
	}
	if err := c.reserveSessions(n); err != nil {
		c.reply(req.ID, nil, fmt.Errorf("%s: %w", what, err))
		return
	}
	out := make([]forked, n)
	g, gctx := errgroup.WithContext(c.ctx)
	g.SetLimit(c.srv.opts.MaxConcurrentResets)
	for i := range n {
		g.Go(func() error {
			wctx, cancel := context.WithTimeout(gctx, c.srv.opts.ResetWait)
			err := c.srv.resets.Acquire(wctx, 1)
			cancel()
			if err != nil {
				if gctx.Err() == nil {
					err = errorf(gym.ClassResourceExhausted, wire.ReasonResetWait,
						"no reset slot free within %s (%d resets run at once, max_concurrent_resets)", c.srv.opts.ResetWait, c.srv.opts.MaxConcurrentResets)
				}
				return err
			}
			defer c.srv.resets.Release(1)
			gs, r, err := start(gctx)
			if err != nil {
				return err
			}
			out[i] = forked{gs: gs, r: r}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		closeForked(out, c.srv.opts.CloseTimeout)
		c.unreserveSessions(n)
		c.reply(req.ID, nil, fmt.Errorf("%s (%d sessions, none kept): %w", what, n, err))
		return
	}
	res := wire.ForkResult{Sessions: make([]wire.ResetResult, n)}
	var registered []*session
	for i, f := range out {
		s := newSession(c, env, f.gs)
		if !c.register(s) {
			// The client went away meanwhile: remove every sandbox
			// now. Registered sessions give back their slots when
			// closed, the others here.
			closeForked(out[i:], c.srv.opts.CloseTimeout)
			c.unreserveSessions(n - i)
			closeAll(registered, false)
			c.reply(req.ID, nil, errorf(gym.ClassUnavailable, "", "%s: connection closed meanwhile", what))
			return
		}
		registered = append(registered, s)
		res.Sessions[i] = wire.FromReset(f.r)
	}
	c.log.Debug(what, "env", env, "sessions", n)
	c.reply(req.ID, res, nil)
}

// resetGroup handles reset_group: n sessions of one task and seed (a GRPO
// group), started concurrently, all or none. Without a task or a seed the
// server draws one seed for the whole group, so that all its sessions get
// the same task.
func (c *conn) resetGroup(req wire.Request) {
	if req.Env == "" {
		c.reply(req.ID, nil, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field env is required"))
		return
	}
	env, err := c.srv.opts.Registry.Lookup(req.Env)
	if err != nil {
		c.reply(req.ID, nil, &reasonError{reason: wire.ReasonUnknownEnv, err: err})
		return
	}
	rr := gym.ResetRequest{Task: req.Task, Seed: req.Seed, Options: wire.JSONMap(req.Options)}
	if rr.Task == "" && rr.Seed == nil {
		seed := mrand.Int64()
		rr.Seed = &seed
	}
	c.startGroup(req, req.Env, "reset_group "+req.Env, func(ctx context.Context) (gym.Session, gym.Reset, error) {
		start := time.Now()
		gs, r, err := env.Reset(ctx, rr)
		if err == nil {
			c.srv.metrics.reset.WithLabelValues(req.Env).Observe(time.Since(start).Seconds())
		}
		return gs, r, err
	})
}

// closeForked closes the sessions of a failed fork, in parallel.
func closeForked(fs []forked, timeout time.Duration) {
	var g errgroup.Group
	g.SetLimit(32)
	for _, f := range fs {
		if f.gs == nil {
			continue
		}
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			f.gs.Close(ctx)
			return nil
		})
	}
	g.Wait()
}
