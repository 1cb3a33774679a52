package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrMalformed is the error of a frame that is not one well-formed msgpack
// map (reason bad_frame).
var ErrMalformed = errors.New("malformed frame")

// ErrBadRequest is the error of a well-formed frame whose fields have the
// wrong types (reason bad_request).
var ErrBadRequest = errors.New("bad request")

// encoder is a pooled msgpack encoder with its buffer.
type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	e.enc.UseCompactInts(true)
	// Sorted keys make frames with maps (tool schemas, options)
	// deterministic, which golden tests and caches rely on.
	e.enc.SetSortMapKeys(true)
	return e
}}

// maxPooledBuffer is the largest buffer returned to the pool, so that one
// huge frame does not pin its memory forever.
const maxPooledBuffer = 1 << 20

// Encode returns the msgpack encoding of v, normally a Request or a
// Response. Struct fields are encoded in declaration order and map keys
// sorted, so equal values give equal bytes.
func Encode(v any) ([]byte, error) {
	e := encoders.Get().(*encoder)
	e.buf.Reset()
	err := e.enc.Encode(v)
	out := bytes.Clone(e.buf.Bytes())
	if e.buf.Cap() <= maxPooledBuffer {
		encoders.Put(e)
	}
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	return out, nil
}

// Decode checks that frame is one well-formed msgpack map (see Check) and
// decodes it into v, normally a *Request or a *Response. Errors wrap
// ErrMalformed or ErrBadRequest. Decode never panics and allocates in
// proportion to len(frame).
func Decode(frame []byte, v any) error {
	if err := Check(frame); err != nil {
		return err
	}
	if err := unmarshal(frame, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return nil
}

// unmarshal is msgpack.Unmarshal with a decoder of its own: the library's
// pooled decoders keep a scratch buffer as large as the longest string they
// have read, so one large frame would stay pinned after its request ended.
func unmarshal(data []byte, v any) error {
	d := msgpack.NewDecoder(bytes.NewReader(data))
	d.UsePreallocateValues(true)
	return d.Decode(v)
}

// DecodeResult decodes a response's raw result into v.
func DecodeResult(raw msgpack.RawMessage, v any) error {
	if len(raw) == 0 {
		return fmt.Errorf("%w: response has no result", ErrBadRequest)
	}
	if _, err := valueLen(raw, MaxDepth); err != nil {
		return err
	}
	if err := unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return nil
}

// RawResponse is a response whose result is kept undecoded until the
// caller knows its type; clients decode frames into it.
type RawResponse struct {
	ID     uint64             `msgpack:"id"`
	OK     bool               `msgpack:"ok"`
	Result msgpack.RawMessage `msgpack:"result,omitempty"`
	Error  *Error             `msgpack:"error,omitempty"`
}

// Check reports whether frame is exactly one well-formed msgpack map whose
// nesting is at most MaxDepth. It does not recurse, so a hostile frame cannot
// exhaust the stack. Errors wrap ErrMalformed.
func Check(frame []byte) error {
	if len(frame) == 0 {
		return fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if c := frame[0]; !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return fmt.Errorf("%w: frame is not a map (first byte 0x%02x)", ErrMalformed, c)
	}
	n, err := valueLen(frame, MaxDepth)
	if err != nil {
		return err
	}
	if n != len(frame) {
		return fmt.Errorf("%w: %d trailing bytes after the map", ErrMalformed, len(frame)-n)
	}
	return nil
}

// valueLen returns the length in bytes of the msgpack value at the start of
// b, walking nested containers iteratively with an explicit stack.
func valueLen(b []byte, maxDepth int) (int, error) {
	pos := 0
	// stack holds, for each open container, the values still to read in
	// its parent; need is the values still to read at the current level.
	var stackBuf [16]uint64
	stack := stackBuf[:0]
	need := uint64(1)
	for {
		for need == 0 {
			if len(stack) == 0 {
				return pos, nil
			}
			need = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		need--
		if pos >= len(b) {
			return 0, fmt.Errorf("%w: truncated at byte %d", ErrMalformed, pos)
		}
		c := b[pos]
		pos++
		var (
			size     uint64 // bytes of payload to skip
			children uint64 // values inside a container
			lenBytes int    // bytes of an explicit length field
			ext      bool   // an ext type byte follows the length
		)
		switch {
		case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.NegFixedNumLow:
		case msgpcode.IsFixedMap(c):
			children = 2 * uint64(c&msgpcode.FixedMapMask)
		case msgpcode.IsFixedArray(c):
			children = uint64(c & msgpcode.FixedArrayMask)
		case msgpcode.IsFixedString(c):
			size = uint64(c & msgpcode.FixedStrMask)
		default:
			switch c {
			case msgpcode.Nil, msgpcode.False, msgpcode.True:
			case msgpcode.Uint8, msgpcode.Int8:
				size = 1
			case msgpcode.Uint16, msgpcode.Int16:
				size = 2
			case msgpcode.Uint32, msgpcode.Int32, msgpcode.Float:
				size = 4
			case msgpcode.Uint64, msgpcode.Int64, msgpcode.Double:
				size = 8
			case msgpcode.Bin8, msgpcode.Str8:
				lenBytes = 1
			case msgpcode.Bin16, msgpcode.Str16, msgpcode.Array16, msgpcode.Map16:
				lenBytes = 2
			case msgpcode.Bin32, msgpcode.Str32, msgpcode.Array32, msgpcode.Map32:
				lenBytes = 4
			case msgpcode.FixExt1:
				size = 1 + 1
			case msgpcode.FixExt2:
				size = 1 + 2
			case msgpcode.FixExt4:
				size = 1 + 4
			case msgpcode.FixExt8:
				size = 1 + 8
			case msgpcode.FixExt16:
				size = 1 + 16
			case msgpcode.Ext8:
				lenBytes, ext = 1, true
			case msgpcode.Ext16:
				lenBytes, ext = 2, true
			case msgpcode.Ext32:
				lenBytes, ext = 4, true
			default:
				return 0, fmt.Errorf("%w: invalid msgpack byte 0x%02x at %d", ErrMalformed, c, pos-1)
			}
		}
		if lenBytes > 0 {
			if len(b)-pos < lenBytes {
				return 0, fmt.Errorf("%w: truncated at byte %d", ErrMalformed, len(b))
			}
			var n uint64
			switch lenBytes {
			case 1:
				n = uint64(b[pos])
			case 2:
				n = uint64(binary.BigEndian.Uint16(b[pos:]))
			case 4:
				n = uint64(binary.BigEndian.Uint32(b[pos:]))
			}
			pos += lenBytes
			switch c {
			case msgpcode.Array16, msgpcode.Array32:
				children = n
			case msgpcode.Map16, msgpcode.Map32:
				children = 2 * n
			default:
				size = n
				if ext {
					size++
				}
			}
		}
		if size > 0 {
			if uint64(len(b)-pos) < size {
				return 0, fmt.Errorf("%w: truncated at byte %d", ErrMalformed, len(b))
			}
			pos += int(size)
		}
		if children > 0 {
			// Every value takes at least one byte: reject impossible
			// counts before walking them.
			if children > uint64(len(b)-pos) {
				return 0, fmt.Errorf("%w: truncated at byte %d", ErrMalformed, len(b))
			}
			if len(stack) >= maxDepth {
				return 0, fmt.Errorf("%w: nested deeper than %d", ErrMalformed, maxDepth)
			}
			stack = append(stack, need)
			need = children
		}
	}
}

// PeekID returns the id of the request or response in frame, which may be
// truncated or malformed after the id. It finds the top-level "id" key
// without decoding anything else.
func PeekID(frame []byte) (uint64, bool) {
	if len(frame) == 0 {
		return 0, false
	}
	c := frame[0]
	pos := 1
	var n int
	switch {
	case msgpcode.IsFixedMap(c):
		n = int(c & msgpcode.FixedMapMask)
	case c == msgpcode.Map16 && len(frame) >= 3:
		n = int(binary.BigEndian.Uint16(frame[1:]))
		pos = 3
	case c == msgpcode.Map32 && len(frame) >= 5:
		n = int(binary.BigEndian.Uint32(frame[1:]))
		pos = 5
	default:
		return 0, false
	}
	for range n {
		klen, err := valueLen(frame[pos:], MaxDepth)
		if err != nil {
			return 0, false
		}
		key := frame[pos : pos+klen]
		pos += klen
		if isStr(key, "id") {
			return peekUint(frame[pos:])
		}
		vlen, err := valueLen(frame[pos:], MaxDepth)
		if err != nil {
			return 0, false
		}
		pos += vlen
	}
	return 0, false
}

// isStr reports whether the encoded value enc is the string s.
func isStr(enc []byte, s string) bool {
	if len(enc) == 0 {
		return false
	}
	c := enc[0]
	switch {
	case msgpcode.IsFixedString(c):
		return string(enc[1:]) == s
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		return len(enc) >= 2 && string(enc[2:]) == s
	}
	return false
}

// peekUint decodes a non-negative integer at the start of b.
func peekUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	c := b[0]
	if c <= msgpcode.PosFixedNumHigh {
		return uint64(c), true
	}
	var width int
	switch c {
	case msgpcode.Uint8, msgpcode.Int8:
		width = 1
	case msgpcode.Uint16, msgpcode.Int16:
		width = 2
	case msgpcode.Uint32, msgpcode.Int32:
		width = 4
	case msgpcode.Uint64, msgpcode.Int64:
		width = 8
	default:
		return 0, false
	}
	if len(b) < 1+width {
		return 0, false
	}
	var u uint64
	for _, x := range b[1 : 1+width] {
		u = u<<8 | uint64(x)
	}
	signed := c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64
	if signed && b[1]&0x80 != 0 {
		return 0, false
	}
	return u, true
}

// Arguments is the raw JSON text of a tool call's arguments. On the wire it
// is a string; a map or array is accepted too and re-encoded as JSON.
type Arguments string

// DecodeMsgpack implements msgpack.CustomDecoder.
func (a *Arguments) DecodeMsgpack(d *msgpack.Decoder) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case c == msgpcode.Nil:
		*a = ""
		return d.DecodeNil()
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		s, err := d.DecodeString()
		*a = Arguments(s)
		return err
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32,
		msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		v, err := d.DecodeInterfaceLoose()
		if err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("arguments: %w", err)
		}
		*a = Arguments(b)
		return nil
	}
	return fmt.Errorf("arguments: want a JSON string or a map, got msgpack type 0x%02x", c)
}
