package docker

import (
	"context"
	"os"
	"time"
)

// Bounds on the removals that Sandbox.Close leaves running after it
// returns.
const (
	// removeWorkers is how many container removals run at once.
	removeWorkers = 4
	// maxPendingRemovals is how many removals may be pending (running or
	// waiting for a worker); a Close beyond it waits for one to end, so
	// that a storm of resets cannot pile up dead containers.
	maxPendingRemovals = 32
	// removeRetryAfter is the pause before a failed removal's retry.
	removeRetryAfter = 500 * time.Millisecond
)

// removal is the state of the provider's background container removals.
// Its fields are guarded by Provider.mu.
type removal struct {
	// pending counts the removals started and not ended; done is
	// broadcast (with Provider.mu) whenever one ends.
	pending int
	done    chan struct{}
	// errors counts the removals that failed twice.
	errors int64
	// workers bounds the removals running at once; max bounds pending.
	workers chan struct{}
	max     int
}

// startRemoval removes s's container in the background: it waits while
// too many removals are pending, then returns. The sandbox stays in the
// provider's live set until its container is gone, so Provider.Close
// waits for it and the counts stay honest.
func (p *Provider) startRemoval(s *Sandbox) {
	p.mu.Lock()
	for p.rm.pending >= p.rm.max {
		done := p.rm.done
		p.mu.Unlock()
		<-done
		p.mu.Lock()
	}
	p.rm.pending++
	p.mu.Unlock()
	go p.removeSandbox(s)
}

// removeSandbox removes s's container now, retrying once; a removal that
// fails again is logged, counted (PoolStats.RemoveErrors), and left to the
// janitor, to Provider.Close and to the reapers. It then forgets s and
// removes the dropped snapshots that s may have been the last user of.
func (p *Provider) removeSandbox(s *Sandbox) {
	p.rm.workers <- struct{}{}
	defer func() { <-p.rm.workers }()
	if s.copied != nil {
		<-s.copied
	}
	if s.sockDir != "" { // a container never started
		os.RemoveAll(s.sockDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	err := p.remove(ctx, s.id)
	if err != nil {
		p.log.Info("removing a container failed; retrying", "container", shortID(s.id), "err", err)
		select {
		case <-time.After(removeRetryAfter):
		case <-ctx.Done():
		}
		err = p.remove(ctx, s.id)
	}
	p.mu.Lock()
	if err != nil {
		p.rm.errors++
	}
	delete(p.live, s.id)
	p.pins.drop(s.id)
	dropped := len(p.dropped) > 0
	p.mu.Unlock()
	if err != nil {
		p.log.Warn("removing a container failed twice; the janitor or a reaper will", "container", shortID(s.id), "session_id", s.session, "err", err)
	}
	if dropped {
		if err := p.removeDropped(ctx); err != nil {
			p.log.Warn("removing dropped snapshots", "err", err)
		}
	}
	p.mu.Lock()
	p.rm.pending--
	close(p.rm.done)
	p.rm.done = make(chan struct{})
	p.mu.Unlock()
}

// waitRemovals waits until no removal is pending. Each is bounded by
// removeTimeout, twice.
func (p *Provider) waitRemovals() {
	p.mu.Lock()
	for p.rm.pending > 0 {
		done := p.rm.done
		p.mu.Unlock()
		<-done
		p.mu.Lock()
	}
	p.mu.Unlock()
}
