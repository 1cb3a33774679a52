package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	lru "github.com/hashicorp/golang-lru/v2"
	openai "github.com/sashabaranov/go-openai"
	"golang.org/x/sync/singleflight"

	"github.com/gymserver/gymserver/gym"
)

// answerCache holds the answers to requests, keyed by the whole request,
// and collapses identical requests in flight at once into one API call.
// It is safe for concurrent use.
type answerCache struct {
	answers *lru.Cache[string, gym.Turn]
	flight  singleflight.Group
}

func newAnswerCache(size int) *answerCache {
	c, err := lru.New[string, gym.Turn](size)
	if err != nil {
		// Only a size below 1, which Config.Caches rules out.
		panic(fmt.Sprintf("answer cache of size %d: %v", size, err))
	}
	return &answerCache{answers: c}
}

// requestKey returns the cache key of a request: a hash of the endpoint
// and of the request exactly as it is sent.
func requestKey(baseURL string, req openai.ChatCompletionRequest) (string, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(baseURL))
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fromCache returns a cached answer as a new turn: its tool calls are the
// caller's own copy and its usage counts one cached call and no tokens.
func fromCache(t gym.Turn) gym.Turn {
	t.Message.ToolCalls = slices.Clone(t.Message.ToolCalls)
	t.Usage = gym.Usage{CachedCalls: 1}
	return t
}

// cached answers req from the cache; otherwise the first of the identical
// requests in flight makes the call for all of them and the answer is
// kept. A failure is never shared: a caller whose leader failed (on the
// leader's own deadline, say) makes the call itself.
func (l *LLM) cached(ctx context.Context, req openai.ChatCompletionRequest) (gym.Turn, error) {
	key, err := requestKey(l.cfg.BaseURL, req)
	if err != nil {
		return l.call(ctx, req)
	}
	if t, ok := l.cache.answers.Get(key); ok {
		return fromCache(t), nil
	}
	// leader is written by the goroutine that runs the call, before the
	// result is sent on the channel, and read after it is received.
	leader := false
	ch := l.cache.flight.DoChan(key, func() (any, error) {
		leader = true
		t, err := l.call(ctx, req)
		if err == nil {
			l.cache.answers.Add(key, t)
		}
		return t, err
	})
	select {
	case res := <-ch:
		switch {
		case leader && res.Err != nil:
			return gym.Turn{}, res.Err
		case leader:
			return res.Val.(gym.Turn), nil
		case res.Err != nil:
			return l.call(ctx, req)
		}
		return fromCache(res.Val.(gym.Turn)), nil
	case <-ctx.Done():
		return gym.Turn{}, fmt.Errorf("llm %s: %w", l.cfg.Model, context.Cause(ctx))
	}
}
