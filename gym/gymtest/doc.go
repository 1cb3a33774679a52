// Package gymtest provides an in-memory gym.Env for tests of the layers
// above the environments (server, clients, policy drivers).
//
// Its sessions keep files in a map and understand a handful of commands
// (echo, cat, true, false, sleep, and crash, which fails like a dead
// sandbox), so an episode runs in microseconds and needs no Docker.
// Sessions can be saved (gym.Snapshotter) and the environment forks them
// (gym.Forker): a fork gets a copy of the files and continues the counts
// and the clock.
// Production code never imports this package.
package gymtest
