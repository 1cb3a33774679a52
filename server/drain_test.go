package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
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
	waitFor(t, "the reset to start", 10*time.Second, func() bool {
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
	waitFor(t, "/healthz to answer 503 draining", 5*time.Second, func() bool {
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
