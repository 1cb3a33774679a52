// Package envs turns task configurations into gym environments.
//
// A TaskEnv is one configured environment (one entry of the config's
// environments list): Reset prepares its image once (init commands and
// copied files, cached by content hash), starts a sandbox per session, and
// the session dispatches the standard tools to it. When the episode ends the
// agent's processes are killed, the hidden tests are copied in, the
// unit_tests commands run, and the reward is the pass rate over test cases.
//
// Subpackages: config (the seed-compatible JSON), sandbox (the interface),
// docker (the Docker backend), executor (the in-sandbox helper), testresult
// (JUnit and pytest parsing), baseimage (a registry-free base image).
package envs
