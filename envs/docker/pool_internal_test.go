package docker

import (
	"log/slog"
	"testing"
)

// TestTakePooledWhenClosed: once Close has begun, the pool hands out
// nothing and starts no goroutine Close would not wait for; Close removes
// the pooled sandboxes itself.
func TestTakePooledWhenClosed(t *testing.T) {
	s := &Sandbox{id: "pooled"}
	p := &Provider{closed: true, pool: map[string][]*Sandbox{"k": {s}}, log: slog.New(slog.DiscardHandler)}
	if got := p.takePooled("k"); got != nil {
		t.Fatalf("a closed provider handed out pooled sandbox %s", got.id)
	}
	if len(p.pool["k"]) != 1 {
		t.Errorf("a closed provider took from its pool: %d left, want 1", len(p.pool["k"]))
	}
}
