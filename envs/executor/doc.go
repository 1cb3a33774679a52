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
//
// Inside a sandbox it runs as root with a handful of capabilities and acts
// for the agent (serve --agent UID:GID): commands start as the agent's uid,
// file operations run on a thread whose file-system uid is the agent's, and
// KillAll sends SIGKILL to every process of that uid from a thread that has
// taken it (one kill(-1) is atomic against fork), until none is left. The
// agent can therefore neither signal nor trace the executor, nor survive
// into evaluation. A command may get a report pipe on fd 3, read to its end
// only after every agent process is gone.
//
// For snapshots it lists the places the agent can write (Root), archives
// them as the agent, holding the archive until the client fetches it, and
// restores such an archive as the agent, so that a restore cannot put
// anything where, or as whom, the agent could not have.
package executor
