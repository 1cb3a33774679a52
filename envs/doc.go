// Package envs turns task configurations into gym environments.
//
// A TaskEnv is one configured environment (one entry of the config's
// environments list): Reset prepares its image once (init commands and
// copied files, cached by content hash), starts a sandbox per session, and
// the session dispatches the standard tools to it, and the custom tools of
// the environment and the task (config.Tool, and Options.Tools registered
// in code): each runs its command as the agent with the call's checked
// arguments as JSON on stdin, like execute_command in every other way. When the episode ends the
// agent's processes are killed, the hidden tests are copied in with a guard
// plugin and canary tests, the unit_tests commands run, and the reward is
// the pass rate over the test cases of pytest's JUnit report (read from a
// pipe) or, for other commands, their exit status; a report that shows
// forgery marks the evaluation tampered (see testrun.go).
//
// Subpackages: config (the seed-compatible JSON), sandbox (the interface),
// docker (the Docker backend), executor (the in-sandbox helper), testresult
// (JUnit and pytest parsing), baseimage (a registry-free base image).
package envs
