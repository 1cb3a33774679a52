// Package server serves gym environments over the WebSocket + msgpack
// protocol specified in wire/PROTOCOL.md.
//
// A Server holds the session table of every connection, enforces the
// limits (frame size, sessions per server and per connection, in-flight
// requests and their bytes, concurrent resets, idle-session TTL),
// authenticates the upgrade with a bearer token, exports Prometheus
// metrics and drains gracefully.
// Environments come from an injected Registry, so the server never depends
// on a concrete environment.
//
// Each connection has exactly one reader and one writer goroutine; requests
// run in their own goroutines, and requests on one session run one at a
// time in arrival order. Closing a connection closes its sessions and drops
// its snapshots: snapshots, like sessions, belong to the connection that
// made them, and the server routes fork and drop_snapshot to the
// environment (a gym.Forker) that holds each one.
package server
