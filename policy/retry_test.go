package policy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"absent", nil, 0, false},
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, true},
		{"http date", http.Header{"Retry-After": {"Sun, 01 Jun 2025 12:00:30 GMT"}}, 30 * time.Second, true},
		{"past http date", http.Header{"Retry-After": {"Sun, 01 Jun 2025 11:00:00 GMT"}}, 0, true},
		{"milliseconds win", http.Header{"Retry-After": {"7"}, "Retry-After-Ms": {"250"}}, 250 * time.Millisecond, true},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, false},
		{"negative", http.Header{"Retry-After": {"-3"}}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := retryAfter(tt.header, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("retryAfter(%v) = %s, %t; want %s, %t", tt.header, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	l := &LLM{cfg: Config{RetryBaseDelay: 100 * time.Millisecond, RetryMaxDelay: time.Second}}
	now := time.Now()
	for n, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second} {
		for range 50 {
			got, err := l.backoff(n+1, nil, now)
			if err != nil || got < want/2 || got > want {
				t.Fatalf("backoff(%d) = %s, %v; want in [%s, %s]", n+1, got, err, want/2, want)
			}
		}
	}
	// A huge retry count saturates instead of overflowing.
	if got, _ := l.backoff(500, nil, now); got < time.Second/2 || got > time.Second {
		t.Errorf("backoff(500) = %s, want in [500ms, 1s]", got)
	}
	got, err := l.backoff(1, http.Header{"Retry-After": {"1"}}, now)
	if err != nil || got < time.Second || got > 1100*time.Millisecond {
		t.Errorf("backoff with Retry-After 1 = %s, %v; want in [1s, 1.1s]", got, err)
	}
	if _, err := l.backoff(1, http.Header{"Retry-After": {"2"}}, now); err == nil || !strings.Contains(err.Error(), "longer than the retry max delay") {
		t.Errorf("backoff with Retry-After over the max = %v, want an error", err)
	}
}
