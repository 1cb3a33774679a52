// Package openaitest is a test fixture: an OpenAI-compatible chat-completions
// server on 127.0.0.1 that answers from a script.
//
// It speaks the real wire format of POST /v1/chat/completions and
// GET /v1/models, including OpenAI error bodies, so a client under test goes
// through the same HTTP, JSON and error paths as against OpenRouter, vLLM or
// OpenAI. Like a real endpoint it rejects malformed conversations (for
// example a tool call left without its tool message). Every request is
// recorded with its arrival time so tests can assert on what the model saw
// and on retry timing.
//
// Only tests import this package; it is never a default anywhere.
package openaitest
