package docker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// Bounds of a recycle (see Options.Reuse).
const (
	// recycleBound bounds the executor's part.
	recycleBound = 15 * time.Second
	// drainBound bounds the wait for the closed session's calls to end
	// once its processes are killed.
	drainBound = 5 * time.Second
	// reuseIdle is how long a recycled sandbox waits for a session before
	// it is removed.
	reuseIdle = time.Minute
)

// enter admits a call on the session's behalf, or fails once Close began;
// a call admitted must end with s.gate.RUnlock.
func (s *Sandbox) enter(what string) error {
	s.gate.RLock()
	if s.retired.Load() {
		s.gate.RUnlock()
		return gym.Errorf(gym.ClassSandbox, "docker: %s: sandbox %s is closed", what, shortID(s.id))
	}
	return nil
}

// takePristine has the executor record the sandbox's state as it started,
// so that it may be recycled; a failure only means it will not be.
func (s *Sandbox) takePristine(ctx context.Context) {
	roots, err := s.roots(ctx)
	if err == nil {
		err = s.bounded(ctx, "pristine", opBound, func(ctx context.Context) error {
			_, err := s.exec.Pristine(ctx, roots)
			return err
		})
	}
	if err != nil {
		// Said once per image: its other sandboxes fail alike.
		p := s.p
		p.mu.Lock()
		first := !p.unrecyclable[s.image]
		p.unrecyclable[s.image] = true
		p.mu.Unlock()
		if first {
			p.log.Info("sandboxes of this image cannot be recycled", "image", s.image, "container", shortID(s.id), "err", err)
		} else {
			p.log.Debug("the sandbox cannot be recycled", "container", shortID(s.id), "err", err)
		}
		return
	}
	s.pristine = true
}

// reuseCap is how many sandboxes the pool of a key may hold once
// recycled ones join it.
func (p *Provider) reuseCap() int {
	return max(p.opts.Reuse, p.opts.WarmPool)
}

// startRecycle starts recycling s, whose Close began, in the background
// and reports whether it did: not when the provider keeps no recycled
// sandboxes, s cannot be recycled or its pool is full.
func (p *Provider) startRecycle(s *Sandbox) bool {
	if p.opts.Reuse <= 0 || !s.pristine || s.poolKey == "" || s.exec == nil {
		return false
	}
	select {
	case <-s.exec.Done():
		return false
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.pool[s.poolKey])+p.recycling[s.poolKey] >= p.reuseCap() {
		return false
	}
	p.recycling[s.poolKey]++
	p.bg.Add(1)
	go p.recycle(s)
	return true
}

// recycle puts s's container back as it started and into its pool, under
// a new Sandbox with a new session id; or, when that fails, removes it.
func (p *Provider) recycle(s *Sandbox) {
	defer p.bg.Done()
	t0 := time.Now()
	n, err := p.renew(s)
	fresh := n
	p.mu.Lock()
	p.recycling[s.poolKey]--
	c := p.counts[s.poolKey]
	var evicted *Sandbox
	if err == nil && !p.closed {
		evicted = p.oldestRecycled(p.opts.Reuse)
		p.live[s.id] = n
		p.pool[s.poolKey] = append(p.pool[s.poolKey], n)
		n = nil
	}
	preload, zygote := p.zygotePools[s.poolKey]
	p.mu.Unlock()
	if evicted != nil {
		p.retire(evicted)
	}
	closing := p.bgCtx.Err() != nil
	switch {
	case c == nil || closing:
	case err == nil:
		c.recycled.Add(1)
	default:
		c.notRecycled.Add(1)
	}
	switch {
	case err != nil && closing:
		p.dispose(s)
	case err != nil:
		p.log.Info("the sandbox was not recycled; removing it", "container", shortID(s.id), "session_id", s.session, "err", err)
		p.dispose(s)
	case n != nil:
		// The provider closed meanwhile.
		p.dispose(n)
	default:
		p.log.Debug("sandbox recycled", "container", shortID(s.id), "was_session", s.session, "took", time.Since(t0))
		time.AfterFunc(p.bounds.reuseIdle, func() { p.expire(fresh) })
		if zygote {
			// As a pooled sandbox joining the pool would (see fill);
			// none is started if the executor kept its zygote.
			_, _ = fresh.StartZygote(p.bgCtx, sandbox.ZygoteOptions{Preload: preload})
		}
	}
}

// oldestRecycled takes out of the pools, and returns, the recycled sandbox
// that has waited longest when limit or more recycled sandboxes wait in
// all pools together; else nil. The caller holds p.mu.
func (p *Provider) oldestRecycled(limit int) *Sandbox {
	var oldest *Sandbox
	n := 0
	for _, list := range p.pool {
		for _, q := range list {
			if q.recycled.IsZero() {
				continue
			}
			n++
			if oldest == nil || q.recycled.Before(oldest.recycled) {
				oldest = q
			}
		}
	}
	if n < limit || oldest == nil {
		return nil
	}
	p.pool[oldest.poolKey] = slices.DeleteFunc(p.pool[oldest.poolKey], func(q *Sandbox) bool { return q == oldest })
	return oldest
}

// expire removes the recycled sandbox s if it still waits in its pool.
func (p *Provider) expire(s *Sandbox) {
	p.mu.Lock()
	list := p.pool[s.poolKey]
	i := slices.Index(list, s)
	if p.closed || i < 0 {
		p.mu.Unlock()
		return
	}
	p.pool[s.poolKey] = slices.Delete(list, i, i+1)
	p.mu.Unlock()
	p.log.Debug("a recycled sandbox waited too long; removing it", "container", shortID(s.id))
	p.retire(s)
}

// retire closes a pooled sandbox for good: its container is removed, not
// recycled.
func (p *Provider) retire(s *Sandbox) {
	s.closeOnce.Do(func() {
		s.retired.Store(true)
		p.dispose(s)
	})
}

// renew ends the calls of s's session, has the executor recycle the
// container and returns the Sandbox of its next session.
func (p *Provider) renew(s *Sandbox) (*Sandbox, error) {
	if time.Since(s.born) >= p.maxPoolAge() {
		return nil, fmt.Errorf("the container is older than a pooled sandbox may be")
	}
	ctx, cancel := context.WithTimeout(p.bgCtx, recycleBound)
	defer cancel()
	// Commands in flight end with their processes; then no call of the
	// session is left (enter admits none since Close began).
	if err := s.exec.KillAll(ctx); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(drainBound)
	for !s.gate.TryLock() {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("calls of the closed session did not end within %s", drainBound)
		}
		time.Sleep(time.Millisecond)
	}
	s.gate.Unlock()
	if err := s.exec.Recycle(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	n := &Sandbox{p: p, id: s.id, session: sandbox.NewSessionID(), made: now, born: s.born, image: s.image, workdir: s.workdir,
		exec: s.exec, attached: s.attached, conn: s.conn, copied: s.copied, phases: s.phases, poolKey: s.poolKey, pristine: true, recycled: now}
	if s.zygote.Load() == zygoteStarted {
		// The executor keeps its zygote (see executor.Client.Recycle).
		n.zygote.Store(zygoteStarted)
	}
	return n, nil
}
