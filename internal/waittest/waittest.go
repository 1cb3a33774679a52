// Package waittest polls asynchronous conditions in tests with a deadline,
// so that no test sleeps blindly or gives up without failing.
package waittest

import (
	"testing"
	"time"
)

// maxInterval is the longest pause between two checks; the first pauses
// are shorter, so that a condition that holds soon is seen soon.
const maxInterval = 100 * time.Millisecond

// For polls cond until it holds, failing the test, with what it waited
// for, when within passes or the test's context ends.
func For(tb testing.TB, what string, within time.Duration, cond func() bool) {
	tb.Helper()
	Until(tb, what, within, func() (bool, error) { return cond(), nil })
}

// Until is For with a condition that can fail: an error fails the test at
// once.
func Until(tb testing.TB, what string, within time.Duration, cond func() (bool, error)) {
	tb.Helper()
	deadline := time.Now().Add(within)
	interval := time.Millisecond
	for {
		ok, err := cond()
		if err != nil {
			tb.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", within, what)
		}
		select {
		case <-tb.Context().Done():
			tb.Fatalf("waiting for %s: %v", what, tb.Context().Err())
		case <-time.After(interval):
		}
		interval = min(2*interval, maxInterval)
	}
}
