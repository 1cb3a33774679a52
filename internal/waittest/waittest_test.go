package waittest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/internal/waittest"
)

func TestForSeesACondition(t *testing.T) {
	n := 0
	waittest.For(t, "three checks", time.Minute, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("%d checks", n)
	}
}

// fatal is a testing.TB whose Fatalf records the failure and ends the
// calling goroutine's function by panicking with it.
type fatal struct {
	testing.TB
}

type failure string

func (fatal) Helper() {}

func (fatal) Fatalf(format string, args ...any) { panic(failure(fmt.Sprintf(format, args...))) }

// failed runs f and returns the failure it ended with, or "".
func failed(f func()) (msg failure) {
	defer func() {
		if p := recover(); p != nil {
			msg = p.(failure)
		}
	}()
	f()
	return ""
}

func TestFailures(t *testing.T) {
	tb := fatal{t}
	start := time.Now()
	msg := failed(func() { waittest.For(tb, "the pool to fill", 50*time.Millisecond, func() bool { return false }) })
	if !strings.Contains(string(msg), "timed out after 50ms waiting for the pool to fill") || time.Since(start) > 5*time.Second {
		t.Errorf("For that never holds: %q after %s", msg, time.Since(start))
	}
	calls := 0
	msg = failed(func() {
		waittest.Until(tb, "the container", time.Minute, func() (bool, error) { calls++; return false, errors.New("it stopped") })
	})
	if msg != "waiting for the container: it stopped" || calls != 1 {
		t.Errorf("Until with an error: %q after %d calls, want a failure at once", msg, calls)
	}
}
