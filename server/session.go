package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// session is one open (or closed, kept as a tombstone) gym session of a
// connection.
type session struct {
	id   string
	env  string
	gs   gym.Session
	conn *conn

	closeOnce sync.Once
	closeDone chan struct{} // closed when Close has returned
	// result and closeErr are written before closeDone is closed.
	result   gym.Result
	closeErr error
	// live is what the dashboard shows of the session (ui.go).
	live liveStats

	// mu guards the fields below.
	mu       sync.Mutex
	tail     chan struct{} // done channel of the last queued request
	pending  int           // queued or running requests
	lastUsed time.Time
	closing  bool // close has begun: queued requests fail
	expired  bool // closed by the idle TTL
}

func newSession(c *conn, env string, gs gym.Session) *session {
	s := &session{id: gs.ID(), env: env, gs: gs, conn: c, closeDone: make(chan struct{}), lastUsed: time.Now()}
	s.live.opened = s.lastUsed
	return s
}

// enqueue reserves the next turn on the session: the returned prev is
// closed when every earlier request is done, and the caller closes done
// when its own request is. It fails when the session is closing.
func (s *session) enqueue() (prev <-chan struct{}, done chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, nil, s.closedError()
	}
	prev, done = s.tail, make(chan struct{})
	s.tail = done
	s.pending++
	return prev, done, nil
}

// finish ends a request begun with enqueue.
func (s *session) finish(done chan struct{}) {
	s.mu.Lock()
	s.pending--
	s.lastUsed = time.Now()
	s.mu.Unlock()
	close(done)
}

// isClosing reports whether close has begun.
func (s *session) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// closedError is the error of a request on a closing or closed session;
// s.mu must be held.
func (s *session) closedError() error {
	if s.expired {
		return errorf(gym.ClassNotFound, wire.ReasonSessionExpired,
			"session %s: closed after being idle for the idle-session TTL", s.id)
	}
	return errorf(gym.ClassEpisodeDone, wire.ReasonSessionClosed, "session %s: closed", s.id)
}

// closedErr is closedError taking the lock.
func (s *session) closedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closedError()
}

// expireIfIdle reports whether the session has had no request queued or
// running for ttl at now and was not closing yet; if so, it marks the
// session closing and expired at once, before close(true) runs, so that a
// later sweep of the reaper does not pick it again and requests arriving
// meanwhile fail with session_expired.
func (s *session) expireIfIdle(now time.Time, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending > 0 || s.closing || now.Sub(s.lastUsed) < ttl {
		return false
	}
	s.closing, s.expired = true, true
	return true
}

// close closes the session once: it stops a running step, removes the
// session from the tables (leaving a tombstone on its connection), closes
// the gym session and releases the session slots. Every caller gets the
// same result.
func (s *session) close(expired bool) (gym.Result, error) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		// expireIfIdle may have marked it expired already.
		s.expired = s.expired || expired
		s.mu.Unlock()
		c := s.conn
		c.forget(s)
		ctx, cancel := context.WithTimeout(context.Background(), c.srv.opts.CloseTimeout)
		defer cancel()
		s.result, s.closeErr = s.gs.Close(ctx)
		if s.closeErr != nil {
			c.log.Warn("close session", "session_id", s.id, "env", s.env, "err", s.closeErr)
		}
		c.srv.forget(s)
		c.srv.ui.closed(s, s.result, s.closeErr)
		close(s.closeDone)
	})
	<-s.closeDone
	return s.result, s.closeErr
}

// closeAll closes sessions in parallel and returns their close errors,
// joined (each names its session).
func closeAll(sessions []*session, expired bool) error {
	var g errgroup.Group
	g.SetLimit(32)
	errs := make([]error, len(sessions))
	for i, s := range sessions {
		g.Go(func() error {
			_, errs[i] = s.close(expired)
			return nil
		})
	}
	g.Wait()
	return errors.Join(errs...)
}
