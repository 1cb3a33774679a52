package policy_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy"
	"github.com/gymserver/gymserver/policy/openaitest"
)

// greedy is a config edit for a cached policy at temperature 0.
func greedy(size int) func(*policy.Config) {
	return func(c *policy.Config) { c.Temperature, c.CacheSize = 0, size }
}

func TestActCachesIdenticalRequestsAtTemperatureZero(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Reply{
		ToolCalls: []openaitest.ToolCall{openaitest.Call("call_1", "execute_command", `{"command": "ls"}`)},
		Usage:     &openaitest.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15},
	}))
	l := newLLM(t, srv, greedy(2))
	act := func(prompt string) gym.Turn {
		t.Helper()
		msgs := []gym.Message{{Role: gym.RoleSystem, Content: "sys"}, {Role: gym.RoleUser, Content: prompt}}
		turn, err := l.Act(t.Context(), msgs, gym.StandardTools())
		if err != nil {
			t.Fatalf("Act: %v", err)
		}
		return turn
	}
	first := act("a")
	second := act("a")
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("identical requests made %d API calls, want 1", n)
	}
	if diff := cmp.Diff(first.Message, second.Message); diff != "" {
		t.Errorf("cached answer differs (-first +second):\n%s", diff)
	}
	if want := (gym.Usage{CachedCalls: 1}); second.Usage != want {
		t.Errorf("cached turn usage = %+v, want %+v", second.Usage, want)
	}
	// The caller owns its tool calls: changing them leaves the cache alone.
	second.Message.ToolCalls[0].ID = "changed"
	if third := act("a"); third.Message.ToolCalls[0].ID != first.Message.ToolCalls[0].ID {
		t.Errorf("a caller's edit reached the cache: id %q", third.Message.ToolCalls[0].ID)
	}
	// The cache holds 2 answers: after b and c, a is gone.
	act("b")
	act("c")
	act("a")
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("after a, b, c, a with a cache of 2: %d API calls, want 4", n)
	}
	want := gym.Usage{PromptTokens: 40, CompletionTokens: 20, TotalTokens: 60, Calls: 4, CachedCalls: 2}
	if diff := cmp.Diff(want, l.Usage()); diff != "" {
		t.Errorf("LLM.Usage (-want +got):\n%s", diff)
	}
}

func TestActDoesNotCacheWhenSampling(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Text("hi")))
	l := newLLM(t, srv, func(c *policy.Config) { c.Temperature, c.CacheSize = 0.7, 100 })
	for range 3 {
		if _, err := l.Act(t.Context(), start(), nil); err != nil {
			t.Fatalf("Act: %v", err)
		}
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("at temperature 0.7: %d API calls for 3 identical requests, want 3", n)
	}
	// The key covers every setting: the same transcript with another
	// max_tokens is another request.
	srv2 := openaitest.New(t, openaitest.Always(openaitest.Text("hi")))
	a := newLLM(t, srv2, greedy(10))
	b := newLLM(t, srv2, func(c *policy.Config) { greedy(10)(c); c.MaxTokens = 7 })
	for _, l := range []*policy.LLM{a, b, a, b} {
		if _, err := l.Act(t.Context(), start(), nil); err != nil {
			t.Fatalf("Act: %v", err)
		}
	}
	if n := len(srv2.Requests()); n != 2 {
		t.Errorf("two policies with separate caches and settings: %d API calls, want 2", n)
	}
}

func TestActCollapsesIdenticalRequestsInFlight(t *testing.T) {
	srv := openaitest.New(t, openaitest.Always(openaitest.Reply{Content: "slow", Delay: 200 * time.Millisecond}))
	l := newLLM(t, srv, greedy(10))
	const n = 8
	var wg sync.WaitGroup
	turns := make([]gym.Turn, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { turns[i], errs[i] = l.Act(t.Context(), start(), nil) })
	}
	wg.Wait()
	calls, cached := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Act %d: %v", i, errs[i])
		}
		calls += turns[i].Usage.Calls
		cached += turns[i].Usage.CachedCalls
	}
	if got := len(srv.Requests()); got != 1 || calls != 1 || cached != n-1 {
		t.Errorf("%d identical requests at once: %d API calls, turns count %d calls and %d cached; want 1, 1, %d", n, got, calls, cached, n-1)
	}
}

func TestActCacheDoesNotShareFailures(t *testing.T) {
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.Reply{Content: "late", Delay: 2 * time.Second},
		openaitest.Text("own"),
	))
	l := newLLM(t, srv, greedy(10))
	// The first caller gives up early; the second, waiting on its call,
	// must make its own instead of inheriting the deadline error.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	leaderErr := make(chan error, 1)
	go func() {
		_, err := l.Act(ctx, start(), nil)
		leaderErr <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(srv.Requests()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first request never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	turn, err := l.Act(t.Context(), start(), nil)
	if err != nil {
		t.Fatalf("second caller: %v", err)
	}
	if turn.Message.Content != "own" || turn.Usage.Calls != 1 {
		t.Errorf("second caller got %q with usage %+v, want its own answer", turn.Message.Content, turn.Usage)
	}
	if err := <-leaderErr; err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("first caller: %v, want its deadline", err)
	}
}

func TestHighUsageWarnings(t *testing.T) {
	for _, tt := range []struct {
		name      string
		threshold float64
		want      int
	}{{"doublings", 0.01, 4}, {"off", 0, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			// Each call costs 6+4 tokens at $1 per 1k: $0.01.
			srv := openaitest.New(t, openaitest.Always(openaitest.Reply{Content: "x",
				Usage: &openaitest.Usage{PromptTokens: 6, CompletionTokens: 4, TotalTokens: 10}}))
			var logs bytes.Buffer
			l := newLLM(t, srv, func(c *policy.Config) {
				c.Price = policy.Price{InputPer1K: 1, OutputPer1K: 1}
				c.HighUsageCost = tt.threshold
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			for range 8 {
				if _, err := l.Act(t.Context(), start(), nil); err != nil {
					t.Fatalf("Act: %v", err)
				}
			}
			// $0.01, $0.02, $0.04 and $0.08 are passed.
			if got := strings.Count(logs.String(), "high token usage"); got != tt.want {
				t.Errorf("%d warnings, want %d:\n%s", got, tt.want, logs.String())
			}
			if tt.want > 0 && !strings.Contains(logs.String(), "estimated $0.08 so far") {
				t.Errorf("the last warning does not give the cost:\n%s", logs.String())
			}
		})
	}
}

func TestCost(t *testing.T) {
	u := gym.Usage{PromptTokens: 2000, CompletionTokens: 1000, TotalTokens: 3000, Calls: 1}
	for _, tt := range []struct {
		name  string
		model string
		price policy.Price
		want  float64
	}{
		{"seed table", "anthropic/claude-sonnet-4", policy.Price{}, 2*0.003 + 0.015},
		{"unknown model at GPT-4 prices", "local/qwen", policy.Price{}, 2*0.03 + 0.06},
		{"configured price", "local/qwen", policy.Price{InputPer1K: 0.001, OutputPer1K: 0.002}, 2*0.001 + 0.002},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := policy.DefaultConfig()
			c.Model, c.Price = tt.model, tt.price
			if got := c.Cost(u); got < tt.want-1e-9 || got > tt.want+1e-9 {
				t.Errorf("Cost = %v, want %v", got, tt.want)
			}
		})
	}
	if _, known := policy.PriceFor("local/qwen"); known {
		t.Error("PriceFor knows a model the seed did not")
	}
}
