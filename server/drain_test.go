package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
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

// TestDrainKeepsListening checks that while a drain waits for an in-flight
// request, /healthz answers 503 and a new WebSocket upgrade is refused with
// 503 unavailable/draining, and that the listener closes when the drain
// ends.
func TestDrainKeepsListening(t *testing.T) {
	release := make(chan struct{})
	env := memEnv().SetResetHook(func(ctx context.Context, req gym.ResetRequest) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ts := startServer(t, server.Options{Token: "tok"}, env)
	c := dial(t, ts, gymclient.Options{Token: "tok"})
	resetc := make(chan error, 1)
	go func() {
		_, _, err := c.Reset(t.Context(), "mem", gym.ResetRequest{})
		resetc <- err
	}()
	waittest.For(t, "the reset to start", 10*time.Second, func() bool {
		return strings.Contains(scrape(t, ts), `gymserver_requests_total{op="reset"} 1`)
	})
	stopc := make(chan error, 1)
	go func() { stopc <- ts.stop() }()

	healthz := func() (int, string, error) {
		resp, err := http.Get("http://" + ts.addr + "/healthz")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	var lastErr error
	waittest.For(t, "/healthz to answer 503 draining", 5*time.Second, func() bool {
		code, body, err := healthz()
		lastErr = err
		return err == nil && code == http.StatusServiceUnavailable && body == "draining\n"
	})
	if lastErr != nil {
		t.Fatal(lastErr)
	}

	// A new connection is refused with the documented error. The token
	// and the subprotocol are checked first.
	for _, tt := range []struct {
		name       string
		header     http.Header
		wantStatus int
		wantCode   gym.ErrorClass
		wantReason string
	}{
		{"upgrade", http.Header{"Authorization": {"Bearer tok"}}, http.StatusServiceUnavailable, gym.ClassUnavailable, wire.ReasonDraining},
		{"no_token", nil, http.StatusUnauthorized, gym.ClassUnauthenticated, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := websocket.Dialer{Subprotocols: []string{wire.Subprotocol}, HandshakeTimeout: 5 * time.Second}
			ws, resp, err := d.Dial(ts.url, tt.header)
			if err == nil {
				ws.Close()
				t.Fatal("upgrade accepted while draining")
			}
			if resp == nil {
				t.Fatalf("dial while draining: %v, want an HTTP %d", err, tt.wantStatus)
			}
			defer resp.Body.Close()
			var body struct{ Error wire.Error }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("body: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || body.Error.Code != string(tt.wantCode) || body.Error.Reason != tt.wantReason ||
				body.Error.Mask != gym.Masked(tt.wantCode) {
				t.Errorf("dial while draining: %s %+v, want %d %s/%s", resp.Status, body.Error, tt.wantStatus, tt.wantCode, tt.wantReason)
			}
		})
	}
	// The Go client reports the server's error object: class and reason.
	if c2, err := gymclient.Dial(t.Context(), ts.url, gymclient.Options{Token: "tok"}); err == nil {
		c2.Close()
		t.Error("gymclient.Dial while draining succeeded")
	} else if ge := (*gymclient.Error)(nil); !errors.As(err, &ge) || ge.Reason != wire.ReasonDraining || !errors.Is(err, gym.ErrUnavailable) || !ge.Mask {
		t.Errorf("gymclient.Dial while draining: %v (%+v), want unavailable/%s, masked", err, ge, wire.ReasonDraining)
	}
	// The open connection still works while the drain runs.
	if h, err := c.Hello(t.Context()); err != nil || !h.Draining {
		t.Errorf("hello while draining: %+v %v", h, err)
	}

	close(release)
	if err := <-resetc; err != nil {
		t.Errorf("in-flight reset: %v, want it finished", err)
	}
	if err := <-stopc; err != nil {
		t.Errorf("serve: %v", err)
	}
	if _, _, err := healthz(); err == nil {
		t.Errorf("/healthz answered after the drain ended, want the listener closed")
	}
}

// TestShutdownSlowClient checks that a client that does not read holds up
// neither the going-away of the other connections nor Shutdown beyond its
// context, and that Shutdown then reports that it gave up.
func TestShutdownSlowClient(t *testing.T) {
	// Every envs answer is about 100 KB, and a write may take as long as
	// the heartbeat timeout (3 × 20s) before the server gives up on it.
	env := gymtest.NewEnv("mem", gymtest.Task{ID: "big", Prompt: strings.Repeat("x", 100<<10)})
	ts := startServer(t, server.Options{PingInterval: 20 * time.Second}, env)
	stop := ts.stop
	ts.stop = func() error { stop(); return nil } // Shutdown's error is checked below

	healthy := dialRaw(t, ts, nil)
	var r wire.ResetResult
	healthy.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &r)

	// The slow client asks for far more than the socket buffers and the
	// server's queue hold, and never reads: the server's writer blocks, its
	// queue fills, and its reader stops reading.
	slow := dialRaw(t, ts, nil)
	const n = 1000
	go func() {
		for i := range n {
			f, _ := wire.Encode(wire.Request{ID: uint64(1 + i), Op: wire.OpEnvs})
			if slow.ws.WriteMessage(websocket.BinaryMessage, f) != nil {
				return
			}
		}
	}()
	envsCount := regexp.MustCompile(`gymserver_requests_total\{op="envs"\} (\d+)`)
	last, since := -1, time.Now()
	waittest.For(t, "the slow connection to stop being read", 30*time.Second, func() bool {
		m := envsCount.FindStringSubmatch(scrape(t, ts))
		k, _ := strconv.Atoi(m[1])
		if k != last {
			last, since = k, time.Now()
		}
		return k > 0 && time.Since(since) > 300*time.Millisecond
	})
	t.Logf("the server read %d of the slow client's %d requests", last, n)
	if last >= n {
		t.Fatalf("the server read all %d requests of the slow client; it should be blocked", n)
	}

	const bound = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	shutdownc := make(chan error, 1)
	go func() { shutdownc <- ts.Shutdown(ctx) }()

	// The healthy connection is told at once.
	healthy.ws.SetReadDeadline(time.Now().Add(bound / 2))
	var closeErr *websocket.CloseError
	for {
		_, _, err := healthy.ws.ReadMessage()
		if err == nil {
			continue
		}
		if !errors.As(err, &closeErr) || closeErr.Code != websocket.CloseGoingAway {
			t.Errorf("healthy connection: %v after %s, want close 1001 at once", err, time.Since(start))
		}
		break
	}
	select {
	case err := <-shutdownc:
		if took := time.Since(start); took > bound+time.Second {
			t.Errorf("Shutdown returned after %s, want about its context's %s", took, bound)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want an error wrapping context.DeadlineExceeded", err)
		}
	case <-time.After(bound + 10*time.Second):
		t.Fatalf("Shutdown still running %s after its context ended", 10*time.Second)
	}
	waittest.For(t, "the sessions to close", 10*time.Second, func() bool { return len(env.OpenSessions()) == 0 })
}

// TestShutdownReturnsCloseErrors checks that Shutdown reports the sessions
// it could not close.
func TestShutdownReturnsCloseErrors(t *testing.T) {
	mem := memEnv()
	reg, err := gym.NewRegistry(closeHookEnv{Env: mem, hook: func(_ context.Context, id string) error {
		return gym.Errorf(gym.ClassSandbox, "session %s: close sandbox: engine gone", id)
	}})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Options{Registry: reg}, mem)
	stop := ts.stop
	ts.stop = func() error { stop(); return nil } // Shutdown's error is checked below
	c := dial(t, ts, gymclient.Options{})
	s, _, err := c.Reset(t.Context(), "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	err = ts.Shutdown(t.Context())
	if err == nil || !strings.Contains(err.Error(), s.ID()) || !strings.Contains(err.Error(), "engine gone") || gym.ClassOf(err) != gym.ClassSandbox {
		t.Errorf("Shutdown: %v, want the sandbox error of session %s", err, s.ID())
	}
	if err2 := ts.Shutdown(t.Context()); err2 != err {
		t.Errorf("second Shutdown: %v, want the first's %v", err2, err)
	}
}
