package server_test

import (
	"bufio"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"strconv"
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

// queuedBytes reads the gymserver_queued_request_bytes gauge from /metrics.
// It reports errors instead of failing, so sampling goroutines can use it.
func queuedBytes(ts *testServer) (float64, error) {
	resp, err := http.Get("http://" + ts.addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "gymserver_queued_request_bytes "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoGauge
}

var errNoGauge = errors.New("/metrics has no gymserver_queued_request_bytes")

// mustQueuedBytes is queuedBytes for the test goroutine.
func mustQueuedBytes(t *testing.T, ts *testServer) float64 {
	t.Helper()
	v, err := queuedBytes(ts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sampleQueuedBytes scrapes the gauge until stop is called, which returns
// the largest value seen.
func sampleQueuedBytes(t *testing.T, ts *testServer) (stop func() float64) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var peak float64
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			v, err := queuedBytes(ts)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			peak = max(peak, v)
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() float64 {
		t.Helper()
		close(done)
		wg.Wait()
		// Concurrent scrapes may have left a dialled connection unused,
		// which would hold up the server's drain for seconds.
		http.DefaultClient.CloseIdleConnections()
		if firstErr != nil {
			t.Errorf("sampling the queued-bytes gauge: %v", firstErr)
		}
		return peak
	}
}

// sleepStep is a step that holds its session for a minute, until closed.
func sleepStep(id uint64, session string) wire.Request {
	return wire.Request{ID: id, Op: wire.OpStep, Session: session,
		ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: `{"command":"sleep 60"}`}}}}
}

// textStep is a step carrying text, which has no tool call.
func textStep(id uint64, session string, text *string) wire.Request {
	return wire.Request{ID: id, Op: wire.OpStep, Session: session, Text: text, Parser: "hermes"}
}

// pipelineBehindSleep sends n text steps on session after its sleeping
// step, then a hello, and reads the responses up to the hello's: the
// steps refused at once. It returns their ids, failing on any other
// response.
func pipelineBehindSleep(t *testing.T, rc *rawConn, session string, n int, text *string) []uint64 {
	t.Helper()
	for i := range n {
		rc.request(textStep(uint64(100+i), session, text))
	}
	rc.request(wire.Request{ID: 5, Op: wire.OpHello})
	var refused []uint64
	for {
		r := rc.next()
		if r.ID == 5 {
			if !r.OK {
				t.Fatalf("hello while the budget is full: %+v", r.Error)
			}
			return refused
		}
		if r.OK || r.Error.Code != string(gym.ClassResourceExhausted) || r.Error.Reason != wire.ReasonMaxQueuedBytes ||
			!strings.Contains(r.Error.Message, "max_queued_bytes_per_connection") {
			t.Fatalf("response %d before the hello: ok=%v error=%+v, want resource_exhausted/max_queued_bytes", r.ID, r.OK, r.Error)
		}
		refused = append(refused, r.ID)
	}
}

func TestQueuedBytesBudget(t *testing.T) {
	const budget, payload, n = 8 << 20, 1 << 20, 20
	ts := startServer(t, server.Options{MaxFrameBytes: 4 << 20, MaxQueuedBytesPerConn: budget}, nil)
	rc := dialRaw(t, ts, nil)
	var slow, other wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &slow)
	rc.call(wire.Request{ID: 2, Op: wire.OpReset, Env: "mem"}, &other)

	var hello wire.HelloResult
	rc.call(wire.Request{ID: 3, Op: wire.OpHello}, &hello)
	if hello.Limits.MaxQueuedBytesPerConnection != budget {
		t.Errorf("hello: max_queued_bytes_per_connection %d, want %d", hello.Limits.MaxQueuedBytesPerConnection, budget)
	}

	// n steps of 1 MiB queue behind a step that sleeps: the first ones
	// that fit in the budget wait, the rest are refused at once.
	stop := sampleQueuedBytes(t, ts)
	rc.request(sleepStep(10, slow.SessionID))
	text := strings.Repeat("x", payload)
	refused := pipelineBehindSleep(t, rc, slow.SessionID, n, &text)
	held := mustQueuedBytes(t, ts)
	if peak := stop(); peak > budget {
		t.Errorf("queued bytes peaked at %.0f, over the budget of %d", peak, budget)
	}
	admitted := n - len(refused)
	if admitted == 0 || admitted == n {
		t.Fatalf("%d of %d steps refused, want some admitted and some refused", len(refused), n)
	}
	// Admission is in arrival order: the ids after the last admitted one
	// are refused.
	var want []uint64
	for i := admitted; i < n; i++ {
		want = append(want, uint64(100+i))
	}
	if !slices.Equal(refused, want) {
		t.Errorf("refused %v, want %v", refused, want)
	}
	// The sleeping step and the admitted ones are held: each counts at
	// least its payload, all together at most the budget, and one more
	// would not have fit.
	perStep := held / float64(admitted)
	if held > budget || perStep < payload || held+perStep <= budget {
		t.Errorf("%.0f bytes held for %d admitted steps of %d bytes; budget %d", held, admitted, payload, budget)
	}

	// The connection and its other session keep working meanwhile.
	var sr wire.StepResult
	if r := rc.call(wire.Request{ID: 6, Op: wire.OpStep, Session: other.SessionID,
		ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: `{"command":"echo ok"}`}}}}, &sr); !r.OK ||
		sr.Observation.Messages[0].Content != gymtest.Output("ok\n") {
		t.Fatalf("step on another session while the budget is full: %+v %+v", r.Error, sr)
	}

	// Closing the slow session answers everything queued on it, which
	// gives the budget back.
	rc.request(wire.Request{ID: 7, Op: wire.OpClose, Session: slow.SessionID})
	for range admitted + 2 {
		r := rc.next()
		switch {
		case r.ID == 7:
			if !r.OK {
				t.Errorf("close: %+v", r.Error)
			}
		case r.OK || r.Error.Reason != wire.ReasonSessionClosed:
			t.Errorf("response %d after close: ok=%v error=%+v, want session_closed", r.ID, r.OK, r.Error)
		}
	}
	waittest.For(t, "the queued-bytes gauge to return to 0", 10*time.Second, func() bool { return mustQueuedBytes(t, ts) == 0 })

	// A large step fits again.
	if r := rc.call(textStep(8, other.SessionID, &text), &sr); !r.OK || sr.Info.Step != 2 {
		t.Errorf("large step after the budget was released: %+v %+v", r.Error, sr.Info)
	}
	if v := mustQueuedBytes(t, ts); v != 0 {
		t.Errorf("queued bytes %.0f after every request was answered, want 0", v)
	}
}

func TestQueuedBytesReleasedOnDisconnect(t *testing.T) {
	const budget = 4 << 20
	ts := startServer(t, server.Options{MaxFrameBytes: 1 << 20, MaxQueuedBytesPerConn: budget}, nil)
	rc := dialRaw(t, ts, nil)
	var r wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &r)
	rc.request(sleepStep(10, r.SessionID))
	text := strings.Repeat("x", 512<<10)
	if refused := pipelineBehindSleep(t, rc, r.SessionID, 12, &text); len(refused) == 0 {
		t.Fatal("no step refused: the budget is not applied")
	}
	if v := mustQueuedBytes(t, ts); v == 0 || v > budget {
		t.Fatalf("queued bytes %.0f with steps waiting, want between 0 and %d", v, budget)
	}
	rc.ws.Close()
	waittest.For(t, "the queued-bytes gauge to return to 0", 10*time.Second, func() bool { return mustQueuedBytes(t, ts) == 0 })
}

// heapAlloc returns the live heap after collecting garbage; two cycles
// also empty the sync.Pools.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func TestQueuedPayloadsMemory(t *testing.T) {
	const budget, payload, n = 32 << 20, 8 << 20, 60
	ts := startServer(t, server.Options{MaxQueuedBytesPerConn: budget}, nil)
	rc := dialRaw(t, ts, nil)
	var r wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &r)
	text := strings.Repeat("x", payload)
	base := heapAlloc()

	rc.request(sleepStep(10, r.SessionID))
	refused := pipelineBehindSleep(t, rc, r.SessionID, n, &text)
	held := int64(heapAlloc()) - int64(base)
	t.Logf("%d of %d steps of %d MiB refused; heap grew by %.1f MiB while the rest wait (budget %d MiB)",
		len(refused), n, payload>>20, float64(held)/(1<<20), budget>>20)
	// Without the budget every payload would be held: n × 8 MiB.
	if limit := int64(budget + payload/2); held > limit {
		t.Errorf("heap grew by %d bytes with steps queued, want at most %d (budget plus slack)", held, limit)
	}

	rc.request(wire.Request{ID: 7, Op: wire.OpClose, Session: r.SessionID})
	for range n - len(refused) + 2 { // the close, the sleeping step and the admitted ones
		rc.next()
	}
	waittest.For(t, "the queued-bytes gauge to return to 0", 10*time.Second, func() bool { return mustQueuedBytes(t, ts) == 0 })
	// Answered requests keep nothing of their payloads.
	if after := int64(heapAlloc()) - int64(base); after > payload/2 {
		t.Errorf("heap still %d bytes above the start after every step was answered, want under %d", after, payload/2)
	}
	runtime.KeepAlive(text) // counted in base
}

func TestQueuedBytesOption(t *testing.T) {
	reg, err := gym.NewRegistry(memEnv())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		frame, queued int64
		wantErr       string
	}{
		{"defaults", 0, 0, ""},
		{"equal_to_frame", 1 << 20, 1 << 20, ""},
		{"below_frame", 1 << 20, 1<<20 - 1, "max queued bytes per connection must be at least max frame bytes"},
		{"below_default_frame", 0, 1 << 20, "max queued bytes per connection must be at least max frame bytes"},
		{"negative", 0, -1, "max queued bytes per connection must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := server.New(server.Options{Registry: reg, MaxFrameBytes: tt.frame, MaxQueuedBytesPerConn: tt.queued})
			if err == nil {
				srv.Shutdown(t.Context())
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("New: %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}
