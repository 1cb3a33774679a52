package gymclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gymserver/gymserver/gym"
)

// PoolOptions configure a Pool. Zero fields take defaults.
type PoolOptions struct {
	// Options configure each connection.
	Options
	// RetryMin is how long a server that could not be reached (or whose
	// connection was lost) is left alone before the next try (default 1s);
	// each further failure doubles it, up to RetryMax (default 30s).
	RetryMin time.Duration
	RetryMax time.Duration
}

func (o *PoolOptions) setDefaults() {
	if o.RetryMin <= 0 {
		o.RetryMin = time.Second
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(30*time.Second, o.RetryMin)
	}
}

// Pool spreads sessions over several servers, one connection to each.
//
// Placement: a new session (Reset) goes to the reachable server with the
// fewest open sessions of this pool (Client.OpenSessions plus the resets
// being placed); ties go round robin. A group (ResetGroup) goes to one
// server as a whole. A snapshot belongs to the connection of the session
// that took it, so forks go there (Fork, or Session.Client().Fork).
//
// Failure: when a server goes away, its connection is lost and its
// sessions' requests fail with errors of class unavailable
// (errors.Is(err, gym.ErrUnavailable)), as on a single Client. The pool
// then places new sessions on the other servers, and tries the lost one
// again after a backoff (PoolOptions.RetryMin, doubling up to RetryMax)
// with a new connection. A reset that fails because its connection was
// lost under it is tried once more on another server.
//
// A Pool is safe for concurrent use. Close it to close every connection
// (the servers then close the sessions).
type Pool struct {
	opts PoolOptions

	// mu guards the fields below and those of the servers.
	mu      sync.Mutex
	servers []*poolServer
	next    int // where the round robin of ties starts
	closed  bool
}

// poolServer is one server of a pool.
type poolServer struct {
	url      string
	c        *Client       // nil when not connected
	dialing  chan struct{} // non-nil while a dial runs; closed when it ends
	placing  int           // sessions being placed on it
	failures int           // consecutive failures to reach it
	retryAt  time.Time     // not before this after a failure
	lastErr  error
}

// ServerStatus describes one server of a Pool.
type ServerStatus struct {
	URL string
	// Connected is true while the pool holds a live connection to it.
	Connected bool
	// Sessions is the number of the pool's open sessions on it.
	Sessions int
	// Err is the last failure to reach it, while it is not connected.
	Err error
	// RetryAt is when the pool tries it again, while it is not connected.
	RetryAt time.Time
}

// NewPool returns a pool over the servers at urls (as for Dial). It
// connects lazily, on the first request that needs a server.
func NewPool(urls []string, opts PoolOptions) (*Pool, error) {
	if len(urls) == 0 {
		return nil, gym.Errorf(gym.ClassInvalidArgument, "pool: no server URL")
	}
	opts.setDefaults()
	p := &Pool{opts: opts}
	for _, u := range urls {
		p.servers = append(p.servers, &poolServer{url: normalizeURL(u)})
	}
	return p, nil
}

// DialPool returns a pool over the servers at urls after trying to
// connect to each of them; it fails only when none can be reached.
func DialPool(ctx context.Context, urls []string, opts PoolOptions) (*Pool, error) {
	p, err := NewPool(urls, opts)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(p.servers))
	for i, s := range p.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = p.connect(ctx, s)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return p, nil
		}
	}
	p.Close()
	return nil, fmt.Errorf("pool: no server reachable: %w", errors.Join(errs...))
}

// Close closes every connection; the servers close their sessions.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	var clients []*Client
	for _, s := range p.servers {
		if s.c != nil {
			clients = append(clients, s.c)
			s.c = nil
		}
	}
	p.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	return nil
}

// Servers returns the state of each server, in the order of the URLs.
func (p *Pool) Servers() []ServerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ServerStatus, len(p.servers))
	for i, s := range p.servers {
		p.checkLocked(s)
		out[i] = ServerStatus{URL: s.url, Connected: s.c != nil}
		if s.c != nil {
			out[i].Sessions = s.c.OpenSessions()
		} else {
			out[i].Err, out[i].RetryAt = s.lastErr, s.retryAt
		}
	}
	return out
}

// checkLocked drops s's connection when it is lost and starts the backoff.
func (p *Pool) checkLocked(s *poolServer) {
	if s.c == nil {
		return
	}
	if err := s.c.Err(); err != nil {
		s.c.Close()
		s.c = nil
		p.failedLocked(s, err)
	}
}

// failedLocked records a failure to reach s and schedules the next try.
func (p *Pool) failedLocked(s *poolServer, err error) {
	s.lastErr = err
	s.failures++
	wait := p.opts.RetryMin
	for i := 1; i < s.failures && wait < p.opts.RetryMax; i++ {
		wait *= 2
	}
	s.retryAt = time.Now().Add(min(wait, p.opts.RetryMax))
}

// connect returns s's connection, dialing it when there is none (one dial
// at a time per server).
func (p *Pool) connect(ctx context.Context, s *poolServer) (*Client, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, gym.Errorf(gym.ClassUnavailable, "pool closed")
		}
		p.checkLocked(s)
		if s.c != nil {
			c := s.c
			p.mu.Unlock()
			return c, nil
		}
		if wait := s.dialing; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		s.dialing = done
		p.mu.Unlock()

		c, err := Dial(ctx, s.url, p.opts.Options)

		p.mu.Lock()
		s.dialing = nil
		close(done)
		switch {
		case err != nil:
			p.failedLocked(s, err)
		case p.closed:
			err = gym.Errorf(gym.ClassUnavailable, "pool closed")
		default:
			s.c, s.failures, s.lastErr = c, 0, nil
		}
		p.mu.Unlock()
		if err != nil {
			if c != nil {
				c.Close()
			}
			return nil, err
		}
		return c, nil
	}
}

// claim picks the server for n new sessions and reserves them on it:
// among the servers connected or due for a retry, not in skip, the one
// with the fewest sessions; ties round robin.
func (p *Pool) claim(n int, skip map[*poolServer]bool) (*poolServer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, gym.Errorf(gym.ClassUnavailable, "pool closed")
	}
	now := time.Now()
	var best *poolServer
	bestIdx, bestLoad := 0, 0
	var down []error
	for k := range p.servers {
		i := (p.next + k) % len(p.servers)
		s := p.servers[i]
		p.checkLocked(s)
		if skip[s] {
			continue
		}
		if s.c == nil && s.dialing == nil && now.Before(s.retryAt) {
			down = append(down, fmt.Errorf("%s (retry in %s): %w", s.url, s.retryAt.Sub(now).Round(time.Millisecond), s.lastErr))
			continue
		}
		load := s.placing
		if s.c != nil {
			load += s.c.OpenSessions()
		}
		if best == nil || load < bestLoad {
			best, bestIdx, bestLoad = s, i, load
		}
	}
	if best == nil {
		if len(down) == 0 {
			down = append(down, errors.New("every server was tried"))
		}
		return nil, gym.Classify(fmt.Errorf("pool: no server available: %w", errors.Join(down...)), gym.ClassUnavailable)
	}
	p.next = (bestIdx + 1) % len(p.servers)
	best.placing += n
	return best, nil
}

func (p *Pool) release(s *poolServer, n int) {
	p.mu.Lock()
	s.placing -= n
	p.mu.Unlock()
}

// place runs start on the client of the server claim picks for n
// sessions. When the server cannot be reached, or its connection is lost
// during start, it moves on to another server (start must be safe to
// repeat then: the server closes the sessions of a lost connection).
func (p *Pool) place(ctx context.Context, n int, start func(*Client) error) error {
	skip := map[*poolServer]bool{}
	for {
		s, err := p.claim(n, skip)
		if err != nil {
			return err
		}
		c, err := p.connect(ctx, s)
		if err == nil {
			err = start(c)
		}
		p.release(s, n)
		if err == nil || ctx.Err() != nil {
			return err
		}
		lost := c == nil || c.Err() != nil
		if !lost {
			return err
		}
		skip[s] = true
	}
}

// Reset starts an episode of env in a new session on the server the
// placement picks.
func (p *Pool) Reset(ctx context.Context, env string, req gym.ResetRequest) (*Session, gym.Reset, error) {
	var sess *Session
	var r gym.Reset
	err := p.place(ctx, 1, func(c *Client) error {
		var err error
		sess, r, err = c.Reset(ctx, env, req)
		return err
	})
	return sess, r, err
}

// ResetGroup starts n sessions of one task of env (a GRPO group; see
// Client.ResetGroup), all on one server.
func (p *Pool) ResetGroup(ctx context.Context, env string, req gym.ResetRequest, n int) ([]*Session, []gym.Reset, error) {
	var ss []*Session
	var rs []gym.Reset
	err := p.place(ctx, max(n, 1), func(c *Client) error {
		var err error
		ss, rs, err = c.ResetGroup(ctx, env, req, n)
		return err
	})
	return ss, rs, err
}

// Fork starts n sessions from a snapshot that the session from took; they
// run on from's server, which holds the snapshot.
func (p *Pool) Fork(ctx context.Context, from *Session, snapshotID string, n int) ([]*Session, []gym.Reset, error) {
	return from.Client().Fork(ctx, snapshotID, n)
}

// Specs returns the environments of the first server that answers.
func (p *Pool) Specs(ctx context.Context) ([]gym.EnvSpec, error) {
	var specs []gym.EnvSpec
	err := p.place(ctx, 0, func(c *Client) error {
		var err error
		specs, err = c.Specs(ctx)
		return err
	})
	return specs, err
}

// Env returns the environment id as a gym.Env whose resets go through the
// pool, so that code written against gym.Env (the rollout runner) spreads
// its sessions over the servers. Its spec is that of the first server
// that answers; every server should serve the same environments.
func (p *Pool) Env(ctx context.Context, id string) (gym.Env, error) {
	specs, err := p.Specs(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		if s.ID == id {
			return &poolEnv{p: p, spec: s}, nil
		}
	}
	return nil, fmt.Errorf("environment %q: %w", id, gym.ErrNotFound)
}

// poolEnv is an environment of every server of a pool.
type poolEnv struct {
	p    *Pool
	spec gym.EnvSpec
}

var _ gym.Env = (*poolEnv)(nil)

func (e *poolEnv) Spec() gym.EnvSpec { return e.spec }

func (e *poolEnv) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	s, r, err := e.p.Reset(ctx, e.spec.ID, req)
	if err != nil {
		return nil, r, err
	}
	return s, r, nil
}
