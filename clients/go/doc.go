// Package gymclient is the Go client of gymserver: it speaks the WebSocket
// + msgpack protocol of server/wire (see server/wire/PROTOCOL.md).
//
// A Client is one connection; it is safe for concurrent use and carries
// many sessions at once, with pipelined requests. Remote sessions and
// environments implement gym.Session and gym.Env, so code written against a
// local gym.Registry (the rollout runner, for instance) runs unchanged
// against a server:
//
//	c, err := gymclient.Dial(ctx, "ws://127.0.0.1:8080/v1/ws", gymclient.Options{Token: tok})
//	reg, err := c.Registry(ctx) // a *gym.Registry of remote environments
//
// Tasks: an environment may hold thousands of tasks. Its Spec carries the
// first 100 and TaskCount; Client.Tasks fetches one page, and a remote Env
// implements gym.TaskLister (and ListTasks, the same with a context and an
// error), paging through all of them.
//
// Snapshots: a remote Session implements gym.Snapshotter and a remote Env
// gym.Forker; Client.Fork starts several sessions from one snapshot in one
// request. Snapshots belong to the connection that took them and are
// dropped when it closes.
//
// Many servers: a Pool (DialPool or NewPool) holds a connection to each
// of several servers (more to one whose open connections hold its
// max_sessions_per_connection) and spreads new sessions over them: the
// server with
// the fewest open sessions of the pool, ties round robin. A group
// (Pool.ResetGroup) goes to one server as a whole, and forks go to the
// server of the snapshot's session. When a server goes away its sessions
// fail with errors of class unavailable; new sessions go to the others and
// the lost server is tried again after a backoff. Pool.Env returns a
// gym.Env whose resets go through the pool.
//
// Errors from the server keep their class: gym.ClassOf and errors.Is with
// the gym sentinels work on them, and errors.As gives the *Error with the
// wire code, reason and mask hint. A lost connection fails every pending
// and later request with an error of class unavailable.
package gymclient
