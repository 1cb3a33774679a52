package policy

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/toolparse"
)

// LLM is a policy backed by an OpenAI-compatible chat-completions endpoint.
// It is safe for concurrent use; each Act is independent.
type LLM struct {
	cfg    Config
	client *openai.Client
	log    *slog.Logger

	// cache is nil unless cfg.Caches().
	cache *answerCache

	// mu guards the fields below.
	mu    sync.Mutex
	usage gym.Usage
	// warnAt is the estimated cost at which the next high-usage warning
	// is logged.
	warnAt float64
}

var _ gym.Policy = (*LLM)(nil)

// NewLLM returns an LLM policy for cfg. It does not contact the endpoint.
// An invalid config is an error wrapping gym.ErrInvalidArgument.
func NewLLM(cfg Config) (*LLM, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeNative
	}
	if err := cfg.Validate(); err != nil {
		return nil, gym.Classify(err, gym.ClassInvalidArgument)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// Many episodes share one endpoint; keep their connections warm.
	transport.MaxIdleConnsPerHost = 64
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = cfg.BaseURL
	oc.HTTPClient = recordingClient{c: &http.Client{Transport: transport}}
	l := &LLM{cfg: cfg, client: openai.NewClientWithConfig(oc), log: log, warnAt: cfg.HighUsageCost}
	if cfg.Caches() {
		l.cache = newAnswerCache(cfg.CacheSize)
	}
	return l, nil
}

// Model returns the model id the policy asks for.
func (l *LLM) Model() string { return l.cfg.Model }

// Usage returns the tokens spent by all successful calls of l so far, over
// every episode, with the answers served from the cache. Per-episode totals
// are the sum of the Turns' Usage.
func (l *LLM) Usage() gym.Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.usage
}

// Act sends the transcript and tools to the model and returns its answer.
// Turn.Usage counts the one successful API call, or one cached call and no
// tokens when the answer came from the cache (Config.CacheSize). Errors
// wrap gym.ErrPolicy, except a done ctx, whose error is returned wrapped.
func (l *LLM) Act(ctx context.Context, messages []gym.Message, tools []gym.Tool) (gym.Turn, error) {
	req := l.request(messages, tools)
	start := time.Now()
	var turn gym.Turn
	var err error
	if l.cache != nil {
		turn, err = l.cached(ctx, req)
	} else {
		turn, err = l.call(ctx, req)
	}
	if err != nil {
		return gym.Turn{}, err
	}
	l.account(turn.Usage)
	l.log.Debug("llm call", "model", l.cfg.Model, "duration", time.Since(start), "cached", turn.Usage.CachedCalls > 0,
		"finish_reason", turn.FinishReason, "tool_calls", len(turn.Message.ToolCalls),
		"prompt_tokens", turn.Usage.PromptTokens, "completion_tokens", turn.Usage.CompletionTokens)
	return turn, nil
}

// call makes the API call for req, with retries.
func (l *LLM) call(ctx context.Context, req openai.ChatCompletionRequest) (gym.Turn, error) {
	resp, err := l.complete(ctx, req)
	if err != nil {
		return gym.Turn{}, err
	}
	return l.turn(resp), nil
}

// account adds a turn's usage to the policy's and logs a warning when the
// estimated cost of all calls passed the next threshold (HighUsageCost,
// then each doubling), as the seed's warn_high_usage did.
func (l *LLM) account(u gym.Usage) {
	l.mu.Lock()
	l.usage.Add(u)
	total := l.usage
	cost, warn := 0.0, false
	if l.cfg.HighUsageCost > 0 && u.Calls > 0 {
		cost = l.cfg.Cost(total)
		for cost >= l.warnAt {
			warn = true
			l.warnAt *= 2
		}
	}
	l.mu.Unlock()
	if warn {
		price := "price " + l.cfg.EffectivePrice().String()
		if _, known := PriceFor(l.cfg.Model); !known && l.cfg.Price == (Price{}) {
			price += " (GPT-4's, the seed's price for models it does not know; set llm_config.input_cost_per_1k_tokens and output_cost_per_1k_tokens)"
		}
		l.log.Warn(fmt.Sprintf("high token usage: estimated $%.2f so far", cost), "model", l.cfg.Model,
			"tokens", total.Tokens(), "calls", total.Calls, "cached_calls", total.CachedCalls, "price", price)
	}
}

// request builds the API request for a transcript.
func (l *LLM) request(msgs []gym.Message, tools []gym.Tool) openai.ChatCompletionRequest {
	msgs = TrimMessages(msgs, l.cfg.MaxContextMessages)
	req := openai.ChatCompletionRequest{
		Model:       l.cfg.Model,
		MaxTokens:   l.cfg.MaxTokens,
		Temperature: float32(l.cfg.Temperature),
	}
	if req.Temperature == 0 {
		// go-openai omits a zero temperature, which endpoints read as
		// their default (often 1); the smallest float32 is sent instead
		// and means greedy sampling everywhere.
		req.Temperature = math.SmallestNonzeroFloat32
	}
	if l.cfg.Mode == ModeReAct {
		req.Messages = reactMessages(msgs, tools, l.cfg.MaxOutputLength)
		// Keep the model from writing the observations itself.
		req.Stop = []string{"\nObservation"}
		return req
	}
	req.Messages = nativeMessages(msgs, l.cfg.MaxOutputLength)
	if len(tools) > 0 {
		req.Tools = nativeTools(tools)
		req.ToolChoice = "auto"
	}
	return req
}

// turn converts the first choice of a response.
func (l *LLM) turn(resp openai.ChatCompletionResponse) gym.Turn {
	ch := resp.Choices[0]
	content := ch.Message.Content
	if content == "" {
		content = ch.Message.Refusal
	}
	t := gym.Turn{
		Message:      gym.Message{Role: gym.RoleAssistant, Content: content},
		FinishReason: string(ch.FinishReason),
		Usage: gym.Usage{
			PromptTokens:     resp.Usage.PromptTokens,
			CompletionTokens: resp.Usage.CompletionTokens,
			TotalTokens:      resp.Usage.TotalTokens,
			Calls:            1,
		},
	}
	calls := responseCalls(ch.Message)
	if l.cfg.Mode == ModeReAct {
		t.Raw = content
		if len(calls) == 0 {
			// The calls are in the text: the environment reads them
			// (gym.Action.Parser), as it does a remote trainer's text.
			t.Parser = toolparse.Detect(content)
		}
	}
	t.Message.ToolCalls = uniqueIDs(calls)
	return t
}

// responseCalls returns the tool calls of an answer, arguments untouched;
// the legacy function_call field counts as one call.
func responseCalls(m openai.ChatCompletionMessage) []gym.ToolCall {
	var calls []gym.ToolCall
	for _, c := range m.ToolCalls {
		calls = append(calls, gym.NewToolCall(c.ID, c.Function.Name, c.Function.Arguments))
	}
	if len(calls) == 0 && m.FunctionCall != nil {
		calls = append(calls, gym.NewToolCall("", m.FunctionCall.Name, m.FunctionCall.Arguments))
	}
	return calls
}

// uniqueIDs gives a fresh id to every call whose id is empty or repeats an
// earlier one, since each tool message must answer exactly one call.
func uniqueIDs(calls []gym.ToolCall) []gym.ToolCall {
	seen := make(map[string]bool, len(calls))
	for i := range calls {
		if calls[i].ID == "" || seen[calls[i].ID] {
			calls[i].ID = "call_" + rand.Text()[:20]
		}
		seen[calls[i].ID] = true
		calls[i].Type = "function"
	}
	return calls
}

// attempt records what the HTTP layer saw during one API call, which
// go-openai's errors do not carry.
type attempt struct {
	// sent is true once the request reached the HTTP client.
	sent bool
	// header is the header of an error response.
	header http.Header
}

type attemptKey struct{}

// recordingClient is the HTTP client of the go-openai client. It records
// into the request context's attempt.
type recordingClient struct{ c *http.Client }

func (r recordingClient) Do(req *http.Request) (*http.Response, error) {
	a, _ := req.Context().Value(attemptKey{}).(*attempt)
	if a != nil {
		a.sent = true
	}
	resp, err := r.c.Do(req)
	if err == nil && a != nil && resp.StatusCode >= 400 {
		a.header = resp.Header.Clone()
	}
	return resp, err
}

var errNoChoices = errors.New("response has no choices")

// once makes one API call, bounded by the per-call timeout.
func (l *LLM) once(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, *attempt, error) {
	a := &attempt{}
	ctx = context.WithValue(ctx, attemptKey{}, a)
	if l.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.Timeout)
		defer cancel()
	}
	resp, err := l.client.CreateChatCompletion(ctx, req)
	if err == nil && len(resp.Choices) == 0 {
		err = errNoChoices
	}
	return resp, a, err
}

// complete makes the call, retrying transient failures.
func (l *LLM) complete(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	for n := 1; ; n++ {
		resp, a, err := l.once(ctx, req)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return resp, fmt.Errorf("llm %s: %w", l.cfg.Model, context.Cause(ctx))
		}
		fail := &callError{attempts: n, timeout: l.cfg.Timeout, err: err}
		if !retryable(err, a) || n > l.cfg.MaxRetries {
			return resp, gym.Classify(fmt.Errorf("llm %s: chat completion: %w", l.cfg.Model, fail), gym.ClassPolicy)
		}
		wait, werr := l.backoff(n, a.header, time.Now())
		if werr != nil {
			return resp, gym.Classify(fmt.Errorf("llm %s: chat completion: %w: %w", l.cfg.Model, fail, werr), gym.ClassPolicy)
		}
		l.log.Warn("llm call failed, retrying", "model", l.cfg.Model, "attempt", n,
			"retry_in", wait, "error", fail.describe())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return resp, fmt.Errorf("llm %s: %w", l.cfg.Model, context.Cause(ctx))
		}
	}
}
