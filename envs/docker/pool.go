package docker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// poolKey identifies the sandboxes that can stand in for one another: the
// same Spec but for the session and task labels and the starter files,
// which a pooled sandbox gets when it is handed out.
func poolKey(spec sandbox.Spec) string {
	spec = poolSpec(spec)
	b, _ := json.Marshal(spec) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// poolSpec is spec without what differs between the sessions a pooled
// sandbox may serve.
func poolSpec(spec sandbox.Spec) sandbox.Spec {
	labels := maps.Clone(spec.Labels)
	delete(labels, sandbox.LabelSession)
	delete(labels, sandbox.LabelTask)
	if len(labels) == 0 {
		labels = nil // no labels and only a task's are the same key
	}
	spec.Labels = labels
	spec.Files = nil
	return spec
}

// maxPoolAge is how long a pooled sandbox may wait: well inside its lease,
// so that no other provider reaps it while a session uses it.
func (p *Provider) maxPoolAge() time.Duration {
	lease := p.opts.Lease
	if lease <= 0 {
		lease = defaultLease
	}
	return lease / 2
}

// takePooled returns a ready sandbox for key, or nil; nil too once the
// provider is closing (Close removes the pool). Sandboxes that died or
// waited too long are closed on the way, in the background: the goroutine
// is added to bg under mu while the provider is open, so that it is added
// before Close waits for bg (Close sets closed under mu first).
func (p *Provider) takePooled(key string) *Sandbox {
	for {
		p.mu.Lock()
		list := p.pool[key]
		if p.closed || len(list) == 0 {
			p.mu.Unlock()
			return nil
		}
		// The sandbox whose cores serve the fewest sessions; among
		// equals, the one that waited longest.
		best, least := 0, p.pins.load(list[0].id)
		for i := 1; i < len(list); i++ {
			if l := p.pins.load(list[i].id); l < least {
				best, least = i, l
			}
		}
		s := list[best]
		p.pool[key] = slices.Delete(list, best, best+1)
		p.mu.Unlock()
		select {
		case <-s.exec.Done():
		default:
			if time.Since(s.born) < p.maxPoolAge() {
				p.log.Debug("sandbox from the warm pool", "container", shortID(s.id))
				return s
			}
		}
		p.log.Info("dropping a stale pooled sandbox", "container", shortID(s.id))
		p.mu.Lock()
		if p.closed {
			// Close removes it with the other live sandboxes.
			p.mu.Unlock()
			return nil
		}
		p.bg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.bg.Done()
			_ = s.Close(context.Background())
		}()
	}
}

// refill starts sandboxes in the background until the pool for key holds
// Options.WarmPool of them (counting those starting).
func (p *Provider) refill(key string, spec sandbox.Spec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for n := len(p.pool[key]) + p.filling[key]; n < p.opts.WarmPool; n++ {
		p.filling[key]++
		p.bg.Add(1)
		go p.fill(key, spec)
	}
}

// refillDelay is how long a refill waits before it starts a sandbox: a
// burst of takes (a fork or a group reset of N) finishes its own work
// before the pool's starts compete with it for the engine and the CPU.
const refillDelay = 250 * time.Millisecond

// fill starts one pooled sandbox (create mints its session id).
func (p *Provider) fill(key string, spec sandbox.Spec) {
	defer p.bg.Done()
	select {
	case <-time.After(refillDelay):
	case <-p.bgCtx.Done():
		p.mu.Lock()
		p.filling[key]--
		p.mu.Unlock()
		return
	}
	spec = poolSpec(spec)
	s, err := p.create(p.bgCtx, spec)
	if err == nil {
		s.poolKey = key
		if p.opts.Reuse > 0 {
			s.takePristine(p.bgCtx)
		}
		// List the agent's places while no agent has used the image's
		// sandboxes, so that the first snapshot need not.
		p.mu.Lock()
		_, known := p.roots[spec.Image]
		preload, zygote := p.zygotePools[key]
		p.mu.Unlock()
		if zygote {
			// The session it serves finds its verifier zygote imported
			// (in its turn, as any zygote).
			_, _ = s.StartZygote(p.bgCtx, sandbox.ZygoteOptions{Preload: preload})
		}
		if !known {
			if _, rerr := s.roots(p.bgCtx); rerr != nil {
				p.log.Debug("warm pool: list the agent's places", "err", rerr)
			}
		}
	}
	p.settle(&p.pool, p.filling, key, s, err, "warm pool: start")
}

// settle ends a fill of the pool *ready whose fills in flight inFlight
// counts: s, made unless err, joins it; s is closed if the provider closed
// meanwhile, and err logged as what failed.
func (p *Provider) settle(ready *map[string][]*Sandbox, inFlight map[string]int, key string, s *Sandbox, err error, what string) {
	p.mu.Lock()
	inFlight[key]--
	if err == nil && !p.closed {
		(*ready)[key] = append((*ready)[key], s)
		s = nil
	}
	p.mu.Unlock()
	if err != nil {
		if p.bgCtx.Err() == nil {
			p.log.Warn(what+" failed", "err", err)
		}
		return
	}
	if s != nil {
		_ = s.Close(context.Background())
	}
}

// Pooled returns the number of ready sandboxes waiting in the pool for spec.
func (p *Provider) Pooled(spec sandbox.Spec) int {
	key := poolKey(spec)
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pool[key])
}

// takeCreated returns a created, not started, container for key, or nil;
// nil too once the provider is closing. One that waited too long is
// closed in the background (see takePooled).
func (p *Provider) takeCreated(key string) *Sandbox {
	for {
		p.mu.Lock()
		list := p.created[key]
		if p.closed || len(list) == 0 {
			p.mu.Unlock()
			return nil
		}
		s := list[0]
		p.created[key] = list[1:]
		if time.Since(s.born) < p.maxPoolAge() {
			p.mu.Unlock()
			return s
		}
		p.bg.Add(1)
		p.mu.Unlock()
		p.log.Info("dropping a stale created container", "container", shortID(s.id))
		go func() {
			defer p.bg.Done()
			_ = s.Close(context.Background())
		}()
	}
}

// refillCreated creates containers in the background until the created
// pool for key holds Options.CreatedPool of them (counting those being
// created).
func (p *Provider) refillCreated(key string, spec sandbox.Spec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for n := len(p.created[key]) + p.creating[key]; n < p.opts.CreatedPool; n++ {
		p.creating[key]++
		p.bg.Add(1)
		go p.fillCreated(key, spec)
	}
}

// createdRefillDelay is how long a refill of the created pool waits
// before it creates a container. It runs once the start that took one
// has ended, and a create costs the engine far less than a start, so it
// waits only for the other starts of a burst to have begun: with one
// episode at a time the next reset must find the container ready, and an
// oracle calculator_api episode takes ≈ 0.35 s after its reset.
const createdRefillDelay = 50 * time.Millisecond

// fillCreated creates one container for the created pool, after
// createdRefillDelay.
func (p *Provider) fillCreated(key string, spec sandbox.Spec) {
	defer p.bg.Done()
	var s *Sandbox
	var err error
	select {
	case <-time.After(createdRefillDelay):
		select {
		case p.starts <- struct{}{}:
			s, err = p.makeContainer(p.bgCtx, poolSpec(spec))
			<-p.starts
		case <-p.bgCtx.Done():
			err = p.bgCtx.Err()
		}
	case <-p.bgCtx.Done():
		err = p.bgCtx.Err()
	}
	p.settle(&p.created, p.creating, key, s, err, "created pool: create")
}

// Created returns the number of created, not started, containers waiting
// for spec (see Options.CreatedPool).
func (p *Provider) Created(spec sandbox.Spec) int {
	key := poolKey(spec)
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.created[key])
}

// poolCount counts what one pool served; its envs are guarded by the
// provider's mu.
type poolCount struct {
	image    string
	envs     map[string]bool
	fromPool atomic.Int64
	coldN    atomic.Int64
	// recycled and notRecycled count the outcomes of recycles (see
	// Options.Reuse).
	recycled, notRecycled atomic.Int64
}

// cold counts s, started for the request, when err is nil, and returns
// both.
func (c *poolCount) cold(s *Sandbox, err error) (sandbox.Sandbox, error) {
	if err != nil {
		return nil, err
	}
	c.coldN.Add(1)
	return s, nil
}

// countFor returns the counters of the pool key, noting the environment
// of spec (its task label is "env/task").
func (p *Provider) countFor(key string, spec sandbox.Spec) *poolCount {
	env, _, _ := strings.Cut(spec.Labels[sandbox.LabelTask], "/")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counts == nil {
		p.counts = map[string]*poolCount{}
	}
	c := p.counts[key]
	if c == nil {
		c = &poolCount{image: spec.Image, envs: map[string]bool{}}
		p.counts[key] = c
	}
	if env != "" {
		c.envs[env] = true
	}
	return c
}

// PoolStats returns the state of every pool a Create asked for, sorted by
// image; none without Options.WarmPool or Options.Reuse (Create counts
// nothing then); and
// the container removals pending and failed.
func (p *Provider) PoolStats() sandbox.PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := sandbox.PoolStats{Pools: []sandbox.Pool{}, Removing: p.rm.pending, RemoveErrors: p.rm.errors}
	for key, c := range p.counts {
		st.Pools = append(st.Pools, sandbox.Pool{
			Image: c.image, Envs: slices.Sorted(maps.Keys(c.envs)),
			PoolCounts: sandbox.PoolCounts{
				Target: p.opts.WarmPool, Ready: len(p.pool[key]), Starting: p.filling[key], Created: len(p.created[key]),
				FromPool: c.fromPool.Load(), Cold: c.coldN.Load(),
				Recycled: c.recycled.Load(), NotRecycled: c.notRecycled.Load(),
			},
		})
	}
	slices.SortFunc(st.Pools, func(a, b sandbox.Pool) int {
		return cmp.Or(cmp.Compare(a.Image, b.Image), slices.Compare(a.Envs, b.Envs))
	})
	return st
}
