package server_test

import (
	"bytes"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

func encodeMap(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBadRequestsKeepConnection sends every kind of bad request on one
// connection that also holds a live session; each gets its documented error,
// and afterwards the connection and the session still work.
func TestBadRequestsKeepConnection(t *testing.T) {
	const maxFrame = 4096
	ts := startServer(t, server.Options{MaxFrameBytes: maxFrame}, nil)
	rc := dialRaw(t, ts, nil)
	var live, done wire.ResetResult
	rc.call(wire.Request{ID: 1, Op: wire.OpReset, Env: "mem"}, &live)
	rc.call(wire.Request{ID: 2, Op: wire.OpReset, Env: "mem"}, &done)
	rc.call(wire.Request{ID: 3, Op: wire.OpStep, Session: done.SessionID,
		ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolMarkDone, Arguments: "{}"}}}}, nil)
	var closed wire.ResetResult
	rc.call(wire.Request{ID: 4, Op: wire.OpReset, Env: "mem"}, &closed)
	rc.call(wire.Request{ID: 5, Op: wire.OpClose, Session: closed.SessionID}, nil)

	valid, _ := wire.Encode(wire.Request{ID: 10, Op: wire.OpStep, Session: live.SessionID})
	oversized, _ := wire.Encode(wire.Request{ID: 11, Op: wire.OpStep, Session: live.SessionID,
		Text: new(string), Parser: "hermes", Client: string(bytes.Repeat([]byte("x"), 2*maxFrame))})
	text := "hi"
	tests := []struct {
		name       string
		frame      []byte
		textFrame  bool
		wantID     uint64
		wantCode   gym.ErrorClass
		wantReason string
	}{
		{"step_after_terminal", mustEncode(t, wire.Request{ID: 20, Op: wire.OpStep, Session: done.SessionID}), false, 20, gym.ClassEpisodeDone, ""},
		{"step_after_close", mustEncode(t, wire.Request{ID: 21, Op: wire.OpStep, Session: closed.SessionID}), false, 21, gym.ClassEpisodeDone, wire.ReasonSessionClosed},
		{"unknown_session", mustEncode(t, wire.Request{ID: 22, Op: wire.OpStep, Session: "nope"}), false, 22, gym.ClassNotFound, wire.ReasonUnknownSession},
		{"close_unknown_session", mustEncode(t, wire.Request{ID: 23, Op: wire.OpClose, Session: "nope"}), false, 23, gym.ClassNotFound, wire.ReasonUnknownSession},
		{"missing_session", mustEncode(t, wire.Request{ID: 24, Op: wire.OpEvaluate}), false, 24, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"unknown_op", mustEncode(t, wire.Request{ID: 25, Op: "frobnicate"}), false, 25, gym.ClassInvalidArgument, wire.ReasonUnknownOp},
		{"unknown_env", mustEncode(t, wire.Request{ID: 26, Op: wire.OpReset, Env: "nope"}), false, 26, gym.ClassNotFound, wire.ReasonUnknownEnv},
		{"unknown_task", mustEncode(t, wire.Request{ID: 27, Op: wire.OpReset, Env: "mem", Task: "nope"}), false, 27, gym.ClassNotFound, ""},
		{"bad_options", mustEncode(t, wire.Request{ID: 28, Op: wire.OpReset, Env: "mem", Options: map[string]any{"x": 1}}), false, 28, gym.ClassInvalidArgument, ""},
		{"missing_env", mustEncode(t, wire.Request{ID: 29, Op: wire.OpReset}), false, 29, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"unknown_parser", mustEncode(t, wire.Request{ID: 30, Op: wire.OpStep, Session: live.SessionID, Text: &text, Parser: "xml"}), false, 30, gym.ClassInvalidArgument, wire.ReasonUnknownParser},
		{"text_without_parser", mustEncode(t, wire.Request{ID: 31, Op: wire.OpStep, Session: live.SessionID, Text: &text}), false, 31, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"text_and_tool_calls", mustEncode(t, wire.Request{ID: 32, Op: wire.OpStep, Session: live.SessionID, Text: &text, Parser: "hermes",
			ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: "x"}}}}), false, 32, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"wrong_type_session", encodeMap(t, map[string]any{"id": 33, "op": "step", "session": 42}), false, 33, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"wrong_type_tool_calls", encodeMap(t, map[string]any{"id": 34, "op": "step", "session": live.SessionID, "tool_calls": "echo hi"}), false, 34, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"wrong_type_id", encodeMap(t, map[string]any{"id": "x", "op": "hello"}), false, 0, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"missing_op", encodeMap(t, map[string]any{"id": 36}), false, 36, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"empty_op", encodeMap(t, map[string]any{"id": 37, "op": ""}), false, 37, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"truncated", valid[:len(valid)-3], false, 10, gym.ClassInvalidArgument, wire.ReasonBadFrame},
		{"trailing_bytes", append(append([]byte{}, valid...), 0xc0), false, 10, gym.ClassInvalidArgument, wire.ReasonBadFrame},
		{"not_msgpack", []byte("\xc1\xc1 this is not msgpack"), false, 0, gym.ClassInvalidArgument, wire.ReasonBadFrame},
		{"not_a_map", mustEncodeAny(t, []any{1, "step"}), false, 0, gym.ClassInvalidArgument, wire.ReasonBadFrame},
		{"empty_frame", []byte{}, false, 0, gym.ClassInvalidArgument, wire.ReasonBadFrame},
		{"too_deep", append([]byte{0x82, 0xa2, 'i', 'd', 0x23, 0xa1, 'x'}, append(bytes.Repeat([]byte{0x91}, 200), 0xc0)...), false, 35, gym.ClassInvalidArgument, wire.ReasonBadFrame},
		{"text_message", []byte(`{"id": 1, "op": "hello"}`), true, 0, gym.ClassInvalidArgument, wire.ReasonBadFrame},
		{"oversized", oversized, false, 11, gym.ClassResourceExhausted, wire.ReasonFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mt := websocket.BinaryMessage
			if tt.textFrame {
				mt = websocket.TextMessage
			}
			if err := rc.ws.WriteMessage(mt, tt.frame); err != nil {
				t.Fatal(err)
			}
			r := rc.next()
			if r.OK || r.Error == nil {
				t.Fatalf("got ok response, want error %s/%s", tt.wantCode, tt.wantReason)
			}
			if r.ID != tt.wantID || r.Error.Code != string(tt.wantCode) || r.Error.Reason != tt.wantReason || r.Error.Message == "" {
				t.Errorf("got id %d error %+v, want id %d code %s reason %q", r.ID, *r.Error, tt.wantID, tt.wantCode, tt.wantReason)
			}
			if r.Error.Mask != gym.Masked(tt.wantCode) {
				t.Errorf("mask = %v for %s", r.Error.Mask, tt.wantCode)
			}
			// The connection and the live session keep working.
			var sr wire.StepResult
			resp := rc.call(wire.Request{ID: 1000, Op: wire.OpStep, Session: live.SessionID,
				ToolCalls: []wire.ToolCall{{Function: wire.FunctionCall{Name: gym.ToolExecuteCommand, Arguments: `{"command":"echo ok"}`}}}}, &sr)
			if !resp.OK || sr.Observation.Messages[0].Content != gymtest.Output("ok\n") {
				t.Fatalf("live session after %s: %+v %+v", tt.name, resp.Error, sr)
			}
		})
	}
}

func mustEncode(t *testing.T, req wire.Request) []byte {
	t.Helper()
	b, err := wire.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEncodeAny(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRequestIDs checks that only ids from 1 to 2^53−1 are served; the
// others are refused with bad_request, answered with the id when it is a
// readable unsigned integer and 0 otherwise.
func TestRequestIDs(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	rc := dialRaw(t, ts, nil)
	tests := []struct {
		name   string
		id     any // absent: no id field
		wantOK bool
		wantID uint64
	}{
		{"one", 1, true, 1},
		{"max", uint64(wire.MaxID), true, wire.MaxID},
		{"missing", absent{}, false, 0},
		{"nil", nil, false, 0},
		{"zero", 0, false, 0},
		{"negative", -1, false, 0},
		{"negative_int64", int64(-1 << 40), false, 0},
		{"above_max", uint64(wire.MaxID + 1), false, wire.MaxID + 1},
		{"max_uint64", ^uint64(0), false, ^uint64(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := map[string]any{"op": "hello"}
			if _, ok := tt.id.(absent); !ok {
				req["id"] = tt.id
			}
			rc.send(encodeMap(t, req))
			r := rc.next()
			if r.ID != tt.wantID {
				t.Errorf("response id %d, want %d", r.ID, tt.wantID)
			}
			if tt.wantOK {
				if !r.OK {
					t.Errorf("got error %+v, want ok", r.Error)
				}
				return
			}
			if r.OK || r.Error == nil || r.Error.Code != string(gym.ClassInvalidArgument) || r.Error.Reason != wire.ReasonBadRequest {
				t.Errorf("got ok=%v error %+v, want invalid_argument/bad_request", r.OK, r.Error)
			}
		})
	}
}

// absent marks a field left out of a request.
type absent struct{}
