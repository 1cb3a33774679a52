package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestServeDurationFlagsNeedUnit pins PROTOCOL.md §5: duration flags take
// a unit, and a bare number is a usage error.
func TestServeDurationFlagsNeedUnit(t *testing.T) {
	for _, flag := range []string{"--reset-wait", "--idle-ttl", "--ping-interval", "--drain-timeout"} {
		t.Run(strings.TrimPrefix(flag, "--"), func(t *testing.T) {
			var stderr bytes.Buffer
			code := runServe(t.Context(), []string{"--config", "unused.json", "--addr", "127.0.0.1:0", flag, "300"}, &bytes.Buffer{}, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), flag[1:]) {
				t.Errorf("%s 300: exit %d, stderr %q; want exit 2 naming the flag", flag, code, stderr.String())
			}
		})
	}
}
