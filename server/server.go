package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/semaphore"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
	"github.com/gymserver/gymserver/server/wire"
)

// Registry gives the server its environments. It is read concurrently and
// never changes while the server runs; *gym.Registry satisfies it.
type Registry interface {
	// Lookup returns the environment with the given id, or an error
	// wrapping gym.ErrNotFound.
	Lookup(id string) (gym.Env, error)
	// Specs returns the specs of all environments, sorted by id.
	Specs() []gym.EnvSpec
}

// Options configure a Server. Zero fields take the defaults of
// setDefaults, the one place where defaults live.
type Options struct {
	// Registry provides the environments; required.
	Registry Registry
	// Token, when set, is the bearer token every /v1/ws and /v1/envs
	// request must carry.
	Token string
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Version is reported by hello as server_version.
	Version string
	// Instance identifies this server process in hello; random if empty.
	Instance string
	// Containers reports the number of sandbox containers for the
	// gymserver_containers metric; nil counts one per open session.
	Containers func() int
	// Engines, if set, reports the Docker Engines behind the sandboxes,
	// served as {"engines": Engines()} at /v1/engines (404 when nil).
	Engines func() any
	// Collectors are more metrics for /metrics, e.g. per-engine ones.
	Collectors []prometheus.Collector

	MaxFrameBytes       int64
	MaxSessions         int
	MaxSessionsPerConn  int
	MaxInflightPerConn  int
	MaxConcurrentResets int
	// MaxSnapshotsPerConn bounds the snapshots one connection holds.
	MaxSnapshotsPerConn int
	// MaxQueuedBytesPerConn bounds the memory held by the requests one
	// connection has sent and not yet had answered, counted as their
	// decoded size (PROTOCOL.md §5). A request that does not fit is
	// refused at once with resource_exhausted / max_queued_bytes. It must
	// be at least MaxFrameBytes.
	MaxQueuedBytesPerConn int64
	// ResetWait is how long a reset waits for a start slot.
	ResetWait time.Duration
	// IdleSessionTTL closes sessions without requests for this long.
	IdleSessionTTL time.Duration
	// PingInterval is the heartbeat period; a connection silent for three
	// periods is closed.
	PingInterval time.Duration
	// DrainTimeout bounds how long Shutdown lets in-flight requests
	// finish before cancelling them.
	DrainTimeout time.Duration
	// CloseTimeout bounds the closing of one session (sandbox removal).
	// Serve gives Shutdown DrainTimeout plus CloseTimeout in all.
	CloseTimeout time.Duration
	// UI serves the read-only dashboard under /ui/ (ui.go), behind Token
	// when one is set.
	UI bool
}

// The defaults of Options.
const (
	DefaultMaxSessions         = 1024
	DefaultMaxSessionsPerConn  = 512
	DefaultMaxInflightPerConn  = 4096
	DefaultMaxConcurrentResets = 16
	DefaultMaxSnapshotsPerConn = 64
	DefaultResetWait           = 5 * time.Minute
	DefaultIdleSessionTTL      = 30 * time.Minute
	DefaultPingInterval        = 15 * time.Second
	DefaultDrainTimeout        = 5 * time.Minute
	DefaultCloseTimeout        = 2 * time.Minute

	// DefaultMaxQueuedBytesPerConn is four frames of the default
	// wire.DefaultMaxFrameBytes.
	DefaultMaxQueuedBytesPerConn = 64 << 20
)

// setDefaults fills the zero fields of o.
func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Instance == "" {
		var b [6]byte
		rand.Read(b[:])
		o.Instance = hex.EncodeToString(b[:])
	}
	setDefault(&o.MaxFrameBytes, wire.DefaultMaxFrameBytes)
	setDefault(&o.MaxSessions, DefaultMaxSessions)
	setDefault(&o.MaxSessionsPerConn, DefaultMaxSessionsPerConn)
	setDefault(&o.MaxInflightPerConn, DefaultMaxInflightPerConn)
	setDefault(&o.MaxConcurrentResets, DefaultMaxConcurrentResets)
	setDefault(&o.MaxSnapshotsPerConn, DefaultMaxSnapshotsPerConn)
	setDefault(&o.MaxQueuedBytesPerConn, DefaultMaxQueuedBytesPerConn)
	setDefault(&o.ResetWait, DefaultResetWait)
	setDefault(&o.IdleSessionTTL, DefaultIdleSessionTTL)
	setDefault(&o.PingInterval, DefaultPingInterval)
	setDefault(&o.DrainTimeout, DefaultDrainTimeout)
	setDefault(&o.CloseTimeout, DefaultCloseTimeout)
}

func setDefault[T int | int64 | time.Duration](p *T, def T) {
	if *p == 0 {
		*p = def
	}
}

// Validate reports every problem of o (after defaults), joined.
func (o *Options) Validate() error {
	var errs []error
	if o.Registry == nil {
		errs = append(errs, errors.New("registry is required"))
	}
	positive := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", name, v))
		}
	}
	positive("max frame bytes", o.MaxFrameBytes)
	positive("max sessions", int64(o.MaxSessions))
	positive("max sessions per connection", int64(o.MaxSessionsPerConn))
	positive("max in-flight requests per connection", int64(o.MaxInflightPerConn))
	positive("max concurrent resets", int64(o.MaxConcurrentResets))
	positive("max snapshots per connection", int64(o.MaxSnapshotsPerConn))
	positive("max queued bytes per connection", o.MaxQueuedBytesPerConn)
	positive("reset wait", int64(o.ResetWait))
	positive("idle session ttl", int64(o.IdleSessionTTL))
	positive("ping interval", int64(o.PingInterval))
	positive("drain timeout", int64(o.DrainTimeout))
	positive("close timeout", int64(o.CloseTimeout))
	if o.MaxFrameBytes > 0 && o.MaxFrameBytes < 1024 {
		errs = append(errs, fmt.Errorf("max frame bytes must be at least 1024, got %d", o.MaxFrameBytes))
	}
	// A smaller budget would refuse frames the frame limit allows, even
	// on an idle connection.
	if o.MaxQueuedBytesPerConn > 0 && o.MaxQueuedBytesPerConn < o.MaxFrameBytes {
		errs = append(errs, fmt.Errorf("max queued bytes per connection must be at least max frame bytes (%d), got %d", o.MaxFrameBytes, o.MaxQueuedBytesPerConn))
	}
	return errors.Join(errs...)
}

// Server serves environments over WebSocket. Create it with New, mount
// Handler (or call Serve), and end it with Shutdown.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	resets  *semaphore.Weighted
	hello   wire.HelloResult
	// forkers are the environments that support snapshots, by id; fork and
	// drop_snapshot are routed through them.
	forkers map[string]gym.Forker
	// pools are the environments' providers that report warm pools.
	pools []poolStater

	// baseCtx is the parent of every request context; cancelled when a
	// drain times out and at the end of Shutdown.
	baseCtx    context.Context
	cancelBase context.CancelFunc

	draining     atomic.Bool
	shutdownOnce sync.Once
	shutdownErr  error // Shutdown's result, written in shutdownOnce
	inflight     tracker
	bg           sync.WaitGroup // reaper and expiry goroutines
	stop         chan struct{}  // closed by Shutdown to stop the reaper
	ui           *dashboard     // nil without Options.UI

	// mu guards the fields below.
	mu       sync.Mutex
	closed   bool // no new connections
	conns    map[*conn]struct{}
	connWG   sync.WaitGroup
	sessions map[*session]struct{}
	reserved int // sessions open or being reset
}

// New returns a server with o's settings; it starts the idle-session
// reaper, so the caller must call Shutdown.
func New(o Options) (*Server, error) {
	o.setDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("server options: %w", err)
	}
	s := &Server{
		opts:     o,
		log:      o.Logger,
		resets:   semaphore.NewWeighted(int64(o.MaxConcurrentResets)),
		stop:     make(chan struct{}),
		conns:    make(map[*conn]struct{}),
		sessions: make(map[*session]struct{}),
	}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	containers := func() float64 {
		if o.Containers != nil {
			return float64(o.Containers())
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.sessions))
	}
	s.forkers = forkers(o.Registry)
	var envIDs []string
	for _, spec := range o.Registry.Specs() {
		envIDs = append(envIDs, spec.ID)
	}
	s.metrics = newMetrics(containers, envIDs, s.forkers)
	for _, c := range o.Collectors {
		if err := s.metrics.reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: metrics: %w", err)
		}
	}
	if s.pools = poolStaters(o.Registry); len(s.pools) > 0 {
		s.metrics.reg.MustRegister(poolCollector{s})
	}
	if o.UI {
		s.ui = newDashboard(s)
	}
	ops := wire.Ops()
	caps := []string{wire.CapPipelining, wire.CapMultiSession, wire.CapMultiCall, wire.CapRawText, wire.CapEvaluate}
	if len(s.forkers) > 0 {
		caps = append(caps, wire.CapSnapshot)
	} else {
		ops = slices.DeleteFunc(ops, func(op string) bool { return slices.Contains(wire.SnapshotOps(), op) })
	}
	s.hello = wire.HelloResult{
		Server:        "gymserver",
		ServerVersion: o.Version,
		Protocol:      wire.Version,
		Subprotocol:   wire.Subprotocol,
		Instance:      o.Instance,
		Ops:           ops,
		Parsers:       toolparse.Parsers(),
		Capabilities:  caps,
		Limits: wire.Limits{
			MaxFrameBytes:               o.MaxFrameBytes,
			MaxSessions:                 o.MaxSessions,
			MaxSessionsPerConnection:    o.MaxSessionsPerConn,
			MaxInflightPerConnection:    o.MaxInflightPerConn,
			MaxConcurrentResets:         o.MaxConcurrentResets,
			ResetWait:                   o.ResetWait.Seconds(),
			IdleSessionTTL:              o.IdleSessionTTL.Seconds(),
			PingInterval:                o.PingInterval.Seconds(),
			MaxDepth:                    wire.MaxDepth,
			MaxSnapshotsPerConnection:   o.MaxSnapshotsPerConn,
			MaxQueuedBytesPerConnection: o.MaxQueuedBytesPerConn,
		},
	}
	s.bg.Add(1)
	go s.reap()
	return s, nil
}

// Handler returns the HTTP handler: /v1/ws, /v1/envs,
// /v1/envs/{id}/tasks, /v1/engines (with Options.Engines), /healthz,
// /metrics, and /ui/ with Options.UI.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", s.healthz)
	r.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate)
		r.Get("/v1/envs", s.envsJSON)
		if s.opts.Engines != nil {
			r.Get("/v1/engines", s.enginesJSON)
		}
		r.Get("/v1/envs/{id}/tasks", s.tasksJSON)
		r.Get(wire.Path, s.upgrade)
	})
	if s.ui != nil {
		s.ui.routes(r)
	}
	return r
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}

// forkers returns the environments of reg that support snapshots.
func forkers(reg Registry) map[string]gym.Forker {
	out := make(map[string]gym.Forker)
	for _, spec := range reg.Specs() {
		if env, err := reg.Lookup(spec.ID); err == nil {
			if f, ok := env.(gym.Forker); ok {
				out[spec.ID] = f
			}
		}
	}
	return out
}

// envSpecs returns the environments' specs in wire form, with their
// snapshot support and at most wire.EnvsTasks tasks each.
func (s *Server) envSpecs() []wire.EnvSpec {
	specs := s.opts.Registry.Specs()
	out := make([]wire.EnvSpec, len(specs))
	for i, spec := range specs {
		out[i] = wire.FromEnvSpec(envsSpec(spec))
		_, out[i].Snapshot = s.forkers[spec.ID]
	}
	return out
}

func (s *Server) envsJSON(w http.ResponseWriter, _ *http.Request) {
	// envJSON is gym.EnvSpec plus the wire-only snapshot flag.
	type envJSON struct {
		gym.EnvSpec
		Snapshot bool `json:"snapshot,omitempty"`
	}
	specs := s.opts.Registry.Specs()
	out := make([]envJSON, len(specs))
	for i, spec := range specs {
		_, ok := s.forkers[spec.ID]
		out[i] = envJSON{EnvSpec: envsSpec(spec), Snapshot: ok}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Envs []envJSON `json:"envs"`
	}{out})
}

func (s *Server) enginesJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Engines any `json:"engines"`
	}{s.opts.Engines()})
}

// authenticate refuses requests without the bearer token, when there is one.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Token != "" {
			h := r.Header.Get("Authorization")
			tok, ok := bearerToken(h)
			if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) != 1 {
				msg := "missing bearer token"
				if h != "" {
					msg = "wrong bearer token"
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="gymserver"`)
				s.httpError(w, http.StatusUnauthorized, gym.Errorf(gym.ClassUnauthenticated, "%s", msg))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken returns the token of an Authorization header value of the
// Bearer scheme. The scheme name is case-insensitive (RFC 7235 §2.1).
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// httpError writes err as the JSON error object of PROTOCOL.md.
func (s *Server) httpError(w http.ResponseWriter, status int, err error) {
	we := wireError(err)
	s.metrics.errors.WithLabelValues(we.Code).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Error *wire.Error `json:"error"`
	}{we})
}

// upgrade turns the request into a protocol connection and serves it until
// it closes.
func (s *Server) upgrade(w http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		s.httpError(w, http.StatusBadRequest, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "%s needs a WebSocket upgrade", wire.Path))
		return
	}
	offered := false
	for _, p := range websocket.Subprotocols(r) {
		offered = offered || p == wire.Subprotocol
	}
	if !offered {
		s.httpError(w, http.StatusBadRequest, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest,
			"subprotocol %s not offered (Sec-WebSocket-Protocol: %q)", wire.Subprotocol, r.Header.Get("Sec-WebSocket-Protocol")))
		return
	}
	// Refused after the request checks (the token, then the upgrade and
	// subprotocol): a drain does not hide a mistake in the request.
	if s.draining.Load() {
		s.httpError(w, http.StatusServiceUnavailable, errDraining())
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.httpError(w, http.StatusServiceUnavailable, errDraining())
		return
	}
	s.connWG.Add(1)
	s.mu.Unlock()
	defer s.connWG.Done()

	up := websocket.Upgrader{
		ReadBufferSize:  64 << 10,
		WriteBufferSize: 64 << 10,
		Subprotocols:    []string{wire.Subprotocol},
		// Trainers are not browsers; the bearer token is the access check.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		s.log.Debug("upgrade failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	c := newConn(s, ws, r.RemoteAddr)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down"), time.Now().Add(time.Second))
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.metrics.connections.Inc()
	c.serve()
	s.metrics.connections.Dec()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Serve serves HTTP on ln until ctx ends, then drains (Shutdown) and
// returns. While the drain runs, ln stays open: /healthz answers 503 and
// new WebSocket upgrades are refused with 503 unavailable/draining, so that
// load balancers and clients see a draining server, not a refused
// connection; ln closes when the drain ends. Cancelling ctx is not an
// error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var serveErr error
	select {
	case err := <-errc:
		serveErr = fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("draining", "timeout", s.opts.DrainTimeout)
	// In-flight requests get DrainTimeout (see Shutdown), the closing of
	// sessions and connections after them CloseTimeout.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.DrainTimeout+s.opts.CloseTimeout)
	defer cancel()
	// hs keeps serving while the drain runs; hijacked connections are
	// drained by Shutdown itself.
	err := s.Shutdown(sctx)
	// Now close the listener, and wait for plain HTTP requests.
	if herr := hs.Shutdown(sctx); herr != nil {
		hs.Close()
	}
	if serveErr != nil {
		return errors.Join(serveErr, err)
	}
	<-errc
	return err
}

// Shutdown drains the server: new connections, sessions, steps and
// evaluations are refused; in-flight requests finish (for DrainTimeout at
// most, then they are cancelled); every session is closed, every snapshot
// dropped, and every connection gets a going-away close frame after the
// answers already queued for it, all connections at once, so that a slow
// client holds up only itself.
//
// ctx bounds the whole shutdown. If it ends first, Shutdown cancels what
// still runs, closes every connection without a close frame and returns an
// error wrapping ctx.Err(); sessions still closing then finish on their
// own, each within CloseTimeout. Shutdown also returns the errors of
// closing the sessions. It runs once: later calls wait for it and return
// the same error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.draining.Store(true)
	dctx, cancel := context.WithTimeout(ctx, s.opts.DrainTimeout)
	if err := s.inflight.wait(dctx); err != nil {
		s.log.Warn("drain timed out; cancelling in-flight requests", "inflight", s.inflight.count())
	}
	cancel()
	s.cancelBase()

	s.mu.Lock()
	s.closed = true
	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	close(s.stop)
	for _, c := range conns {
		c.goAway()
	}
	// The connections' teardowns close their sessions too; closing them
	// all here, in parallel, collects the errors.
	done := make(chan error, 1)
	go func() {
		err := closeAll(sessions, false)
		s.connWG.Wait()
		s.bg.Wait()
		done <- err
	}()
	select {
	case err := <-done:
		s.log.Info("drained", "sessions_closed", len(sessions), "connections", len(conns))
		if err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	// Out of time: drop every connection at once; their readers end, and
	// their teardowns only wait for session closes, which are bounded.
	for _, c := range conns {
		c.ws.Close()
	}
	s.mu.Lock()
	left := len(s.sessions)
	leftConns := len(s.conns)
	s.mu.Unlock()
	s.log.Warn("shutdown timed out", "sessions_left", left, "connections_left", leftConns)
	return fmt.Errorf("shutdown: %d sessions and %d connections still closing: %w", left, leftConns, ctx.Err())
}

// Listen listens on addr for Serve. It refuses a non-loopback address when
// token is empty: environments run arbitrary commands, so an open server
// must not be reachable from the network.
func Listen(addr, token string) (net.Listener, error) {
	if token == "" && !loopback(addr) {
		return nil, fmt.Errorf("listen %s: a non-loopback address needs a token (--token or GYMSERVER_TOKEN): %w", addr, gym.ErrInvalidArgument)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, nil
}

// loopback reports whether addr's host is a loopback name or address. An
// empty host means every interface and is not loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// reserve claims n session slots on the server, all or none; release
// gives them back.
func (s *Server) reserve(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.opts.MaxSessions-s.reserved {
		if n == 1 {
			return errorf(gym.ClassResourceExhausted, wire.ReasonMaxSessions,
				"server has %d sessions, the maximum (--max-sessions); close sessions first", s.opts.MaxSessions)
		}
		return errorf(gym.ClassResourceExhausted, wire.ReasonMaxSessions,
			"%d new sessions do not fit: server has %d of at most %d sessions (--max-sessions)", n, s.reserved, s.opts.MaxSessions)
	}
	s.reserved += n
	return nil
}

func (s *Server) release(n int) {
	s.mu.Lock()
	s.reserved -= n
	s.mu.Unlock()
}

// reap closes idle sessions until Shutdown.
func (s *Server) reap() {
	defer s.bg.Done()
	every := min(max(s.opts.IdleSessionTTL/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			all := make([]*session, 0, len(s.sessions))
			for sess := range s.sessions {
				all = append(all, sess)
			}
			s.mu.Unlock()
			// Locks are never nested: the sessions are checked after
			// s.mu is released.
			var idle []*session
			for _, sess := range all {
				if sess.expireIfIdle(now, s.opts.IdleSessionTTL) {
					idle = append(idle, sess)
				}
			}
			if len(idle) == 0 {
				continue
			}
			for _, sess := range idle {
				s.log.Info("closing idle session", "session_id", sess.id, "env", sess.env, "ttl", s.opts.IdleSessionTTL)
			}
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				closeAll(idle, true)
			}()
		}
	}
}

// tracker counts in-flight requests and lets Shutdown wait for zero.
type tracker struct {
	// mu guards the fields below.
	mu      sync.Mutex
	n       int
	waiters []chan struct{}
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		for _, w := range t.waiters {
			close(w)
		}
		t.waiters = nil
	}
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// wait returns when the count is zero or ctx ends.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	t.waiters = append(t.waiters, ch)
	t.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
