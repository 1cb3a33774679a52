package gymclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// Options configure Dial. Zero fields take defaults.
type Options struct {
	// Token is sent as "Authorization: Bearer <token>" on the upgrade.
	Token string
	// Header holds extra headers for the upgrade request.
	Header http.Header
	// HandshakeTimeout bounds the WebSocket handshake (default 30s); the
	// dial context bounds it too.
	HandshakeTimeout time.Duration
	// PingInterval is the heartbeat period (default 15s): the client pings
	// the server and declares the connection lost after three periods
	// without any frame from it. Negative disables heartbeats.
	PingInterval time.Duration
	// WriteTimeout bounds the writing of one request (default 30s).
	WriteTimeout time.Duration
	// MaxFrameBytes bounds the size of one response (default 256 MiB).
	MaxFrameBytes int64
}

func (o *Options) setDefaults() {
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 30 * time.Second
	}
	if o.PingInterval == 0 {
		o.PingInterval = 15 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.MaxFrameBytes == 0 {
		o.MaxFrameBytes = 256 << 20
	}
}

// Client is a connection to a gymserver. It is safe for concurrent use.
// Close it to release the connection; the server then closes every session
// opened through it.
type Client struct {
	url  string
	ws   *websocket.Conn
	opts Options
	// wmu serialises writes of data frames.
	wmu    sync.Mutex
	nextID atomic.Uint64
	// open counts the sessions started through this client and not yet
	// closed through it (see OpenSessions).
	open atomic.Int64
	wg   sync.WaitGroup // reader and pinger
	done chan struct{}  // closed when the connection is gone

	// mu guards the fields below.
	mu      sync.Mutex
	pending map[uint64]chan wire.RawResponse
	err     error // why the connection is gone
}

// Dial connects to the server at url: ws://HOST:PORT/v1/ws, or
// http(s)://HOST:PORT or HOST:PORT, to which the path is added.
func Dial(ctx context.Context, url string, opts Options) (*Client, error) {
	opts.setDefaults()
	url = normalizeURL(url)
	h := http.Header{}
	for k, v := range opts.Header {
		h[k] = v
	}
	if opts.Token != "" {
		h.Set("Authorization", "Bearer "+opts.Token)
	}
	d := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: opts.HandshakeTimeout,
		Subprotocols:     []string{wire.Subprotocol},
		ReadBufferSize:   64 << 10,
		WriteBufferSize:  64 << 10,
	}
	ws, resp, err := d.DialContext(ctx, url, h)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial %s: %w", url, httpError(resp, err))
		}
		return nil, fmt.Errorf("dial %s: %w", url, gym.Classify(err, gym.ClassUnavailable))
	}
	if ws.Subprotocol() != wire.Subprotocol {
		ws.Close()
		return nil, fmt.Errorf("dial %s: server did not select subprotocol %s: %w", url, wire.Subprotocol, gym.ErrUnavailable)
	}
	ws.SetReadLimit(opts.MaxFrameBytes)
	c := &Client{
		url:     url,
		ws:      ws,
		opts:    opts,
		done:    make(chan struct{}),
		pending: make(map[uint64]chan wire.RawResponse),
	}
	c.wg.Add(1)
	go c.read()
	if opts.PingInterval > 0 {
		c.wg.Add(1)
		go c.ping()
	}
	return c, nil
}

// normalizeURL turns http(s) URLs and bare host:port into WebSocket URLs
// with the protocol path.
func normalizeURL(u string) string {
	switch {
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case !strings.Contains(u, "://"):
		u = "ws://" + u
	}
	_, rest, _ := strings.Cut(u, "://")
	if !strings.Contains(rest, "/") {
		u += wire.Path
	}
	return u
}

// httpError turns a refused upgrade into a classified error, reading the
// server's JSON error object when there is one.
func httpError(resp *http.Response, err error) error {
	class := gym.ClassUnavailable
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		class = gym.ClassUnauthenticated
	case http.StatusBadRequest:
		class = gym.ClassInvalidArgument
	case http.StatusNotFound:
		class = gym.ClassNotFound
	}
	var body struct {
		Error *wire.Error `json:"error"`
	}
	if resp.Body != nil {
		if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body) == nil && body.Error != nil && body.Error.Code != "" {
			return fmt.Errorf("upgrade refused: HTTP %s: %w", resp.Status, errorFromWire(body.Error))
		}
	}
	return gym.Errorf(class, "upgrade refused: HTTP %s: %v", resp.Status, err)
}

// Close closes the connection; pending requests fail. The server closes
// the connection's sessions.
func (c *Client) Close() error {
	c.fail(errors.New("client closed"))
	c.wmu.Lock()
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	c.ws.Close()
	c.wg.Wait()
	return nil
}

// URL returns the server's WebSocket URL, as Dial completed it.
func (c *Client) URL() string { return c.url }

// OpenSessions returns the number of sessions started through c (Reset,
// ResetGroup, Fork) and not yet closed through Session.Close. Sessions
// the server ended on its own (idle timeout) count until closed.
func (c *Client) OpenSessions() int { return int(c.open.Load()) }

// newSession returns a session of c and counts it as open.
func (c *Client) newSession(id string) *Session {
	c.open.Add(1)
	return &Session{c: c, id: id}
}

// Done is closed when the connection is gone; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection is gone, or nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail marks the connection gone for err and fails pending requests.
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = gym.Classify(fmt.Errorf("connection lost: %w", err), gym.ClassUnavailable)
	close(c.done)
	for id, ch := range c.pending {
		delete(c.pending, id)
		close(ch)
	}
}

// read is the reader loop: it routes responses to their requests by id.
func (c *Client) read() {
	defer c.wg.Done()
	wait := 3 * c.opts.PingInterval
	extend := func() {
		if wait > 0 {
			c.ws.SetReadDeadline(time.Now().Add(wait))
		}
	}
	extend()
	c.ws.SetPongHandler(func(string) error { extend(); return nil })
	c.ws.SetPingHandler(func(data string) error {
		extend()
		err := c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.opts.WriteTimeout))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	for {
		mt, frame, err := c.ws.ReadMessage()
		if err != nil {
			c.fail(err)
			return
		}
		extend()
		if mt != websocket.BinaryMessage {
			continue
		}
		var resp wire.RawResponse
		if err := wire.Decode(frame, &resp); err != nil {
			id, ok := wire.PeekID(frame)
			if !ok {
				continue
			}
			resp = wire.RawResponse{ID: id, Error: &wire.Error{Code: string(gym.ClassInternal), Message: "undecodable response: " + err.Error(), Mask: true}}
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// ping sends heartbeats until the connection is gone.
func (c *Client) ping() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.opts.WriteTimeout)); err != nil {
				c.fail(err)
				c.ws.Close()
				return
			}
		}
	}
}

// Do sends req (its ID is assigned here) and decodes the result into
// result, which may be nil. It returns when the response arrives, ctx ends
// or the connection is lost. A request abandoned because ctx ended may
// still run on the server.
func (c *Client) Do(ctx context.Context, req wire.Request, result any) error {
	req.ID = c.nextID.Add(1)
	frame, err := wire.Encode(req)
	if err != nil {
		return fmt.Errorf("%s: %w", req.Op, gym.Classify(err, gym.ClassInvalidArgument))
	}
	ch := make(chan wire.RawResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", req.Op, err)
	}
	c.pending[req.ID] = ch
	c.mu.Unlock()
	if err := c.writeFrame(frame); err != nil {
		c.forget(req.ID)
		c.fail(err)
		c.ws.Close()
		return fmt.Errorf("%s: %w", req.Op, c.Err())
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: %w", req.Op, c.Err())
		}
		if !resp.OK {
			if resp.Error == nil {
				return fmt.Errorf("%s: %w", req.Op, gym.Errorf(gym.ClassInternal, "response without ok or error"))
			}
			return fmt.Errorf("%s: %w", req.Op, errorFromWire(resp.Error))
		}
		if result == nil {
			return nil
		}
		if err := wire.DecodeResult(resp.Result, result); err != nil {
			return fmt.Errorf("%s: decode result: %w", req.Op, gym.Classify(err, gym.ClassInternal))
		}
		return nil
	case <-ctx.Done():
		c.forget(req.ID)
		return fmt.Errorf("%s: %w", req.Op, ctx.Err())
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Client) writeFrame(f []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	return c.ws.WriteMessage(websocket.BinaryMessage, f)
}

// Error is an error reported by the server.
type Error struct {
	// Code is the error's gym class (a closed set).
	Code gym.ErrorClass
	// Reason refines Code for conditions the server detects itself; see
	// the wire.Reason constants.
	Reason string
	// Message is the server's message.
	Message string
	// Mask tells a trainer to drop the sample.
	Mask bool
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the gym sentinel of the error's class, so that
// errors.Is(err, gym.ErrEpisodeDone) and gym.ClassOf work.
func (e *Error) Unwrap() error { return gym.Sentinel(e.Code) }

// errorFromWire is the one place where wire errors become Go errors.
func errorFromWire(e *wire.Error) error {
	return &Error{Code: gym.ErrorClass(e.Code), Reason: e.Reason, Message: e.Message, Mask: e.Mask}
}

// Hello returns the server's versions, limits and capabilities.
func (c *Client) Hello(ctx context.Context) (wire.HelloResult, error) {
	var h wire.HelloResult
	err := c.Do(ctx, wire.Request{Op: wire.OpHello, Client: "gymserver-go"}, &h)
	return h, err
}

// Specs returns the specs of the server's environments.
func (c *Client) Specs(ctx context.Context) ([]gym.EnvSpec, error) {
	var res wire.EnvsResult
	if err := c.Do(ctx, wire.Request{Op: wire.OpEnvs}, &res); err != nil {
		return nil, err
	}
	out := make([]gym.EnvSpec, len(res.Envs))
	for i, e := range res.Envs {
		out[i] = wire.ToEnvSpec(e)
	}
	return out, nil
}

// Registry returns the server's environments as a gym.Registry of remote
// environments that reset through c.
func (c *Client) Registry(ctx context.Context) (*gym.Registry, error) {
	specs, err := c.Specs(ctx)
	if err != nil {
		return nil, err
	}
	envs := make([]gym.Env, len(specs))
	for i, s := range specs {
		envs[i] = &Env{c: c, spec: s}
	}
	return gym.NewRegistry(envs...)
}

// Env returns the remote environment with the given id.
func (c *Client) Env(ctx context.Context, id string) (*Env, error) {
	specs, err := c.Specs(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		if s.ID == id {
			return &Env{c: c, spec: s}, nil
		}
	}
	return nil, fmt.Errorf("environment %q: %w", id, gym.ErrNotFound)
}

// Tasks returns one page of env's tasks: up to limit of them (0 means
// the server's default of 100; at most 1000) from offset, and the number
// of tasks the environment has. A page may hold fewer than limit tasks
// even before the end (the server keeps responses under its frame limit);
// the next page starts at offset+len(tasks). Errors: gym.ErrNotFound for
// an unknown environment, gym.ErrInvalidArgument for an offset or limit
// out of range.
func (c *Client) Tasks(ctx context.Context, env string, offset, limit int) ([]gym.TaskSpec, int, error) {
	var res wire.TasksResult
	if err := c.Do(ctx, wire.Request{Op: wire.OpTasks, Env: env, Offset: offset, Limit: limit}, &res); err != nil {
		return nil, 0, fmt.Errorf("env %s: %w", env, err)
	}
	return wire.ToTaskSpecs(res.Tasks), res.Total, nil
}

// Reset starts an episode of env in a new remote session.
func (c *Client) Reset(ctx context.Context, env string, req gym.ResetRequest) (*Session, gym.Reset, error) {
	var res wire.ResetResult
	err := c.Do(ctx, wire.Request{Op: wire.OpReset, Env: env, Task: req.Task, Seed: req.Seed, Options: req.Options}, &res)
	if err != nil {
		return nil, gym.Reset{}, fmt.Errorf("env %s: %w", env, err)
	}
	return c.newSession(res.SessionID), wire.ToReset(res), nil
}

// Fork starts n sessions (n < 1 means 1) from a snapshot this connection
// took, and returns them with their initial observations (whose ForkOf,
// Steps and Actions say where they continue from). It is all or nothing:
// on error no session was kept. Errors: gym.ErrNotFound for a snapshot
// the connection does not hold, gym.ErrResourceExhausted when n sessions
// do not fit the server's limits.
func (c *Client) Fork(ctx context.Context, snapshotID string, n int) ([]*Session, []gym.Reset, error) {
	if n < 1 {
		n = 1
	}
	var res wire.ForkResult
	if err := c.Do(ctx, wire.Request{Op: wire.OpFork, Snapshot: snapshotID, N: n}, &res); err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", snapshotID, err)
	}
	sessions := make([]*Session, len(res.Sessions))
	resets := make([]gym.Reset, len(res.Sessions))
	for i, r := range res.Sessions {
		sessions[i] = c.newSession(r.SessionID)
		resets[i] = wire.ToReset(r)
	}
	return sessions, resets, nil
}

// ResetGroup starts n sessions of one task and seed of environment env at
// once (a GRPO group): the request's task, or the task its seed picks, or,
// with neither, one task the server picks for the whole group. It is all
// or nothing: on error no session was kept. Errors as Reset, and
// gym.ErrResourceExhausted when n sessions do not fit the server's limits.
func (c *Client) ResetGroup(ctx context.Context, env string, req gym.ResetRequest, n int) ([]*Session, []gym.Reset, error) {
	if n < 1 {
		n = 1
	}
	var res wire.ForkResult
	err := c.Do(ctx, wire.Request{Op: wire.OpResetGroup, Env: env, Task: req.Task, Seed: req.Seed,
		Options: req.Options, N: n}, &res)
	if err != nil {
		return nil, nil, fmt.Errorf("environment %s: reset group: %w", env, err)
	}
	sessions := make([]*Session, len(res.Sessions))
	resets := make([]gym.Reset, len(res.Sessions))
	for i, r := range res.Sessions {
		sessions[i] = c.newSession(r.SessionID)
		resets[i] = wire.ToReset(r)
	}
	return sessions, resets, nil
}

// DropSnapshot deletes a snapshot this connection took; sessions forked
// from it go on. Errors: gym.ErrNotFound for a snapshot the connection
// does not hold. Closing the client drops its snapshots too.
func (c *Client) DropSnapshot(ctx context.Context, snapshotID string) error {
	if err := c.Do(ctx, wire.Request{Op: wire.OpDropSnapshot, Snapshot: snapshotID}, nil); err != nil {
		return fmt.Errorf("snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// Env is a remote environment; it implements gym.Env, gym.TaskLister and
// gym.Forker (the server says whether the environment supports snapshots:
// see wire.EnvSpec.Snapshot and the hello capability "snapshot").
type Env struct {
	c    *Client
	spec gym.EnvSpec
}

var (
	_ gym.Env        = (*Env)(nil)
	_ gym.TaskLister = (*Env)(nil)
	_ gym.Forker     = (*Env)(nil)
)

// Spec describes the environment, as the server reported it: its first
// tasks (at most 100) and TaskCount, the number of all its tasks.
func (e *Env) Spec() gym.EnvSpec { return e.spec }

// taskPageTimeout bounds each request of Tasks, which has no context.
const taskPageTimeout = time.Minute

// Tasks lists up to limit tasks (all from offset when limit < 0) from
// offset, and the number of tasks, asking the server page by page. It
// implements gym.TaskLister, whose method has neither a context nor an
// error: each page is bounded by a minute, and when a page cannot be had
// Tasks falls back to the tasks of Spec (what envs listed, total
// included). A lost connection or a changed server then shows in the
// next Reset. Use ListTasks to see errors.
func (e *Env) Tasks(offset, limit int) ([]gym.TaskSpec, int) {
	tasks, total, err := e.ListTasks(context.Background(), offset, limit)
	if err != nil {
		all := e.spec.Tasks
		start := min(max(offset, 0), len(all))
		end := len(all)
		if limit >= 0 {
			end = min(start+limit, end)
		}
		return all[start:end], len(all)
	}
	return tasks, total
}

// ListTasks is Tasks with a context and an error: it pages through the
// server's task list (each request bounded by ctx and a minute) until it
// has limit tasks (all from offset when limit < 0) or the list ends.
func (e *Env) ListTasks(ctx context.Context, offset, limit int) ([]gym.TaskSpec, int, error) {
	offset = max(offset, 0)
	var out []gym.TaskSpec
	for {
		page := wire.MaxTasksLimit
		if limit >= 0 {
			// At least one task, so that limit 0 still learns the total.
			page = max(min(limit-len(out), page), 1)
		}
		pctx, cancel := context.WithTimeout(ctx, taskPageTimeout)
		tasks, total, err := e.c.Tasks(pctx, e.spec.ID, offset+len(out), page)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		out = append(out, tasks...)
		if limit >= 0 && len(out) >= limit {
			return out[:limit], total, nil
		}
		if len(tasks) == 0 || offset+len(out) >= total {
			return out, total, nil
		}
	}
}

// Reset starts an episode in a new remote session.
func (e *Env) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	s, r, err := e.c.Reset(ctx, e.spec.ID, req)
	if err != nil {
		return nil, r, err
	}
	return s, r, nil
}

// Fork starts one session from a snapshot taken on the same connection.
// The server routes it by the snapshot id, to the environment the snapshot
// belongs to.
func (e *Env) Fork(ctx context.Context, snapshotID string) (gym.Session, gym.Reset, error) {
	ss, rs, err := e.c.Fork(ctx, snapshotID, 1)
	if err != nil {
		return nil, gym.Reset{}, err
	}
	if len(ss) != 1 {
		return nil, gym.Reset{}, fmt.Errorf("snapshot %s: fork: server started %d sessions, want 1: %w", snapshotID, len(ss), gym.ErrInternal)
	}
	return ss[0], rs[0], nil
}

// DropSnapshot deletes a snapshot taken on the same connection.
func (e *Env) DropSnapshot(ctx context.Context, snapshotID string) error {
	return e.c.DropSnapshot(ctx, snapshotID)
}

// Session is a remote session; it implements gym.Session. Its methods may
// be called concurrently; the server runs them one at a time in the order
// it receives them (Close excepted: it stops a running step).
type Session struct {
	c      *Client
	id     string
	closed atomic.Bool // Close was called: no longer counted as open
}

var (
	_ gym.Session     = (*Session)(nil)
	_ gym.Snapshotter = (*Session)(nil)
)

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Client returns the connection the session belongs to; its snapshots
// belong to it too, so forks of them go through it (Client.Fork).
func (s *Session) Client() *Client { return s.c }

// Step applies an action: structured calls, or text (with its parser)
// that the server parses; the result's ToolCalls are the calls it ran.
func (s *Session) Step(ctx context.Context, a gym.Action) (gym.StepResult, error) {
	req := wire.Request{Op: wire.OpStep, Session: s.id}
	if a.Parser != "" {
		req.Text, req.Parser = &a.Text, a.Parser
	} else {
		req.ToolCalls = wire.FromToolCalls(a.ToolCalls)
		if req.ToolCalls == nil {
			req.ToolCalls = []wire.ToolCall{}
		}
	}
	var res wire.StepResult
	if err := s.c.Do(ctx, req, &res); err != nil {
		return gym.StepResult{}, fmt.Errorf("session %s: %w", s.id, err)
	}
	return wire.ToStepResult(res), nil
}

// StepText applies raw model text, parsed by the server with the named
// parser (hermes, json or react), and returns the calls it parsed too.
// Malformed calls come back as an agent_error observation, not an error.
// It is Step with a text action.
func (s *Session) StepText(ctx context.Context, parser, text string) (gym.StepResult, []gym.ToolCall, error) {
	res, err := s.Step(ctx, gym.Action{Text: text, Parser: parser})
	if err != nil {
		return gym.StepResult{}, nil, err
	}
	return res, res.ToolCalls, nil
}

// Evaluate ends the episode if it is running and returns its evaluation.
func (s *Session) Evaluate(ctx context.Context) (gym.Evaluation, error) {
	var ev wire.Evaluation
	if err := s.c.Do(ctx, wire.Request{Op: wire.OpEvaluate, Session: s.id}, &ev); err != nil {
		return gym.Evaluation{}, fmt.Errorf("session %s: %w", s.id, err)
	}
	return wire.ToEvaluation(ev), nil
}

// Snapshot saves the session's state on the server, after the requests
// sent before it. The snapshot belongs to the client's connection: fork it
// with Client.Fork, and it is dropped when the connection closes. Errors:
// gym.ErrEpisodeDone once the episode ended, gym.ErrInvalidArgument
// (reason unsupported) when the environment has no snapshots,
// gym.ErrResourceExhausted at the connection's snapshot limit.
func (s *Session) Snapshot(ctx context.Context) (gym.Snapshot, error) {
	var res wire.SnapshotResult
	if err := s.c.Do(ctx, wire.Request{Op: wire.OpSnapshot, Session: s.id}, &res); err != nil {
		return gym.Snapshot{}, fmt.Errorf("session %s: %w", s.id, err)
	}
	return wire.ToSnapshot(res.Snapshot), nil
}

// Close ends the episode, removes the sandbox and returns the final result.
func (s *Session) Close(ctx context.Context) (gym.Result, error) {
	if !s.closed.Swap(true) {
		s.c.open.Add(-1)
	}
	var res wire.Result
	if err := s.c.Do(ctx, wire.Request{Op: wire.OpClose, Session: s.id}, &res); err != nil {
		return gym.Result{}, fmt.Errorf("session %s: %w", s.id, err)
	}
	return wire.ToResult(res), nil
}
