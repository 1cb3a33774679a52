// Package executor is the helper that runs inside every sandbox, and the
// client that drives it.
//
// The Docker backend starts one executor per container with `docker exec`
// and keeps its stdin and stdout attached; every tool call then costs one
// round trip on that stream instead of a new docker exec (about 40 ms).
// Frames are a 4-byte big-endian length followed by a msgpack map; requests
// carry an id and are answered out of order, so a client can pipeline.
//
// The executor runs each command as argv (no shell unless asked for) in its
// own process group, enforces timeouts inside the container by killing the
// whole group and every descendant, caps output keeping head and tail, does
// file operations without shell quoting, and tracks background processes so
// they can be killed before evaluation.
package executor
