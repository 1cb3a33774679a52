package docker

import (
	"context"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// CutStream closes the executor stream of sb, a sandbox of this package,
// and nothing else: the container stays, as when the provider's process is
// killed.
func CutStream(sb sandbox.Sandbox) {
	sb.(*Sandbox).conn.Close()
}

// SetExecBounds shortens p's bounds on executor calls: grace is added to a
// command's timeout and bounds a ping, alive is how often the executor is
// pinged while a command without a timeout runs. Call it before p makes
// sandboxes.
func SetExecBounds(p *Provider, grace, alive time.Duration) {
	p.bounds = execBounds{grace: grace, alive: alive, reuseIdle: p.bounds.reuseIdle}
}

// SetReuseIdle sets how long a recycled sandbox of p waits for a session
// before it is removed. Call it before p makes sandboxes.
func SetReuseIdle(p *Provider, d time.Duration) {
	p.bounds.reuseIdle = d
}

// WholeArchive archives everything the agent can write in sb, a sandbox of
// this package, as archives were before they held only what changed.
func WholeArchive(ctx context.Context, sb sandbox.Sandbox) ([]byte, error) {
	s := sb.(*Sandbox)
	roots, err := s.roots(ctx)
	if err != nil {
		return nil, err
	}
	id, _, err := s.exec.Capture(ctx, roots, maxArchive, time.Time{})
	if err != nil {
		return nil, err
	}
	return s.exec.Fetch(ctx, id)
}

// StartPhases returns how long each step of sb's start took, by name (for
// a sandbox from the warm pool, those of its start in the background).
func StartPhases(sb sandbox.Sandbox) map[string]time.Duration {
	ph := sb.(*Sandbox).phases
	return map[string]time.Duration{"create": ph.create, "files": ph.files, "start": ph.start, "attach": ph.attach, "ready": ph.ready}
}

// Made returns when sb's container was created: on a provider without a
// created pool, a sandbox made before the Create call that returned it
// came from the warm pool.
func Made(sb sandbox.Sandbox) time.Time { return sb.(*Sandbox).made }

// SetMaxPendingRemovals changes how many container removals may be
// pending before Sandbox.Close waits. Call it before p makes sandboxes.
func SetMaxPendingRemovals(p *Provider, n int) {
	p.mu.Lock()
	p.rm.max = n
	p.mu.Unlock()
}

// HoldZygoteTurn takes one of p's turns for a verifier zygote's imports
// (see Options.ZygoteImports), as a zygote importing would, until release
// is called.
func HoldZygoteTurn(p *Provider) (release func()) {
	p.zygoteTurns <- struct{}{}
	return func() { <-p.zygoteTurns }
}

// SetCores makes p pin sandboxes as if the engine's host had n cores, of
// which the first busy are held by one sandbox each. Call it before p
// makes sandboxes.
func SetCores(p *Provider, n, busy int) {
	p.pins = newCPUPins(n, false)
	for i := range n {
		p.pins.rank[i] = i
	}
	for i := range busy {
		p.pins.users[i]++
	}
}

// UsesSocket says whether sb, a sandbox of this package, speaks to its
// executor over the executor's socket (see socket.go).
func UsesSocket(sb sandbox.Sandbox) bool { return sb.(*Sandbox).attached != nil }

// SetSocketDialHook has hook run before each connection to an executor's
// socket, with the container's id, the socket's host path and the token,
// until the test ends.
func SetSocketDialHook(t testing.TB, hook func(id, path, token string)) {
	socketDialHook = hook
	t.Cleanup(func() { socketDialHook = nil })
}
