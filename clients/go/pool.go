package gymclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
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
	// MaxConnections bounds the connections to one server (default 64):
	// the pool opens another when every open one holds the server's
	// max_sessions_per_connection (from hello).
	MaxConnections int
}

func (o *PoolOptions) setDefaults() {
	if o.RetryMin <= 0 {
		o.RetryMin = time.Second
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(30*time.Second, o.RetryMin)
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = 64
	}
}

// Pool spreads sessions over several servers. It holds one connection to
// each, and opens more to a server (up to PoolOptions.MaxConnections) when
// every open one holds the server's max_sessions_per_connection.
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
	url   string
	conns []*Client // the live connections, oldest first
	// perConn is the server's max_sessions_per_connection (0: no limit).
	perConn int
	// connPlacing counts the sessions being placed on each connection.
	connPlacing map[*Client]int
	dialing     chan struct{} // non-nil while a dial runs; closed when it ends
	placing     int           // sessions being placed on it
	failures    int           // consecutive failures to reach it
	retryAt     time.Time     // not before this after a failure
	lastErr     error
}

// sessions returns the open sessions of s's connections.
func (s *poolServer) sessions() int {
	n := 0
	for _, c := range s.conns {
		n += c.OpenSessions()
	}
	return n
}

// ServerStatus describes one server of a Pool.
type ServerStatus struct {
	URL string
	// Connected is true while the pool holds a live connection to it.
	Connected bool
	// Connections is the number of live connections to it.
	Connections int
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
		p.servers = append(p.servers, &poolServer{url: normalizeURL(u), connPlacing: map[*Client]int{}})
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
			var c *Client
			if c, errs[i] = p.connect(ctx, s, 0); c != nil {
				p.unreserve(s, c, 0)
			}
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
		clients = append(clients, s.conns...)
		s.conns = nil
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
		out[i] = ServerStatus{URL: s.url, Connected: len(s.conns) > 0, Connections: len(s.conns), Sessions: s.sessions()}
		if len(s.conns) == 0 {
			out[i].Err, out[i].RetryAt = s.lastErr, s.retryAt
		}
	}
	return out
}

// checkLocked drops s's lost connections, and starts the backoff when
// that leaves none.
func (p *Pool) checkLocked(s *poolServer) {
	if len(s.conns) == 0 {
		return
	}
	live := s.conns[:0]
	var lost error
	for _, c := range s.conns {
		if err := c.Err(); err != nil {
			c.Close()
			lost = err
			continue
		}
		live = append(live, c)
	}
	clear(s.conns[len(live):])
	s.conns = live
	if lost != nil && len(live) == 0 {
		p.failedLocked(s, lost)
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

// connect returns a connection to s with room for n more sessions and
// reserves them on it (undo with unreserve): the open connection with the
// fewest sessions, or a new one when every open one is full (one dial at
// a time per server).
func (p *Pool) connect(ctx context.Context, s *poolServer, n int) (*Client, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, gym.Errorf(gym.ClassUnavailable, "pool closed")
		}
		p.checkLocked(s)
		if len(s.conns) > 0 && s.perConn > 0 && n > s.perConn {
			p.mu.Unlock()
			return nil, gym.Errorf(gym.ClassResourceExhausted,
				"pool: server %s: %d sessions at once exceed its max_sessions_per_connection %d", s.url, n, s.perConn)
		}
		var best *Client
		bestLoad := 0
		for _, c := range s.conns {
			load := c.OpenSessions() + s.connPlacing[c]
			if s.perConn > 0 && load+n > s.perConn {
				continue
			}
			if best == nil || load < bestLoad {
				best, bestLoad = c, load
			}
		}
		if best != nil {
			s.connPlacing[best] += n
			p.mu.Unlock()
			return best, nil
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
		if len(s.conns) >= p.opts.MaxConnections {
			p.mu.Unlock()
			return nil, gym.Errorf(gym.ClassResourceExhausted,
				"pool: server %s: %d new sessions do not fit on any of its %d connections (max_sessions_per_connection %d; PoolOptions.MaxConnections)",
				s.url, n, len(s.conns), s.perConn)
		}
		done := make(chan struct{})
		s.dialing = done
		p.mu.Unlock()

		c, err := Dial(ctx, s.url, p.opts.Options)
		var limit int
		if err == nil {
			var h wire.HelloResult
			if h, err = c.Hello(ctx); err == nil {
				limit = h.Limits.MaxSessionsPerConnection
			}
		}

		p.mu.Lock()
		s.dialing = nil
		close(done)
		switch {
		case err != nil:
			p.failedLocked(s, err)
		case p.closed:
			err = gym.Errorf(gym.ClassUnavailable, "pool closed")
		default:
			s.conns = append(s.conns, c)
			s.perConn, s.failures, s.lastErr = limit, 0, nil
		}
		p.mu.Unlock()
		if err != nil {
			if c != nil {
				c.Close()
			}
			return nil, err
		}
	}
}

// unreserve undoes connect's reservation of n sessions on c.
func (p *Pool) unreserve(s *poolServer, c *Client, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.connPlacing[c] -= n; s.connPlacing[c] <= 0 {
		delete(s.connPlacing, c)
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
		if len(s.conns) == 0 && s.dialing == nil && now.Before(s.retryAt) {
			down = append(down, fmt.Errorf("%s (retry in %s): %w", s.url, s.retryAt.Sub(now).Round(time.Millisecond), s.lastErr))
			continue
		}
		load := s.placing + s.sessions()
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
	var full error // the last server found full
	for {
		s, err := p.claim(n, skip)
		if err != nil {
			if full != nil {
				return full
			}
			return err
		}
		c, err := p.connect(ctx, s, n)
		if err == nil {
			err = start(c)
			p.unreserve(s, c, n)
		}
		p.release(s, n)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, gym.ErrResourceExhausted) && c == nil {
			full = err // try the other servers
		} else if c != nil && c.Err() == nil {
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
