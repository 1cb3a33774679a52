package sandboxtest_test

import (
	"testing"

	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
)

// TestFakeConformance runs the file checks of the conformance suite on the
// fake; envs/docker runs the whole suite on the real Docker Engine.
func TestFakeConformance(t *testing.T) {
	p := sandboxtest.NewFakeProvider()
	// The group returns when all of the suite's parallel checks are done.
	t.Run("suite", func(t *testing.T) {
		sandboxtest.Run(t, sandboxtest.Suite{Provider: p, BaseImage: "fake-base", Gone: p.Gone})
	})
	if n := p.Live(); n != 0 {
		t.Errorf("%d fake sandboxes left open", n)
	}
}
