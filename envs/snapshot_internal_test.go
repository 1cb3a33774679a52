package envs

import (
	"testing"
	"time"

	"github.com/gymserver/gymserver/gym"
)

func TestRemaining(t *testing.T) {
	s := func(n float64) gym.Duration { return gym.Duration(n * float64(time.Second)) }
	tests := []struct {
		budget, elapsed, want gym.Duration
	}{
		{s(600), s(10), s(590)},
		{0, s(10), 0},                  // no timeout stays none
		{s(60), s(60), minRemaining},   // spent: not 0, which would mean none
		{s(60), s(3600), minRemaining}, // overspent while idle
		{s(60), 0, s(60)},
	}
	for _, tt := range tests {
		if got := remaining(tt.budget, tt.elapsed); got != tt.want {
			t.Errorf("remaining(%v, %v) = %v, want %v", tt.budget.Seconds(), tt.elapsed.Seconds(), got.Seconds(), tt.want.Seconds())
		}
	}
}
