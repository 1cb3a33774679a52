// Package sandboxtest helps test sandbox backends and the layers above
// them: it builds the executor binary, runs the conformance suite every
// backend must pass, and offers an in-memory fake sandbox. Production code
// never imports it.
package sandboxtest
