package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/internal/waittest"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

// act steps s with calls and fails the test on error.
func act(t *testing.T, s gym.Session, calls ...gym.ToolCall) gym.StepResult {
	t.Helper()
	res, err := s.Step(t.Context(), gym.Action{ToolCalls: calls})
	if err != nil {
		t.Fatalf("session %s: step: %v", s.ID(), err)
	}
	return res
}

func write(path, content string) gym.ToolCall {
	return tc("", gym.ToolWriteFile, fmt.Sprintf(`{"filepath":%q,"content":%q}`, path, content))
}

func cat(path string) gym.ToolCall {
	return tc("", gym.ToolExecuteCommand, fmt.Sprintf(`{"command":"cat %s"}`, path))
}

func markDone() gym.ToolCall { return tc("", gym.ToolMarkDone, `{}`) }

// wantErr checks that err is a server error with code and reason.
func wantErr(t *testing.T, what string, err error, code gym.ErrorClass, reason string) {
	t.Helper()
	var ce *gymclient.Error
	if !errors.As(err, &ce) || ce.Code != code || ce.Reason != reason {
		t.Errorf("%s: %v, want %s/%s", what, err, code, reason)
	}
}

func TestSnapshotAndFork(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	h, err := c.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(h.Capabilities, wire.CapSnapshot) || !slices.Contains(h.Ops, wire.OpFork) || h.Limits.MaxSnapshotsPerConnection != server.DefaultMaxSnapshotsPerConn {
		t.Errorf("hello = %+v, want the snapshot capability, ops and limit", h)
	}
	orig, _, err := c.Reset(ctx, "mem", gym.ResetRequest{Task: "two"})
	if err != nil {
		t.Fatal(err)
	}
	act(t, orig, write("x", "1"))
	snap, err := orig.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.EnvID != "mem" || snap.TaskID != "two" || snap.SessionID != orig.ID() || snap.Steps != 1 || snap.Actions != 1 ||
		time.Since(snap.Created) > time.Minute || !slices.Equal(ts.env.Snapshots(), []string{snap.ID}) {
		t.Fatalf("snapshot = %+v; env holds %v", snap, ts.env.Snapshots())
	}
	// The original goes on and changes what the snapshot saved.
	act(t, orig, write("x", "changed"))

	forks, resets, err := c.Fork(ctx, snap.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 3 || len(resets) != 3 {
		t.Fatalf("fork: %d sessions, %d resets", len(forks), len(resets))
	}
	ids := map[string]bool{orig.ID(): true}
	for i, r := range resets {
		if r.ForkOf != snap.ID || r.Steps != 1 || r.Actions != 1 || r.TaskID != "two" || r.SessionID != forks[i].ID() ||
			len(r.Tools) != 4 || len(r.Messages) != 2 || ids[r.SessionID] {
			t.Errorf("fork %d: reset %+v", i, r)
		}
		ids[r.SessionID] = true
		// Each fork sees the snapshot's files and continues its counts.
		res := act(t, forks[i], cat("x"))
		if got := res.Observation.Messages[0].Content; got != gymtest.Output("1") || res.Info.Step != 2 || res.Info.Actions != 2 {
			t.Errorf("fork %d: cat x = %q at step %d, actions %d; want \"1\" at step 2, actions 2", i, got, res.Info.Step, res.Info.Actions)
		}
	}
	// Forks are independent of each other and of the original.
	act(t, forks[0], write("y", "2"))
	act(t, forks[1], write("y", "wrong"))
	if got := act(t, forks[2], cat("y")).Observation.Messages[0].Content; !strings.Contains(got, "No such file") {
		t.Errorf("fork 2 sees fork 0's or 1's file: %q", got)
	}
	if got := act(t, orig, cat("y")).Observation.Messages[0].Content; !strings.Contains(got, "No such file") {
		t.Errorf("the original sees a fork's file: %q", got)
	}
	// Rewards are per fork.
	for i, want := range []float64{1, 0.5, 0.5} {
		res := act(t, forks[i], markDone())
		if !res.Terminated || res.Reward != want || res.Info.Step != 4 {
			t.Errorf("fork %d: final step reward %v (step %d, terminated %v), want %v at step 4", i, res.Reward, res.Info.Step, res.Terminated, want)
		}
	}
	if res := act(t, orig, markDone()); res.Reward != 0 {
		t.Errorf("original: reward %v, want 0 (x changed, no y)", res.Reward)
	}
	body := scrape(t, ts)
	for _, want := range []string{"gymserver_snapshots 1", `gymserver_fork_seconds_count{env="mem"} 3`, `gymserver_snapshot_seconds_count{env="mem"} 1`,
		"gymserver_sessions 4", `gymserver_requests_total{op="fork"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The remote environment is a gym.Forker too.
	env, err := c.Env(ctx, "mem")
	if err != nil {
		t.Fatal(err)
	}
	var forker gym.Forker = env
	f, r, err := forker.Fork(ctx, snap.ID)
	if err != nil || r.ForkOf != snap.ID || f.ID() != r.SessionID {
		t.Fatalf("Env.Fork: %+v %v", r, err)
	}
	if err := forker.DropSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if got := ts.env.Snapshots(); len(got) != 0 {
		t.Errorf("env still holds %v after drop_snapshot", got)
	}
	// Sessions forked from a dropped snapshot go on.
	if got := act(t, f, cat("x")).Observation.Messages[0].Content; got != gymtest.Output("1") {
		t.Errorf("fork after drop: cat x = %q", got)
	}
	if !strings.Contains(scrape(t, ts), "gymserver_snapshots 0") {
		t.Errorf("/metrics: snapshots gauge not back to 0")
	}
}

// TestSnapshotPipelined sends a step, a snapshot and another step without
// waiting: the snapshot is taken between the two steps.
func TestSnapshotPipelined(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	rc := dialRaw(t, ts, nil)
	var r wire.ResetResult
	if resp := rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem", Task: "hello"}, &r); !resp.OK {
		t.Fatalf("reset: %+v", resp.Error)
	}
	step := func(id uint64, content string) wire.Request {
		return wire.Request{ID: id, Op: wire.OpStep, Session: r.SessionID, ToolCalls: []wire.ToolCall{{
			Function: wire.FunctionCall{Name: gym.ToolWriteFile, Arguments: wire.Arguments(fmt.Sprintf(`{"filepath":"a.txt","content":%q}`, content))}}}}
	}
	rc.request(step(2, "hello"))
	rc.request(wire.Request{ID: 3, Op: wire.OpSnapshot, Session: r.SessionID})
	rc.request(step(4, "changed"))
	var snap wire.SnapshotResult
	for range 3 {
		resp := rc.next()
		if !resp.OK {
			t.Fatalf("response %d: %+v", resp.ID, resp.Error)
		}
		if resp.ID == 3 {
			if err := wire.DecodeResult(resp.Result, &snap); err != nil {
				t.Fatal(err)
			}
		}
	}
	if snap.Snapshot.Steps != 1 || snap.Snapshot.SessionID != r.SessionID {
		t.Fatalf("snapshot = %+v, want it after step 1", snap.Snapshot)
	}
	var fr wire.ForkResult
	if resp := rc.call(wire.Request{ID: 5, Op: wire.OpFork, Snapshot: snap.Snapshot.ID}, &fr); !resp.OK || len(fr.Sessions) != 1 {
		t.Fatalf("fork (n omitted): %+v %+v", resp.Error, fr)
	}
	var sr wire.StepResult
	rc.call(wire.Request{ID: 6, Op: wire.OpStep, Session: fr.Sessions[0].SessionID, ToolCalls: []wire.ToolCall{{
		Function: wire.FunctionCall{Name: gym.ToolMarkDone, Arguments: "{}"}}}}, &sr)
	if sr.Reward != 1 || sr.Info.Step != 2 {
		t.Errorf("fork's final step: reward %v at step %d, want 1 at step 2", sr.Reward, sr.Info.Step)
	}
}

func TestSnapshotErrors(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{})
	other := dial(t, ts, gymclient.Options{})
	live, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	act(t, done, markDone())
	closed, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	dropped, err := live.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DropSnapshot(ctx, dropped.ID); err != nil {
		t.Fatal(err)
	}
	kept, err := live.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, ts, nil)
	raw := func(req wire.Request) error {
		resp := rc.call(req, nil)
		if resp.OK {
			return nil
		}
		return &gymclient.Error{Code: gym.ErrorClass(resp.Error.Code), Reason: resp.Error.Reason, Message: resp.Error.Message}
	}
	tests := []struct {
		name   string
		do     func() error
		code   gym.ErrorClass
		reason string
	}{
		{"snapshot_after_terminal", func() error { _, err := done.Snapshot(ctx); return err }, gym.ClassEpisodeDone, ""},
		{"snapshot_after_close", func() error { _, err := closed.Snapshot(ctx); return err }, gym.ClassEpisodeDone, wire.ReasonSessionClosed},
		{"snapshot_unknown_session", func() error { return raw(wire.Request{ID: 1, Op: wire.OpSnapshot, Session: "nope"}) }, gym.ClassNotFound, wire.ReasonUnknownSession},
		{"snapshot_missing_session", func() error { return raw(wire.Request{ID: 2, Op: wire.OpSnapshot}) }, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"fork_unknown", func() error { _, _, err := c.Fork(ctx, "nope", 1); return err }, gym.ClassNotFound, wire.ReasonUnknownSnapshot},
		{"fork_dropped", func() error { _, _, err := c.Fork(ctx, dropped.ID, 1); return err }, gym.ClassNotFound, wire.ReasonUnknownSnapshot},
		{"fork_other_connections", func() error { _, _, err := other.Fork(ctx, kept.ID, 1); return err }, gym.ClassNotFound, wire.ReasonUnknownSnapshot},
		{"fork_missing_snapshot", func() error { return raw(wire.Request{ID: 3, Op: wire.OpFork}) }, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"fork_negative_n", func() error { return raw(wire.Request{ID: 4, Op: wire.OpFork, Snapshot: "nope", N: -1}) }, gym.ClassNotFound, wire.ReasonUnknownSnapshot},
		{"drop_dropped", func() error { return c.DropSnapshot(ctx, dropped.ID) }, gym.ClassNotFound, wire.ReasonUnknownSnapshot},
		{"drop_other_connections", func() error { return other.DropSnapshot(ctx, kept.ID) }, gym.ClassNotFound, wire.ReasonUnknownSnapshot},
		{"drop_missing_snapshot", func() error { return raw(wire.Request{ID: 5, Op: wire.OpDropSnapshot}) }, gym.ClassInvalidArgument, wire.ReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, tt.name, tt.do(), tt.code, tt.reason)
		})
	}
	// A negative n on a snapshot the connection holds is a bad request.
	var held wire.SnapshotResult
	var r wire.ResetResult
	rc.call(wire.Request{ID: 10, Op: wire.OpReset, Env: "mem"}, &r)
	rc.call(wire.Request{ID: 11, Op: wire.OpSnapshot, Session: r.SessionID}, &held)
	if resp := rc.call(wire.Request{ID: 12, Op: wire.OpFork, Snapshot: held.Snapshot.ID, N: -1}, nil); resp.OK || resp.Error.Reason != wire.ReasonBadRequest {
		t.Errorf("fork with n -1: %+v", resp.Error)
	}
	// A huge n is refused by the session limit, without starting anything.
	if resp := rc.call(wire.Request{ID: 13, Op: wire.OpFork, Snapshot: held.Snapshot.ID, N: math.MaxInt}, nil); resp.OK || resp.Error.Reason != wire.ReasonMaxConnectionSessions {
		t.Errorf("fork with n MaxInt: %+v", resp.Error)
	}
	// The errors left the kept snapshot alone; the failed ones made none.
	if got := ts.env.Snapshots(); !slices.Equal(got, []string{held.Snapshot.ID, kept.ID}) && !slices.Equal(got, []string{kept.ID, held.Snapshot.ID}) {
		t.Errorf("env snapshots %v, want %s and %s", got, kept.ID, held.Snapshot.ID)
	}
}

func TestConnectionDropsItsSnapshots(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	ctx := t.Context()
	keep := dial(t, ts, gymclient.Options{})
	s, _, err := keep.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone := dial(t, ts, gymclient.Options{})
	s2, _, err := gone.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s2.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(ts.env.Snapshots()); n != 4 {
		t.Fatalf("env holds %d snapshots, want 4", n)
	}
	gone.Close()
	waittest.For(t, "the closed connection's snapshots to be dropped", 5*time.Second, func() bool {
		return slices.Equal(ts.env.Snapshots(), []string{kept.ID})
	})
	waittest.For(t, "the snapshots gauge", 5*time.Second, func() bool { return strings.Contains(scrape(t, ts), "gymserver_snapshots 1\n") })
	// A drain drops the rest.
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if got := ts.env.Snapshots(); len(got) != 0 {
		t.Errorf("snapshots after the drain: %v", got)
	}
}

func TestSnapshotLimit(t *testing.T) {
	ts := startServer(t, server.Options{MaxSnapshotsPerConn: 2}, nil)
	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{})
	s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var snaps []gym.Snapshot
	for range 2 {
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, snap)
	}
	_, err = s.Snapshot(ctx)
	wantErr(t, "third snapshot", err, gym.ClassResourceExhausted, wire.ReasonMaxSnapshots)
	// Another connection has a budget of its own.
	c2 := dial(t, ts, gymclient.Options{})
	s2, _, err := c2.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Snapshot(ctx); err != nil {
		t.Errorf("snapshot on another connection: %v", err)
	}
	// Dropping frees a slot.
	if err := c.DropSnapshot(ctx, snaps[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx); err != nil {
		t.Errorf("snapshot after a drop: %v", err)
	}
	if n := len(ts.env.Snapshots()); n != 3 {
		t.Errorf("env holds %d snapshots, want 3", n)
	}
}

func TestForkLimits(t *testing.T) {
	ts := startServer(t, server.Options{MaxSessionsPerConn: 3, MaxSessions: 4}, nil)
	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{})
	s, snap := resetAndSnapshot(t, c)
	_, _, err := c.Fork(ctx, snap.ID, 3)
	wantErr(t, "fork 3 with 1 of 3 sessions open", err, gym.ClassResourceExhausted, wire.ReasonMaxConnectionSessions)
	if err == nil || !strings.Contains(err.Error(), "3 new sessions") {
		t.Errorf("fork over the limit: %v, want the count in the message", err)
	}
	if got := ts.env.OpenSessions(); !slices.Equal(got, []string{s.ID()}) {
		t.Errorf("open sessions after the refused fork: %v, want only %s", got, s.ID())
	}
	// Two fit the connection; then the server's limit is the bound.
	forks, _, err := c.Fork(ctx, snap.ID, 2)
	if err != nil || len(forks) != 2 {
		t.Fatalf("fork 2: %v", err)
	}
	c2 := dial(t, ts, gymclient.Options{})
	s2, _, err := c2.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snap2, err := s2.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c2.Fork(ctx, snap2.ID, 1)
	wantErr(t, "fork beyond the server's sessions", err, gym.ClassResourceExhausted, wire.ReasonMaxSessions)
	if n := len(ts.env.OpenSessions()); n != 4 {
		t.Errorf("%d open sessions, want 4", n)
	}
}

// peakCounter tracks how many calls run at once, and the most so far.
type peakCounter struct{ running, peak atomic.Int64 }

// enter counts a call in; the caller defers leave.
func (p *peakCounter) enter() {
	n := p.running.Add(1)
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			return
		}
	}
}

func (p *peakCounter) leave() { p.running.Add(-1) }

func TestForkAllOrNothing(t *testing.T) {
	var (
		calls atomic.Int64
		fail  atomic.Bool
		pc    peakCounter
	)
	env := memEnv().SetForkHook(func(ctx context.Context, _ string) error {
		pc.enter()
		defer pc.leave()
		if calls.Add(1) == 2 && fail.Load() {
			return fmt.Errorf("sandbox start: %w", gym.ErrSandbox)
		}
		// Hold each fork until three have run at once (or 2s passed):
		// forks started one after another never get there.
		deadline := time.Now().Add(2 * time.Second)
		for pc.peak.Load() < 3 && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	})
	ts := startServer(t, server.Options{MaxConcurrentResets: 3}, env)
	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{})
	s, snap := resetAndSnapshot(t, c)
	fail.Store(true)
	_, _, err := c.Fork(ctx, snap.ID, 3)
	wantErr(t, "fork with a failing start", err, gym.ClassSandbox, "")
	if got := env.OpenSessions(); !slices.Equal(got, []string{s.ID()}) {
		t.Errorf("open sessions after the failed fork: %v, want only %s", got, s.ID())
	}
	// The failed fork gave back its slots; the snapshot is still there.
	fail.Store(false)
	pc.peak.Store(0)
	forks, _, err := c.Fork(ctx, snap.ID, 3)
	if err != nil || len(forks) != 3 {
		t.Fatalf("fork after the failure: %v", err)
	}
	if p := pc.peak.Load(); p != 3 {
		t.Errorf("at most %d forks ran at once, want 3 (they start concurrently)", p)
	}
	if n := len(env.OpenSessions()); n != 4 {
		t.Errorf("%d open sessions, want 4", n)
	}
	if !strings.Contains(scrape(t, ts), "gymserver_sessions 4\n") {
		t.Errorf("/metrics: sessions gauge is not 4")
	}
}

func TestForkBoundedByConcurrentResets(t *testing.T) {
	var pc peakCounter
	env := memEnv().SetForkHook(func(ctx context.Context, _ string) error {
		pc.enter()
		defer pc.leave()
		// Long enough for an unbounded fan-out to overlap.
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	ts := startServer(t, server.Options{MaxConcurrentResets: 2}, env)
	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{})
	_, snap := resetAndSnapshot(t, c)
	if _, _, err := c.Fork(ctx, snap.ID, 8); err != nil {
		t.Fatal(err)
	}
	if p := pc.peak.Load(); p != 2 {
		t.Errorf("%d forks ran at once, want 2 (max_concurrent_resets)", p)
	}
}

// noSnapshots hides the gymtest environment's Forker.
type noSnapshots struct{ gym.Env }

func TestSnapshotUnsupported(t *testing.T) {
	reg, err := gym.NewRegistry(noSnapshots{memEnv()})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Options{Registry: reg}, gymtest.NewEnv("unused"))
	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{})
	h, err := c.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.Capabilities, wire.CapSnapshot) || slices.ContainsFunc(h.Ops, func(op string) bool { return slices.Contains(wire.SnapshotOps(), op) }) {
		t.Errorf("hello without snapshot support: capabilities %v, ops %v", h.Capabilities, h.Ops)
	}
	s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Snapshot(ctx)
	wantErr(t, "snapshot", err, gym.ClassInvalidArgument, wire.ReasonUnsupported)
	_, _, err = c.Fork(ctx, "mem-snap-1", 1)
	wantErr(t, "fork", err, gym.ClassNotFound, wire.ReasonUnknownSnapshot)
}

func TestEnvsReportSnapshotSupport(t *testing.T) {
	other := gymtest.NewEnv("plain", gymtest.Task{ID: "t"})
	reg, err := gym.NewRegistry(memEnv(), noSnapshots{other})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Options{Registry: reg}, nil)
	rc := dialRaw(t, ts, nil)
	var envs wire.EnvsResult
	if resp := rc.call(wire.Request{ID: 1, Op: wire.OpEnvs}, &envs); !resp.OK {
		t.Fatal(resp.Error)
	}
	got := map[string]bool{}
	for _, e := range envs.Envs {
		got[e.ID] = e.Snapshot
	}
	want := map[string]bool{"mem": true, "plain": false}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("envs snapshot flags (-want +got):\n%s", d)
	}
	var h wire.HelloResult
	rc.call(wire.Request{ID: 2, Op: wire.OpHello}, &h)
	if !slices.Contains(h.Capabilities, wire.CapSnapshot) || !slices.Contains(h.Ops, wire.OpDropSnapshot) {
		t.Errorf("hello with one snapshot environment: %+v", h)
	}
	// /v1/envs carries the same flag.
	resp := httpGet(t, "http://"+ts.addr+"/v1/envs")
	var js struct {
		Envs []struct {
			ID       string `json:"id"`
			Snapshot bool   `json:"snapshot"`
		} `json:"envs"`
	}
	if err := json.Unmarshal([]byte(resp), &js); err != nil || len(js.Envs) != 2 || js.Envs[0].ID != "mem" || !js.Envs[0].Snapshot || js.Envs[1].Snapshot {
		t.Errorf("/v1/envs: %v %s", err, resp)
	}
}

// httpGet returns the body of a GET of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// resetAndSnapshot starts a session of the in-memory env on c and takes a
// snapshot of it right away.
func resetAndSnapshot(t *testing.T, c *gymclient.Client) (*gymclient.Session, gym.Snapshot) {
	t.Helper()
	s, _, err := c.Reset(t.Context(), "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s, snap
}
