package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

// testServer is a server running in-process on 127.0.0.1:0.
type testServer struct {
	*server.Server
	addr string // host:port
	url  string // ws://host:port/v1/ws
	env  *gymtest.Env
	// stop cancels Serve (a drain) and returns its error.
	stop func() error
}

// memEnv returns the in-memory environment the tests use.
func memEnv() *gymtest.Env {
	return gymtest.NewEnv("mem",
		gymtest.Task{ID: "hello", Prompt: "Write hello to a.txt.", Expect: map[string]string{"a.txt": "hello"}},
		gymtest.Task{ID: "two", Prompt: "Write x and y.", Expect: map[string]string{"x": "1", "y": "2"}},
	)
}

// startServer serves env (memEnv when nil) with opts; the server is
// drained when the test ends.
func startServer(t testing.TB, opts server.Options, env *gymtest.Env) *testServer {
	t.Helper()
	if env == nil {
		env = memEnv()
	}
	if opts.Registry == nil {
		reg, err := gym.NewRegistry(env)
		if err != nil {
			t.Fatal(err)
		}
		opts.Registry = reg
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := server.Listen("127.0.0.1:0", opts.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln) }()
	ts := &testServer{Server: srv, addr: ln.Addr().String(), url: "ws://" + ln.Addr().String() + wire.Path, env: env}
	var stopped bool
	var stopErr error
	ts.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			stopErr = <-errc
		}
		return stopErr
	}
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ts
}

// dial connects a Go client to ts.
func dial(t testing.TB, ts *testServer, opts gymclient.Options) *gymclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gymclient.Dial(ctx, ts.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn is a bare WebSocket connection for sending arbitrary frames.
type rawConn struct {
	t  testing.TB
	ws *websocket.Conn
}

func dialRaw(t testing.TB, ts *testServer, header http.Header) *rawConn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{wire.Subprotocol}, HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial(ts.url, header)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return &rawConn{t: t, ws: ws}
}

// send writes one binary frame.
func (c *rawConn) send(frame []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, frame); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// request encodes and sends req.
func (c *rawConn) request(req any) {
	c.t.Helper()
	f, err := wire.Encode(req)
	if err != nil {
		c.t.Fatal(err)
	}
	c.send(f)
}

// next reads the next response.
func (c *rawConn) next() wire.RawResponse {
	c.t.Helper()
	c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	mt, f, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if mt != websocket.BinaryMessage {
		c.t.Fatalf("message type %d, want binary", mt)
	}
	var r wire.RawResponse
	if err := wire.Decode(f, &r); err != nil {
		c.t.Fatalf("decode response: %v", err)
	}
	return r
}

// call sends req and reads its response, which must be the next one.
func (c *rawConn) call(req wire.Request, result any) wire.RawResponse {
	c.t.Helper()
	c.request(req)
	r := c.next()
	if r.ID != req.ID {
		c.t.Fatalf("response id %d, want %d", r.ID, req.ID)
	}
	if r.OK && result != nil {
		if err := wire.DecodeResult(r.Result, result); err != nil {
			c.t.Fatal(err)
		}
	}
	return r
}

// tc builds a tool call with JSON arguments.
func tc(id, name, args string) gym.ToolCall { return gym.NewToolCall(id, name, args) }
