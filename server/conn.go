package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
	"github.com/gymserver/gymserver/server/wire"
)

// maxTombstones is how many closed sessions a connection remembers, so that
// close stays idempotent and late requests get a precise error.
const maxTombstones = 1024

// conn is one WebSocket connection: one reader (serve's goroutine), one
// writer, and a goroutine per request.
type conn struct {
	srv *Server
	ws  *websocket.Conn
	log *slog.Logger

	// ctx is the parent of the connection's request contexts; cancelled
	// when the reader stops.
	ctx    context.Context
	cancel context.CancelFunc

	out        chan []byte   // frames for the writer
	quit       chan struct{} // closed to stop the writer
	writerDone chan struct{} // closed when the writer has stopped
	away       chan struct{} // closed by goAway
	awayOnce   sync.Once
	handlers   sync.WaitGroup
	inflight   atomic.Int64
	// queued is the decoded size of the requests holding a slot: read,
	// not yet answered (see acquire).
	queued   atomic.Int64
	pongWait time.Duration

	// mu guards the fields below.
	mu        sync.Mutex
	dead      bool // torn down: new sessions are closed at once
	sessions  map[string]*session
	reserved  int // sessions open or being reset
	tombs     map[string]*session
	tombOrder []string
	// snapshots maps the connection's snapshot ids to their environments.
	snapshots map[string]string
	// snapReserved counts snapshots held or being taken.
	snapReserved int
}

func newConn(s *Server, ws *websocket.Conn, remote string) *conn {
	ctx, cancel := context.WithCancel(s.baseCtx)
	return &conn{
		srv:        s,
		ws:         ws,
		log:        s.log.With("remote", remote),
		ctx:        ctx,
		cancel:     cancel,
		out:        make(chan []byte, 256),
		quit:       make(chan struct{}),
		writerDone: make(chan struct{}),
		away:       make(chan struct{}),
		pongWait:   3 * s.opts.PingInterval,
		sessions:   make(map[string]*session),
		tombs:      make(map[string]*session),
		snapshots:  make(map[string]string),
	}
}

// serve runs the connection until it closes, then closes its sessions.
func (c *conn) serve() {
	c.log.Debug("connection open")
	go c.write()
	err := c.read()
	c.log.Debug("connection closing", "err", err)
	c.teardown()
}

// read is the reader loop.
func (c *conn) read() error {
	ws := c.ws
	extend := func() { ws.SetReadDeadline(time.Now().Add(c.pongWait)) }
	extend()
	ws.SetPongHandler(func(string) error { extend(); return nil })
	ws.SetPingHandler(func(data string) error {
		extend()
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.pongWait))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	max := c.srv.opts.MaxFrameBytes
	var buf bytes.Buffer
	for {
		mt, r, err := ws.NextReader()
		if err != nil {
			return err
		}
		extend()
		buf.Reset()
		n, err := buf.ReadFrom(io.LimitReader(r, max+1))
		if err != nil {
			return err
		}
		if n > max {
			id, _ := wire.PeekID(buf.Bytes())
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
			c.reply(id, nil, errorf(gym.ClassResourceExhausted, wire.ReasonFrameTooLarge,
				"frame larger than the limit of %d bytes (max_frame_bytes)", max))
		} else if mt != websocket.BinaryMessage {
			c.reply(0, nil, errorf(gym.ClassInvalidArgument, wire.ReasonBadFrame, "text message: frames are binary msgpack"))
		} else {
			c.dispatch(buf.Bytes())
		}
		if buf.Cap() > 1<<20 {
			buf = bytes.Buffer{}
		}
	}
}

// write is the writer loop: frames in order, and heartbeats.
func (c *conn) write() {
	defer close(c.writerDone)
	ping := time.NewTicker(c.srv.opts.PingInterval)
	defer ping.Stop()
	for {
		select {
		case f := <-c.out:
			if !c.writeFrame(f) {
				return
			}
		case <-c.away:
			// Write the frames queued so far (the drained requests'
			// answers) first, then say goodbye and stop the reader.
			for n := len(c.out); n > 0; n-- {
				if !c.writeFrame(<-c.out) {
					return
				}
			}
			msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down")
			c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			c.ws.Close()
			return
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.pongWait)); err != nil {
				c.ws.Close()
				return
			}
		case <-c.quit:
			return
		}
	}
}

// writeFrame writes one frame; on failure it closes the WebSocket, which
// stops the reader, and returns false.
func (c *conn) writeFrame(f []byte) bool {
	c.ws.SetWriteDeadline(time.Now().Add(c.pongWait))
	if err := c.ws.WriteMessage(websocket.BinaryMessage, f); err != nil {
		c.log.Debug("write failed", "err", err)
		c.ws.Close()
		return false
	}
	return true
}

// send queues a frame for the writer; it gives up when the writer has
// stopped.
func (c *conn) send(f []byte) {
	select {
	case c.out <- f:
	case <-c.writerDone:
	}
}

// reply sends the response to request id: result, or err when not nil.
func (c *conn) reply(id uint64, result any, err error) {
	resp := wire.Response{ID: id, OK: err == nil, Result: result}
	if err != nil {
		resp.Result = nil
		resp.Error = wireError(err)
		c.srv.metrics.errors.WithLabelValues(resp.Error.Code).Inc()
		if resp.Error.Code == string(gym.ClassInternal) {
			c.log.Error("request failed", "id", id, "err", err)
		}
	}
	f, encErr := wire.Encode(resp)
	if encErr != nil {
		c.log.Error("encode response", "id", id, "err", encErr)
		f, _ = wire.Encode(wire.Response{ID: id, Error: wireError(encErr)})
	}
	c.send(f)
}

// teardown cancels the connection's requests, closes its sessions (removing
// their sandboxes), waits for its request goroutines, drops its snapshots
// and stops the writer.
func (c *conn) teardown() {
	c.cancel()
	c.mu.Lock()
	c.dead = true
	live := make([]*session, 0, len(c.sessions))
	for _, s := range c.sessions {
		live = append(live, s)
	}
	c.mu.Unlock()
	closeAll(live, false)
	c.handlers.Wait()
	// No request runs any more, so no snapshot can be added.
	dropped := c.dropAllSnapshots()
	close(c.quit)
	<-c.writerDone
	c.ws.Close()
	c.log.Debug("connection closed", "sessions_closed", len(live), "snapshots_dropped", dropped)
}

// goAway tells the client the server is going away, after the responses
// already queued, and closes the connection; serve then tears it down. It
// never blocks: the writer does the work, so a slow client holds up only
// its own connection.
func (c *conn) goAway() {
	c.awayOnce.Do(func() { close(c.away) })
}

// dispatch decodes one frame and starts its request.
func (c *conn) dispatch(frame []byte) {
	var req wire.Request
	if err := wire.Decode(frame, &req); err != nil {
		id, _ := wire.PeekID(frame)
		c.reply(id, nil, err)
		return
	}
	if id, err := checkID(frame, req.ID); err != nil {
		c.reply(id, nil, err)
		return
	}
	if req.Op == "" {
		c.reply(req.ID, nil, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest,
			"field op is required (one of %s)", strings.Join(c.srv.hello.Ops, ", ")))
		return
	}
	c.srv.metrics.requests.WithLabelValues(metricOp(req.Op)).Inc()
	switch req.Op {
	case wire.OpHello:
		h := c.srv.hello
		h.Draining = c.srv.draining.Load()
		if req.Client != "" {
			c.log.Debug("hello", "client", req.Client)
		}
		c.reply(req.ID, h, nil)
	case wire.OpEnvs:
		c.reply(req.ID, wire.EnvsResult{Envs: c.srv.envSpecs()}, nil)
	case wire.OpTasks:
		c.tasks(req)
	case wire.OpReset:
		if c.srv.draining.Load() {
			c.reply(req.ID, nil, errDraining())
			return
		}
		c.spawn(req.ID, requestBytes(&req), func() { c.reset(req) })
	case wire.OpStep, wire.OpEvaluate, wire.OpSnapshot:
		c.queue(req)
	case wire.OpClose:
		// close and drop_snapshot are how a client frees what holds the
		// budget, so it never refuses them: they keep only their ids,
		// which are short or else answered at once as unknown.
		req := wire.Request{ID: req.ID, Op: req.Op, Session: req.Session}
		c.spawn(req.ID, 0, func() { c.closeSession(req) })
	case wire.OpResetGroup:
		if c.srv.draining.Load() {
			c.reply(req.ID, nil, errDraining())
			return
		}
		c.spawn(req.ID, requestBytes(&req), func() { c.resetGroup(req) })
	case wire.OpFork:
		if c.srv.draining.Load() {
			c.reply(req.ID, nil, errDraining())
			return
		}
		c.spawn(req.ID, requestBytes(&req), func() { c.fork(req) })
	case wire.OpDropSnapshot:
		req := wire.Request{ID: req.ID, Op: req.Op, Snapshot: req.Snapshot}
		c.spawn(req.ID, 0, func() { c.dropSnapshot(req) })
	default:
		c.reply(req.ID, nil, errorf(gym.ClassInvalidArgument, wire.ReasonUnknownOp,
			"unknown op %q (want %s)", req.Op, strings.Join(c.srv.hello.Ops, ", ")))
	}
}

// checkID checks the id of a decoded request, decoded as id from frame: it
// must be an integer from 1 to wire.MaxID. When it is not, checkID returns
// the id to answer with, the request's own if it is a readable unsigned
// integer, else 0, and a bad_request error.
func checkID(frame []byte, id uint64) (uint64, error) {
	if id >= 1 && id <= wire.MaxID {
		return id, nil
	}
	// The decoder reads a negative id as its two's complement; PeekID
	// reads only non-negative integers.
	peeked, ok := wire.PeekID(frame)
	switch {
	case ok && peeked == 0:
		return 0, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest,
			"id 0 is not a request id (responses use it for unreadable ids); use 1 … 2^53−1")
	case ok:
		return peeked, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest,
			"id %d is larger than 2^53−1", peeked)
	case id != 0:
		return 0, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "id is negative; use 1 … 2^53−1")
	}
	return 0, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field id is required: an integer from 1 to 2^53−1")
}

// unknownOp is the op label of requests with an op not in wire.Ops.
const unknownOp = "unknown"

// metricOp bounds the op label to the known ops.
func metricOp(op string) string {
	for _, o := range wire.Ops() {
		if o == op {
			return op
		}
	}
	return unknownOp
}

func errDraining() error {
	return errorf(gym.ClassUnavailable, wire.ReasonDraining, "server is shutting down; retry on another server")
}

// acquire claims an in-flight slot and size bytes of the connection's
// queued-bytes budget for a request that will be answered later; when
// either is exhausted it answers the request at once and returns false.
// Refusing rather than pausing the reader keeps close, hello and pongs
// flowing while the budget is full. Only the reader calls acquire, so the
// budget cannot be overdrawn: releases only lower it.
func (c *conn) acquire(id uint64, size int64) bool {
	if c.inflight.Add(1) > int64(c.srv.opts.MaxInflightPerConn) {
		c.inflight.Add(-1)
		c.reply(id, nil, errorf(gym.ClassResourceExhausted, wire.ReasonMaxInflight,
			"connection has %d requests in flight, the maximum (max_inflight_per_connection)", c.srv.opts.MaxInflightPerConn))
		return false
	}
	max := c.srv.opts.MaxQueuedBytesPerConn
	if have := c.queued.Load(); size > max-have {
		c.inflight.Add(-1)
		c.reply(id, nil, errorf(gym.ClassResourceExhausted, wire.ReasonMaxQueuedBytes,
			"request of %d bytes does not fit: connection holds %d of at most %d bytes of unanswered requests (max_queued_bytes_per_connection); resend it once earlier requests are answered",
			size, have, max))
		return false
	}
	c.queued.Add(size)
	c.srv.metrics.queuedBytes.Add(float64(size))
	c.handlers.Add(1)
	c.srv.inflight.add()
	return true
}

// releaseSlot gives back what acquire claimed; the request has been
// answered.
func (c *conn) releaseSlot(size int64) {
	c.srv.inflight.done()
	c.srv.metrics.queuedBytes.Sub(float64(size))
	c.queued.Add(-size)
	c.inflight.Add(-1)
	c.handlers.Done()
}

// spawn runs fn in its own goroutine as request id, of size bytes (see
// requestBytes).
func (c *conn) spawn(id uint64, size int64, fn func()) {
	if !c.acquire(id, size) {
		return
	}
	go func() {
		defer c.releaseSlot(size)
		fn()
	}()
}

// Approximate sizes of decoded structures, for requestBytes.
const (
	// requestOverhead covers a wire.Request and the goroutine that
	// serves it (whose stack starts at 2 KiB).
	requestOverhead = 4 << 10
	// toolCallOverhead covers a wire.ToolCall and the gym.ToolCall made
	// from it.
	toolCallOverhead = 160
	// valueOverhead covers one option value: its interface and its map
	// entry or slice element.
	valueOverhead = 48
)

// requestBytes estimates the memory a decoded request keeps until it is
// answered: its strings, which are copies of the frame's bytes, and its
// decoded structures. The frame itself is not kept, so this is what
// max_queued_bytes_per_connection counts. A frame of many tiny values
// decodes to more than its length; one large text or arguments string to
// about its length.
func requestBytes(req *wire.Request) int64 {
	n := requestOverhead + len(req.Client) + len(req.Op) + len(req.Env) + len(req.Task) +
		len(req.Session) + len(req.Parser) + len(req.Snapshot)
	if req.Text != nil {
		n += len(*req.Text)
	}
	for _, tc := range req.ToolCalls {
		n += toolCallOverhead + len(tc.ID) + len(tc.Type) + len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	if req.Options != nil {
		n += valueBytes(req.Options)
	}
	return int64(n)
}

// valueBytes estimates the memory of a msgpack-decoded value. Its depth is
// bounded by wire.MaxDepth.
func valueBytes(v any) int {
	n := valueOverhead
	switch x := v.(type) {
	case string:
		n += len(x)
	case []byte:
		n += len(x)
	case []any:
		for _, e := range x {
			n += valueBytes(e)
		}
	case map[string]any:
		for k, e := range x {
			n += len(k) + valueBytes(e)
		}
	case map[any]any:
		for k, e := range x {
			n += valueBytes(k) + valueBytes(e)
		}
	}
	return n
}

// lookup returns the session with the given id: live, or closed (a
// tombstone, with ok false). Unknown ids are an error.
func (c *conn) lookup(id string) (s *session, live bool, err error) {
	if id == "" {
		return nil, false, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field session is required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[id]; ok {
		return s, true, nil
	}
	if s, ok := c.tombs[id]; ok {
		return s, false, nil
	}
	return nil, false, errorf(gym.ClassNotFound, wire.ReasonUnknownSession, "session %q is not open on this connection", id)
}

// forget removes a closing session from the connection, keeping a
// tombstone.
func (c *conn) forget(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions[s.id] != s {
		return
	}
	delete(c.sessions, s.id)
	c.reserved--
	c.tombs[s.id] = s
	c.tombOrder = append(c.tombOrder, s.id)
	if len(c.tombOrder) > maxTombstones {
		delete(c.tombs, c.tombOrder[0])
		c.tombOrder = c.tombOrder[1:]
	}
}

// forget removes a closed session from the server's table.
func (s *Server) forget(sess *session) {
	s.mu.Lock()
	_, ok := s.sessions[sess]
	delete(s.sessions, sess)
	if ok {
		s.reserved--
	}
	s.mu.Unlock()
	if ok {
		s.metrics.sessions.Dec()
	}
}

// reserveSessions claims n session slots on the connection and the
// server, all or none.
func (c *conn) reserveSessions(n int) error {
	max := c.srv.opts.MaxSessionsPerConn
	c.mu.Lock()
	if n > max-c.reserved { // not c.reserved+n: n comes from the wire and may be huge
		have := c.reserved
		c.mu.Unlock()
		if n == 1 {
			return errorf(gym.ClassResourceExhausted, wire.ReasonMaxConnectionSessions,
				"connection has %d sessions, the maximum (max_sessions_per_connection); close sessions first", max)
		}
		return errorf(gym.ClassResourceExhausted, wire.ReasonMaxConnectionSessions,
			"%d new sessions do not fit: connection has %d of at most %d sessions (max_sessions_per_connection)", n, have, max)
	}
	c.reserved += n
	c.mu.Unlock()
	if err := c.srv.reserve(n); err != nil {
		c.mu.Lock()
		c.reserved -= n
		c.mu.Unlock()
		return err
	}
	return nil
}

// unreserveSessions gives back n slots claimed by reserveSessions.
func (c *conn) unreserveSessions(n int) {
	c.mu.Lock()
	c.reserved -= n
	c.mu.Unlock()
	c.srv.release(n)
}

// register adds a new session to the connection and the server, or closes
// it when the connection is gone. It reports whether it was added.
func (c *conn) register(s *session) bool {
	c.mu.Lock()
	_, dup := c.sessions[s.id]
	if c.dead || dup {
		c.mu.Unlock()
		return false
	}
	c.sessions[s.id] = s
	c.mu.Unlock()
	c.srv.mu.Lock()
	c.srv.sessions[s] = struct{}{}
	c.srv.mu.Unlock()
	c.srv.metrics.sessions.Inc()
	c.srv.ui.opened(s)
	return true
}

// reset handles a reset request.
func (c *conn) reset(req wire.Request) {
	if req.Env == "" {
		c.reply(req.ID, nil, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field env is required"))
		return
	}
	env, err := c.srv.opts.Registry.Lookup(req.Env)
	if err != nil {
		c.reply(req.ID, nil, &reasonError{reason: wire.ReasonUnknownEnv, err: err})
		return
	}
	if req.Session != "" {
		old, live, err := c.lookup(req.Session)
		if err != nil {
			c.reply(req.ID, nil, err)
			return
		}
		if live {
			old.close(false)
		}
	}
	if err := c.reserveSessions(1); err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	registered := false
	defer func() {
		if !registered {
			c.unreserveSessions(1)
		}
	}()

	wctx, cancel := context.WithTimeout(c.ctx, c.srv.opts.ResetWait)
	err = c.srv.resets.Acquire(wctx, 1)
	cancel()
	if err != nil {
		if c.ctx.Err() == nil {
			err = errorf(gym.ClassResourceExhausted, wire.ReasonResetWait,
				"no reset slot free within %s (%d resets run at once, max_concurrent_resets)", c.srv.opts.ResetWait, c.srv.opts.MaxConcurrentResets)
		}
		c.reply(req.ID, nil, err)
		return
	}
	start := time.Now()
	gs, r, err := env.Reset(c.ctx, gym.ResetRequest{Task: req.Task, Seed: req.Seed, Options: wire.JSONMap(req.Options)})
	c.srv.resets.Release(1)
	if err != nil {
		c.reply(req.ID, nil, fmt.Errorf("reset %s: %w", req.Env, err))
		return
	}
	c.srv.metrics.reset.WithLabelValues(req.Env).Observe(time.Since(start).Seconds())
	s := newSession(c, req.Env, gs)
	if !c.register(s) {
		// The client went away during the reset (or reused an id):
		// remove the sandbox now.
		cctx, cancel := context.WithTimeout(context.Background(), c.srv.opts.CloseTimeout)
		gs.Close(cctx)
		cancel()
		c.reply(req.ID, nil, errorf(gym.ClassUnavailable, "", "session %s: connection closed during reset", gs.ID()))
		return
	}
	registered = true // the slots are the session's now; close releases them
	c.log.Debug("session open", "session_id", s.id, "env", req.Env, "task_id", r.TaskID)
	c.reply(req.ID, wire.FromReset(r), nil)
}

// queue handles step, evaluate and snapshot: they run on their session one
// at a time in arrival order.
func (c *conn) queue(req wire.Request) {
	s, live, err := c.lookup(req.Session)
	if err == nil && !live {
		if req.Op == wire.OpEvaluate {
			// A closed session still answers with its evaluation.
			c.spawn(req.ID, requestBytes(&req), func() { c.evaluateClosed(req, s) })
			return
		}
		err = s.closedErr()
	}
	if err == nil && c.srv.draining.Load() {
		err = errDraining()
	}
	var action gym.Action
	if err == nil && req.Op == wire.OpStep {
		err = checkAction(req)
		action.ToolCalls = wire.ToToolCalls(req.ToolCalls)
		if req.Text != nil {
			action.Text, action.Parser = *req.Text, req.Parser
		}
	}
	if err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	size := requestBytes(&req)
	if !c.acquire(req.ID, size) {
		return
	}
	prev, done, err := s.enqueue()
	if err != nil {
		c.reply(req.ID, nil, err)
		c.releaseSlot(size)
		return
	}
	go func() {
		defer c.releaseSlot(size)
		defer s.finish(done)
		if prev != nil {
			<-prev
		}
		if s.isClosing() {
			c.reply(req.ID, nil, s.closedErr())
			return
		}
		switch req.Op {
		case wire.OpStep:
			c.step(req, s, action)
		case wire.OpEvaluate:
			c.evaluate(req, s)
		case wire.OpSnapshot:
			c.snapshot(req, s)
		}
	}()
}

// checkAction validates the action fields of a step request.
func checkAction(req wire.Request) error {
	if req.Text == nil {
		return nil
	}
	if len(req.ToolCalls) > 0 {
		return errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "step has both tool_calls and text; send one")
	}
	if toolparse.Known(req.Parser) {
		return nil
	}
	if req.Parser == "" {
		return errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "step with text needs a parser (%s)", strings.Join(toolparse.Parsers(), ", "))
	}
	return errorf(gym.ClassInvalidArgument, wire.ReasonUnknownParser, "unknown parser %q (want %s)", req.Parser, strings.Join(toolparse.Parsers(), ", "))
}

// step runs one step on s, its turn having come. The session reads the
// action, its text included: parsing is the episode logic's.
func (c *conn) step(req wire.Request, s *session, action gym.Action) {
	start := time.Now()
	res, err := s.gs.Step(c.ctx, action)
	if err != nil {
		if s.isClosing() {
			err = s.closedErr()
		}
		c.reply(req.ID, nil, err)
		return
	}
	took := time.Since(start)
	c.srv.metrics.step.WithLabelValues(s.env).Observe(took.Seconds())
	c.srv.ui.stepped(s, res, took)
	c.reply(req.ID, wire.FromStepResult(res), nil)
}

// evaluate runs evaluate on s, its turn having come.
func (c *conn) evaluate(req wire.Request, s *session) {
	ev, err := s.gs.Evaluate(c.ctx)
	if err != nil {
		if s.isClosing() {
			err = s.closedErr()
		}
		c.reply(req.ID, nil, err)
		return
	}
	c.reply(req.ID, wire.FromEvaluation(ev), nil)
}

// evaluateClosed answers evaluate on a closed session from its result.
func (c *conn) evaluateClosed(req wire.Request, s *session) {
	res, _ := s.close(false) // already closed: waits for and returns the result
	if res.Evaluation == nil {
		c.reply(req.ID, nil, s.closedErr())
		return
	}
	c.reply(req.ID, wire.FromEvaluation(*res.Evaluation), nil)
}

// closeSession handles close.
func (c *conn) closeSession(req wire.Request) {
	s, _, err := c.lookup(req.Session)
	if err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	res, err := s.close(false)
	if err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	c.reply(req.ID, wire.FromResult(res), nil)
}
