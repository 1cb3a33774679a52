package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

// TestResetGroup: reset_group starts n sessions of one task and seed,
// concurrently (bounded by max_concurrent_resets), all or none, within
// the session limits.
func TestResetGroup(t *testing.T) {
	var (
		seeds     = make(chan *int64, 16)
		failAfter atomic.Int64
		calls     atomic.Int64
		pc        peakCounter
	)
	env := memEnv().SetResetHook(func(ctx context.Context, req gym.ResetRequest) error {
		pc.enter()
		defer pc.leave()
		seeds <- req.Seed
		if n := failAfter.Load(); n > 0 && calls.Add(1) == n {
			return fmt.Errorf("sandbox start: %w", gym.ErrSandbox)
		}
		return nil
	})
	ts := startServer(t, server.Options{MaxConcurrentResets: 2, MaxSessionsPerConn: 6}, env)
	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{})

	sessions, resets, err := c.ResetGroup(ctx, "mem", gym.ResetRequest{Task: "two"}, 4)
	if err != nil || len(sessions) != 4 || len(resets) != 4 {
		t.Fatalf("reset group: %d sessions, %v", len(sessions), err)
	}
	ids := map[string]bool{}
	for i, r := range resets {
		if r.TaskID != "two" || r.SessionID != sessions[i].ID() || ids[r.SessionID] {
			t.Errorf("session %d: %+v", i, r)
		}
		ids[r.SessionID] = true
	}
	if p := pc.peak.Load(); p > 2 {
		t.Errorf("%d resets ran at once, want at most max_concurrent_resets (2)", p)
	}
	// Without a task or seed the group still shares one: the server
	// draws a seed for all.
	for range 4 {
		<-seeds
	}
	if _, _, err := c.ResetGroup(ctx, "mem", gym.ResetRequest{}, 2); err != nil {
		t.Fatal(err)
	}
	a, b := <-seeds, <-seeds
	if a == nil || b == nil || *a != *b {
		t.Errorf("seeds of one group without a seed: %v and %v, want one drawn for both", a, b)
	}

	// All or none: a failing start leaves no session of the group.
	for _, s := range sessions {
		if _, err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	open := ts.env.OpenSessions()
	calls.Store(0)
	failAfter.Store(2)
	_, _, err = c.ResetGroup(ctx, "mem", gym.ResetRequest{Task: "hello"}, 3)
	wantErr(t, "group with a failing start", err, gym.ClassSandbox, "")
	if got := ts.env.OpenSessions(); !slices.Equal(got, open) {
		t.Errorf("open sessions after the failed group: %v, want %v", got, open)
	}
	failAfter.Store(0)
	// Limits are checked for the whole group before anything starts.
	resetsBefore := ts.env.Resets()
	_, _, err = c.ResetGroup(ctx, "mem", gym.ResetRequest{}, 5)
	wantErr(t, "group over the limit", err, gym.ClassResourceExhausted, wire.ReasonMaxConnectionSessions)
	if ts.env.Resets() != resetsBefore {
		t.Errorf("a refused group started %d sessions", ts.env.Resets()-resetsBefore)
	}
	_, _, err = c.ResetGroup(ctx, "nope", gym.ResetRequest{}, 2)
	wantErr(t, "group of an unknown env", err, gym.ClassNotFound, wire.ReasonUnknownEnv)
}
