// Package gymtest provides an in-memory gym.Env for tests of the layers
// above the environments (server, clients, policy drivers).
//
// It is not a second implementation of an episode: an Env is the real
// episode logic (envs.TaskEnv: tools, limits, parsing, evaluation,
// snapshots) over the in-memory sandbox of envs/sandbox/sandboxtest, so
// what the layers above see is what they get from a Docker-backed
// environment, in microseconds and without Docker. Only the sandbox is
// pretend: its commands are a tiny shell (see Env) and its files live in a
// map. The package sits under gym because the layers above know gym, not
// envs; it imports envs, which production code under gym never does.
// Production code never imports this package.
package gymtest
