package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/internal/waittest"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

func TestVanishedClientClosesSessions(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	rc := dialRaw(t, ts, nil)
	var a, b wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &a)
	rc.call(wire.Request{ID: 2, Op: wire.OpReset, Env: "mem"}, &b)
	rc.request(wire.Request{ID: 3, Op: wire.OpStep, Session: a.SessionID,
		ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: `{"command":"sleep 600"}`}}}})
	waittest.For(t, "the step to start", 10*time.Second, func() bool {
		return ts.env.Resets() == 2 && len(ts.env.OpenSessions()) == 2
	})
	// Vanish: drop the TCP connection without a close frame.
	rc.ws.NetConn().Close()
	waittest.For(t, "sessions to close", 10*time.Second, func() bool { return len(ts.env.OpenSessions()) == 0 })

	// The server still serves others.
	c := dial(t, ts, gymclient.Options{})
	if _, err := c.Hello(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestShutdownDrainsRunningStep(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	idle, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type stepOut struct {
		res gym.StepResult
		err error
	}
	stepc := make(chan stepOut, 1)
	go func() {
		res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c", gym.ToolExecuteCommand, `{"command":"sleep 0.5"}`)}})
		stepc <- stepOut{res, err}
	}()
	waittest.For(t, "the step to start", 10*time.Second, func() bool {
		return strings.Contains(scrape(t, ts), `gymserver_requests_total{op="step"} 1`)
	})
	stopc := make(chan error, 1)
	go func() { stopc <- ts.stop() }()
	// While draining: no new sessions, no new steps.
	waittest.For(t, "draining", 5*time.Second, func() bool {
		h, err := c.Hello(ctx)
		return err == nil && h.Draining
	})
	var ce *gymclient.Error
	if _, _, err := c.Reset(ctx, "mem", gym.ResetRequest{}); !errors.As(err, &ce) || ce.Code != gym.ClassUnavailable || ce.Reason != wire.ReasonDraining || !ce.Mask {
		t.Errorf("reset while draining: %v, want unavailable/draining", err)
	}
	if _, err := idle.Step(ctx, gym.Action{}); !errors.As(err, &ce) || ce.Code != gym.ClassUnavailable {
		t.Errorf("step while draining: %v, want unavailable", err)
	}
	out := <-stepc
	if out.err != nil || out.res.Observation.Messages[0].Content != gymtest.Output("") || out.res.Info.Calls[0].ExitCode != 0 {
		t.Errorf("in-flight step: %+v %v, want it finished", out.res, out.err)
	}
	if err := <-stopc; err != nil {
		t.Errorf("serve: %v", err)
	}
	if open := ts.env.OpenSessions(); len(open) != 0 {
		t.Errorf("sessions left after drain: %v", open)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("client connection not closed by the drain")
	}
}

func TestAuth(t *testing.T) {
	ts := startServer(t, server.Options{Token: "s3cret"}, nil)
	for _, tt := range []struct {
		name, token string
		ok          bool
	}{{"missing", "", false}, {"wrong", "guess", false}, {"right", "s3cret", true}} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := gymclient.Dial(t.Context(), ts.url, gymclient.Options{Token: tt.token})
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Hello(t.Context()); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded without the right token")
			}
			if gym.ClassOf(err) != gym.ClassUnauthenticated {
				t.Errorf("dial: %v, want unauthenticated", err)
			}
			req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+ts.addr+"/v1/envs", nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Error wire.Error }
			json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != http.StatusUnauthorized || body.Error.Code != "unauthenticated" || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("/v1/envs: %s %+v", resp.Status, body)
			}
		})
	}
	// The scheme is case-insensitive (RFC 7235); the token is not.
	for _, h := range []string{"bearer s3cret", "BEARER s3cret", "Bearer  s3cret"} {
		ws, resp, err := websocket.DefaultDialer.Dial(ts.url, http.Header{
			"Authorization": {h}, "Sec-WebSocket-Protocol": {wire.Subprotocol}})
		if err != nil {
			t.Errorf("dial with Authorization %q: %v (%v)", h, err, resp)
			continue
		}
		ws.Close()
	}
	for _, h := range []string{"Bearer S3CRET", "Basic s3cret", "Bearers3cret", "s3cret"} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+ts.addr+"/v1/envs", nil)
		req.Header.Set("Authorization", h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/v1/envs with Authorization %q: %s, want 401", h, resp.Status)
		}
	}
	if _, err := server.Listen("0.0.0.0:0", ""); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("listen on all interfaces without a token: %v, want refusal", err)
	}
	if ln, err := server.Listen("0.0.0.0:0", "tok"); err != nil {
		t.Errorf("listen on all interfaces with a token: %v", err)
	} else {
		ln.Close()
	}
}

func TestSubprotocolRequired(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	_, resp, err := websocket.DefaultDialer.Dial(ts.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("dial without subprotocol: %v %v, want HTTP 400", err, resp)
	}
}

func TestHTTPEndpoints(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	s, _, err := c.Reset(t.Context(), "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Step(t.Context(), gym.Action{}); err != nil {
		t.Fatal(err)
	}
	c.Hello(t.Context())
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ts.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{"gymserver_sessions 1", "gymserver_containers 1", "gymserver_connections 1",
		`gymserver_step_seconds_count{env="mem"} 1`, `gymserver_reset_seconds_count{env="mem"} 1`, `gymserver_requests_total{op="hello"} 1`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	code, body = get("/v1/envs")
	var envs struct{ Envs []gym.EnvSpec }
	if err := json.Unmarshal([]byte(body), &envs); code != 200 || err != nil || len(envs.Envs) != 1 || envs.Envs[0].ID != "mem" || len(envs.Envs[0].Tasks) != 2 {
		t.Errorf("/v1/envs: %d %v %s", code, err, body)
	}
	// An error response is counted by class.
	s.Close(t.Context())
	s.Step(t.Context(), gym.Action{})
	if _, body := get("/metrics"); !strings.Contains(body, `gymserver_errors_total{code="episode_done"} 1`) {
		t.Errorf("/metrics lacks the episode_done error")
	}
}

func TestSessionLimits(t *testing.T) {
	ts := startServer(t, server.Options{MaxSessions: 3, MaxSessionsPerConn: 2}, nil)
	ctx := t.Context()
	c1 := dial(t, ts, gymclient.Options{})
	c2 := dial(t, ts, gymclient.Options{})
	var ce *gymclient.Error
	for range 2 {
		if _, _, err := c1.Reset(ctx, "mem", gym.ResetRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c1.Reset(ctx, "mem", gym.ResetRequest{}); !errors.As(err, &ce) || ce.Reason != wire.ReasonMaxConnectionSessions || ce.Code != gym.ClassResourceExhausted {
		t.Errorf("third session on a connection: %v", err)
	}
	s, _, err := c2.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c2.Reset(ctx, "mem", gym.ResetRequest{}); !errors.As(err, &ce) || ce.Reason != wire.ReasonMaxSessions {
		t.Errorf("fourth session on the server: %v", err)
	}
	// Closing frees a slot.
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c2.Reset(ctx, "mem", gym.ResetRequest{}); err != nil {
		t.Errorf("reset after close: %v", err)
	}
}

func TestResetWaitLimit(t *testing.T) {
	release := make(chan struct{})
	env := memEnv().SetResetHook(func(ctx context.Context, req gym.ResetRequest) error {
		if req.Task == "two" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	ts := startServer(t, server.Options{MaxConcurrentResets: 1, ResetWait: 100 * time.Millisecond}, env)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	blocked := make(chan error, 1)
	go func() {
		_, _, err := c.Reset(ctx, "mem", gym.ResetRequest{Task: "two"})
		blocked <- err
	}()
	waittest.For(t, "the blocked reset", 5*time.Second, func() bool {
		body := scrape(t, ts)
		return strings.Contains(body, `gymserver_requests_total{op="reset"} 1`)
	})
	var ce *gymclient.Error
	if _, _, err := c.Reset(ctx, "mem", gym.ResetRequest{}); !errors.As(err, &ce) || ce.Reason != wire.ReasonResetWait || ce.Code != gym.ClassResourceExhausted {
		t.Errorf("reset while the only slot is busy: %v, want resource_exhausted/reset_wait", err)
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Errorf("blocked reset: %v", err)
	}
}

func scrape(t *testing.T, ts *testServer) string {
	t.Helper()
	resp, err := http.Get("http://" + ts.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestIdleSessionsExpire(t *testing.T) {
	ts := startServer(t, server.Options{IdleSessionTTL: 200 * time.Millisecond}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	busy, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	idle, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A step that runs longer than the TTL keeps its session alive.
	stepc := make(chan error, 1)
	go func() {
		_, err := busy.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", gym.ToolExecuteCommand, `{"command":"sleep 1"}`)}})
		stepc <- err
	}()
	waittest.For(t, "the idle session to expire", 10*time.Second, func() bool {
		open := ts.env.OpenSessions()
		return len(open) == 1 && open[0] == busy.ID()
	})
	var ce *gymclient.Error
	if _, err := idle.Step(ctx, gym.Action{}); !errors.As(err, &ce) || ce.Code != gym.ClassNotFound || ce.Reason != wire.ReasonSessionExpired {
		t.Errorf("step on an expired session: %v, want not_found/session_expired", err)
	}
	if res, err := idle.Close(ctx); err != nil || res.TerminationReason != gym.ReasonClosed {
		t.Errorf("close of an expired session: %+v %v", res, err)
	}
	if err := <-stepc; err != nil {
		t.Errorf("long step: %v", err)
	}
}

func TestInflightLimit(t *testing.T) {
	ts := startServer(t, server.Options{MaxInflightPerConn: 2}, nil)
	rc := dialRaw(t, ts, nil)
	var r wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &r)
	sleep := []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: `{"command":"sleep 0.3"}`}}}
	for i := range 3 {
		rc.request(wire.Request{ID: uint64(10 + i), Op: wire.OpStep, Session: r.SessionID, ToolCalls: sleep})
	}
	got := map[uint64]string{}
	for range 3 {
		resp := rc.next()
		reason := "ok"
		if !resp.OK {
			reason = resp.Error.Reason
		}
		got[resp.ID] = reason
	}
	if got[10] != "ok" || got[11] != "ok" || got[12] != wire.ReasonMaxInflight {
		t.Errorf("responses %v, want the third refused with max_inflight", got)
	}
}

func TestHeartbeats(t *testing.T) {
	ts := startServer(t, server.Options{PingInterval: 50 * time.Millisecond}, nil)
	t.Run("long_step_survives", func(t *testing.T) {
		c := dial(t, ts, gymclient.Options{PingInterval: -1}) // only the server pings
		s, _, err := c.Reset(t.Context(), "mem", gym.ResetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{tc("", gym.ToolExecuteCommand, `{"command":"sleep 0.6"}`)}}); err != nil {
			t.Fatalf("step longer than the heartbeat timeout: %v", err)
		}
	})
	t.Run("silent_client_dropped", func(t *testing.T) {
		rc := dialRaw(t, ts, nil)
		var r wire.ResetResult
		rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &r)
		rc.ws.SetPingHandler(func(string) error { return nil }) // never pong
		rc.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, _, err := rc.ws.ReadMessage()
			if err == nil {
				continue
			}
			// The server drops the TCP connection without a close frame
			// (PROTOCOL.md §1): the client sees an abnormal closure.
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure {
				t.Errorf("silent client: %v, want the connection dropped without a close frame", err)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("silent client: %v, want the server to drop the connection", err)
			}
			break
		}
		waittest.For(t, "the silent client's session to close", 10*time.Second, func() bool {
			for _, id := range ts.env.OpenSessions() {
				if id == r.SessionID {
					return false
				}
			}
			return true
		})
	})
}

func TestClientContextCancel(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	c := dial(t, ts, gymclient.Options{})
	s, _, err := c.Reset(t.Context(), "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", gym.ToolExecuteCommand, `{"command":"sleep 5"}`)}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("step with a 50ms context: %v after %s", err, time.Since(start))
	}
	// The client stays usable; close stops the abandoned step.
	if _, err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Hello(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsStartAtZero checks that every labelled series with a known
// label value is exported before its first event.
func TestMetricsStartAtZero(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	body := scrape(t, ts)
	var want []string
	for _, op := range append(wire.Ops(), "unknown") {
		want = append(want, `gymserver_requests_total{op="`+op+`"} 0`)
	}
	for _, c := range gym.Classes() {
		want = append(want, `gymserver_errors_total{code="`+string(c)+`"} 0`)
	}
	for _, h := range []string{"step", "reset", "snapshot", "fork"} {
		want = append(want, `gymserver_`+h+`_seconds_count{env="mem"} 0`)
	}
	for _, w := range want {
		if !strings.Contains(body, w+"\n") {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	if n := len(gym.Classes()); n != 12 {
		t.Errorf("gym.Classes() has %d classes, want the 12 of PROTOCOL.md §6", n)
	}
}
