package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/internal/waittest"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

// logBuffer collects a server's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count returns how often each value of attr appears in the records with
// message msg.
func (b *logBuffer) count(t *testing.T, msg, attr string) map[string]int {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			v, _ := rec[attr].(string)
			n[v]++
		}
	}
	return n
}

// closeHookEnv is a gymtest.Env whose sessions call hook before they
// close; the hook's error is Close's.
type closeHookEnv struct {
	*gymtest.Env
	hook func(ctx context.Context, id string) error
}

func (e closeHookEnv) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	s, r, err := e.Env.Reset(ctx, req)
	if err != nil {
		return nil, r, err
	}
	return closeHookSession{Session: s, hook: e.hook}, r, nil
}

type closeHookSession struct {
	gym.Session
	hook func(ctx context.Context, id string) error
}

func (s closeHookSession) Close(ctx context.Context) (gym.Result, error) {
	herr := s.hook(ctx, s.ID())
	res, err := s.Session.Close(ctx)
	if herr != nil {
		return res, herr
	}
	return res, err
}

// TestReaperPicksSessionOnce checks that a sweep of the idle reaper does
// not pick sessions an earlier sweep is still closing: more idle sessions
// than close at once, whose closing is slow, are each picked once.
func TestReaperPicksSessionOnce(t *testing.T) {
	const ttl = 400 * time.Millisecond
	release := make(chan struct{})
	mem := memEnv()
	reg, err := gym.NewRegistry(closeHookEnv{Env: mem, hook: func(ctx context.Context, _ string) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	ts := startServer(t, server.Options{
		Registry:       reg,
		IdleSessionTTL: ttl,
		Logger:         slog.New(slog.NewJSONHandler(&logs, nil)),
	}, mem)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server's drain, which closes sessions

	// More sessions than the reaper closes at once (32), reset together
	// so that they fall idle within one or two sweeps.
	const n = 80
	rc := dialRaw(t, ts, nil)
	for i := range n {
		rc.request(wire.Request{ID: uint64(1 + i), Op: wire.OpReset, Env: "mem"})
	}
	ids := map[string]bool{}
	for range n {
		r := rc.next()
		var res wire.ResetResult
		if !r.OK || wire.DecodeResult(r.Result, &res) != nil {
			t.Fatalf("reset: %+v", r.Error)
		}
		ids[res.SessionID] = true
	}
	waittest.For(t, "every session to be picked by the reaper", 10*time.Second, func() bool {
		return len(logs.count(t, "closing idle session", "session_id")) >= n
	})
	// A session opened now is picked by a sweep that runs after all of
	// the above were picked, while their closing is still blocked.
	var probe wire.ResetResult
	if r := rc.call(wire.Request{ID: 1000, Op: wire.OpReset, Env: "mem"}, &probe); !r.OK {
		t.Fatalf("reset: %+v", r.Error)
	}
	waittest.For(t, "the probe session to be picked", 10*time.Second, func() bool {
		return logs.count(t, "closing idle session", "session_id")[probe.SessionID] > 0
	})
	for id, k := range logs.count(t, "closing idle session", "session_id") {
		if k != 1 {
			t.Errorf("session %s picked by %d sweeps, want 1", id, k)
		}
		if !ids[id] && id != probe.SessionID {
			t.Errorf("unknown session %s picked", id)
		}
	}
	// A request on a picked session is refused at once as expired, even
	// before its close has run.
	var some string
	for id := range ids {
		some = id
		break
	}
	r := rc.call(wire.Request{ID: 1001, Op: wire.OpStep, Session: some}, nil)
	if r.OK || r.Error.Reason != wire.ReasonSessionExpired {
		t.Errorf("step on a picked session: %+v, want session_expired", r.Error)
	}
	unblock()
	waittest.For(t, "the sessions to close", 10*time.Second, func() bool { return len(mem.OpenSessions()) == 0 })
}
