// Package wire defines the frames of the gymserver WebSocket protocol and
// their msgpack encoding: the request and response envelopes, the result of
// every op, the stable error codes and reasons, and conversions to and from
// the gym contract types.
//
// PROTOCOL.md in this directory is the normative specification; the types
// here mirror it field for field. The package is a leaf: it imports only gym
// and the msgpack library, so clients can depend on it without pulling in
// the server.
//
// Decode is safe on hostile input: it checks a frame's structure (well-formed
// msgpack, one map, bounded nesting, no trailing bytes) without recursion
// before decoding it.
package wire
