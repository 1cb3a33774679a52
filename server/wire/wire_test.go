package wire_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/goldentest"
	"github.com/gymserver/gymserver/server/wire"
)

// render shows a frame as its hex bytes and as indented JSON.
func render(t *testing.T, f []byte) string {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(f, &v); err != nil {
		t.Fatal(err)
	}
	j, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# msgpack, hex (%d bytes)\n", len(f))
	h := hex.EncodeToString(f)
	for len(h) > 64 {
		b.WriteString(h[:64] + "\n")
		h = h[64:]
	}
	b.WriteString(h + "\n# as JSON\n")
	b.Write(j)
	b.WriteString("\n")
	return b.String()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestGolden(t *testing.T) {
	for _, f := range exampleFrames() {
		t.Run(f.name, func(t *testing.T) {
			enc, err := wire.Encode(f.v)
			if err != nil {
				t.Fatal(err)
			}
			if err := wire.Check(enc); err != nil {
				t.Fatalf("encoded frame fails Check: %v", err)
			}
			goldentest.Check(t, filepath.Join("testdata", f.name+".golden"), []byte(render(t, enc)))
			// Every frame decodes back to what was encoded.
			switch v := f.v.(type) {
			case wire.Request:
				var back wire.Request
				if err := wire.Decode(enc, &back); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(v, back); d != "" {
					t.Errorf("request round trip (-want +got):\n%s", d)
				}
			case wire.Response:
				var back wire.RawResponse
				if err := wire.Decode(enc, &back); err != nil {
					t.Fatal(err)
				}
				if back.ID != v.ID || back.OK != v.OK || !cmp.Equal(back.Error, v.Error) {
					t.Errorf("response envelope round trip: %+v", back)
				}
			}
			if id, ok := wire.PeekID(enc); !ok || id == 0 {
				t.Errorf("PeekID = %d, %v", id, ok)
			}
		})
	}
}

func TestConversionsRoundTrip(t *testing.T) {
	for _, f := range exampleFrames() {
		resp, ok := f.v.(wire.Response)
		if !ok || !resp.OK {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			enc := must(wire.Encode(resp))
			var raw wire.RawResponse
			if err := wire.Decode(enc, &raw); err != nil {
				t.Fatal(err)
			}
			switch want := resp.Result.(type) {
			case wire.StepResult:
				var got wire.StepResult
				if err := wire.DecodeResult(raw.Result, &got); err != nil {
					t.Fatal(err)
				}
				// wire -> gym -> wire is the identity.
				again := wire.FromStepResult(wire.ToStepResult(got))
				again.ToolCalls = got.ToolCalls
				if d := cmp.Diff(want, again); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			case wire.ResetResult:
				var got wire.ResetResult
				if err := wire.DecodeResult(raw.Result, &got); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, wire.FromReset(wire.ToReset(got))); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			case wire.SnapshotResult:
				var got wire.SnapshotResult
				if err := wire.DecodeResult(raw.Result, &got); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want.Snapshot, wire.FromSnapshot(wire.ToSnapshot(got.Snapshot))); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			case wire.ForkResult:
				var got wire.ForkResult
				if err := wire.DecodeResult(raw.Result, &got); err != nil {
					t.Fatal(err)
				}
				if len(got.Sessions) != len(want.Sessions) {
					t.Fatalf("%d sessions, want %d", len(got.Sessions), len(want.Sessions))
				}
				for i, r := range got.Sessions {
					if d := cmp.Diff(want.Sessions[i], wire.FromReset(wire.ToReset(r))); d != "" {
						t.Errorf("session %d (-want +got):\n%s", i, d)
					}
				}
			case wire.TasksResult:
				var got wire.TasksResult
				if err := wire.DecodeResult(raw.Result, &got); err != nil {
					t.Fatal(err)
				}
				// wire -> gym -> wire is the identity, metadata included.
				if d := cmp.Diff(want.Tasks, wire.FromTaskSpecs(wire.ToTaskSpecs(got.Tasks))); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			case wire.EnvsResult:
				var got wire.EnvsResult
				if err := wire.DecodeResult(raw.Result, &got); err != nil {
					t.Fatal(err)
				}
				for i, e := range got.Envs {
					again := wire.FromEnvSpec(wire.ToEnvSpec(e))
					again.Snapshot = e.Snapshot
					if d := cmp.Diff(want.Envs[i], again); d != "" {
						t.Errorf("env %d (-want +got):\n%s", i, d)
					}
				}
			case wire.Result:
				var got wire.Result
				if err := wire.DecodeResult(raw.Result, &got); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, wire.FromResult(wire.ToResult(got))); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestCheckRejects(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, wire.MaxDepth+2) // nested one-element arrays
	deep = append(deep, 0xc0)
	deepMap := append([]byte{0x81, 0xa1, 'x'}, deep...)
	ok := must(wire.Encode(wire.Request{ID: 9, Op: "hello"}))
	tests := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"empty", nil, "empty frame"},
		{"not_a_map", []byte{0x93, 1, 2, 3}, "not a map"},
		{"not_msgpack", []byte("GET / HTTP/1.1\r\n"), "not a map"},
		{"invalid_byte", []byte{0x81, 0xa1, 'x', 0xc1}, "invalid msgpack byte"},
		{"truncated", ok[:len(ok)-2], "truncated"},
		{"trailing", append(append([]byte{}, ok...), 0xc0), "trailing"},
		{"too_deep", deepMap, "nested deeper"},
		{"huge_count", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "truncated"},
		{"huge_string", []byte{0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := wire.Check(tt.frame)
			if !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check = %v, want ErrMalformed with %q", err, tt.want)
			}
			var r wire.Request
			if err := wire.Decode(tt.frame, &r); !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("Decode = %v, want ErrMalformed", err)
			}
		})
	}
}

// TestCheckDepth pins how max_depth is counted (PROTOCOL.md §5): the
// frame's map is level 1, each non-empty map or array inside adds one; an
// empty one or a scalar adds none.
func TestCheckDepth(t *testing.T) {
	// nested is the frame {"x": [[...[last]...]]} with levels levels of
	// maps and arrays, the innermost holding last.
	nested := func(levels int, last byte) []byte {
		f := []byte{0x81, 0xa1, 'x'}
		f = append(f, bytes.Repeat([]byte{0x91}, levels-1)...)
		return append(f, last)
	}
	for _, tt := range []struct {
		name  string
		frame []byte
		ok    bool
	}{
		{"max_depth_levels", nested(wire.MaxDepth, 0xc0), true},
		{"one_level_more", nested(wire.MaxDepth+1, 0xc0), false},
		{"empty_array_one_level_more", nested(wire.MaxDepth, 0x90), true},
		{"empty_map_one_level_more", nested(wire.MaxDepth, 0x80), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := wire.Check(tt.frame); (err == nil) != tt.ok {
				t.Errorf("Check = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestDecodeWrongTypes(t *testing.T) {
	for _, tt := range []struct {
		name string
		v    map[string]any
	}{
		{"id_string", map[string]any{"id": "one", "op": "hello"}},
		{"op_number", map[string]any{"id": 1, "op": 5}},
		{"tool_calls_string", map[string]any{"id": 1, "op": "step", "tool_calls": "echo"}},
		{"arguments_number", map[string]any{"id": 1, "op": "step", "tool_calls": []any{map[string]any{"function": map[string]any{"name": "x", "arguments": 5}}}}},
		{"options_list", map[string]any{"id": 1, "op": "reset", "options": []any{1}}},
		{"n_string", map[string]any{"id": 1, "op": "fork", "snapshot": "s", "n": "3"}},
		{"snapshot_map", map[string]any{"id": 1, "op": "drop_snapshot", "snapshot": map[string]any{"id": "s"}}},
		{"prompts_string", map[string]any{"id": 1, "op": "tasks", "env": "e", "prompts": "no"}},
		{"offset_string", map[string]any{"id": 1, "op": "tasks", "env": "e", "offset": "10"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := must(msgpack.Marshal(tt.v))
			var r wire.Request
			if err := wire.Decode(f, &r); !errors.Is(err, wire.ErrBadRequest) {
				t.Errorf("Decode = %v, want ErrBadRequest", err)
			}
			if id, ok := wire.PeekID(f); tt.name != "id_string" && (!ok || id != 1) {
				t.Errorf("PeekID = %d, %v; want 1", id, ok)
			}
		})
	}
}

func TestArgumentsAcceptMap(t *testing.T) {
	f := must(msgpack.Marshal(map[string]any{"id": 1, "op": "step", "tool_calls": []any{
		map[string]any{"id": "c", "function": map[string]any{"name": "write_file", "arguments": map[string]any{"filepath": "a", "content": "b"}}},
	}}))
	var r wire.Request
	if err := wire.Decode(f, &r); err != nil {
		t.Fatal(err)
	}
	calls := wire.ToToolCalls(r.ToolCalls)
	want := []gym.ToolCall{gym.NewToolCall("c", "write_file", `{"content":"b","filepath":"a"}`)}
	if d := cmp.Diff(want, calls); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestPeekIDPrefixes(t *testing.T) {
	f := must(wire.Encode(wire.Request{ID: 123456, Op: "step", Session: strings.Repeat("s", 1000)}))
	for n := range len(f) + 1 {
		id, ok := wire.PeekID(f[:n])
		if ok && id != 123456 {
			t.Fatalf("PeekID(prefix %d) = %d", n, id)
		}
		if n >= 10 && !ok {
			t.Fatalf("PeekID(prefix %d) found no id", n)
		}
	}
}

// FuzzDecode feeds arbitrary frames to the decoder: it must never panic,
// must accept every frame Check accepts structurally, and what it decodes
// must encode and decode again.
func FuzzDecode(f *testing.F) {
	for _, fr := range exampleFrames() {
		f.Add(must(wire.Encode(fr.v)))
	}
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add(append(bytes.Repeat([]byte{0x91}, 100), 0xc0))
	// Snapshot frames with odd values: a negative and a huge n, an empty id.
	f.Add(must(msgpack.Marshal(map[string]any{"id": 1, "op": "fork", "snapshot": "s", "n": -1})))
	f.Add(must(msgpack.Marshal(map[string]any{"id": 2, "op": "fork", "snapshot": "s", "n": uint64(1) << 63})))
	f.Add(must(msgpack.Marshal(map[string]any{"id": 3, "op": "snapshot", "session": ""})))
	// Tasks frames with odd values: negative and huge offsets and limits,
	// prompts of the wrong type.
	f.Add(must(msgpack.Marshal(map[string]any{"id": 4, "op": "tasks", "env": "e", "offset": -1, "limit": uint64(1) << 63})))
	f.Add(must(msgpack.Marshal(map[string]any{"id": 5, "op": "tasks", "env": "e", "prompts": "no"})))
	f.Fuzz(func(t *testing.T, frame []byte) {
		wire.PeekID(frame)
		var req wire.Request
		if err := wire.Decode(frame, &req); err == nil {
			enc, err := wire.Encode(req)
			if err != nil {
				t.Fatalf("re-encode %+v: %v", req, err)
			}
			var again wire.Request
			if err := wire.Decode(enc, &again); err != nil {
				t.Fatalf("decode re-encoded request: %v", err)
			}
		} else if !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("unclassified decode error: %v", err)
		}
		var resp wire.RawResponse
		if err := wire.Decode(frame, &resp); err == nil && resp.OK && len(resp.Result) > 0 {
			var sr wire.StepResult
			wire.DecodeResult(resp.Result, &sr)
			var fr wire.ForkResult
			wire.DecodeResult(resp.Result, &fr)
			var snr wire.SnapshotResult
			wire.DecodeResult(resp.Result, &snr)
			var tr wire.TasksResult
			wire.DecodeResult(resp.Result, &tr)
		}
	})
}
