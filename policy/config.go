package policy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"
)

// Mode selects how tools are offered to the model.
type Mode string

// The modes.
const (
	// ModeNative uses the endpoint's function calling ("tools" in the
	// request, "tool_calls" in the answer).
	ModeNative Mode = "native"
	// ModeReAct describes the tools in the system prompt and asks for
	// "Action:"/"Action Input:" lines; the answer's text (with those lines,
	// Hermes <tool_call> blocks, or a JSON call) is stepped as text and the
	// environment parses it. Tool results are sent back as user messages
	// starting with "Observation".
	ModeReAct Mode = "react"
)

// Config configures an LLM policy. Start from DefaultConfig: zero values
// mean "off" or "not sent", not "default".
type Config struct {
	// Model is the model id, as the endpoint names it.
	Model string
	// APIKey is sent as a bearer token; empty sends none (local servers).
	APIKey string
	// BaseURL is the API root that "/chat/completions" is appended to. It
	// is used exactly as given.
	BaseURL string
	// Temperature is the sampling temperature, in [0, 2]. 0 is sent as 0.
	Temperature float64
	// MaxTokens bounds the tokens of one answer; 0 leaves it to the
	// endpoint.
	MaxTokens int
	// Timeout bounds one API call (one attempt); 0 means no bound besides
	// the caller's context.
	Timeout time.Duration
	// MaxContextMessages bounds the number of messages sent; older turns
	// are dropped whole. 0 sends the whole transcript.
	MaxContextMessages int
	// MaxOutputLength bounds the bytes of each tool result sent to the
	// model; longer results keep their head and tail. 0 sends them whole.
	MaxOutputLength int
	// MaxRetries is the number of retries of a failed call after the first
	// attempt; 0 disables retries.
	MaxRetries int
	// RetryBaseDelay is the backoff before the first retry; it doubles on
	// each retry, with jitter, up to RetryMaxDelay.
	RetryBaseDelay time.Duration
	// RetryMaxDelay caps the backoff. A Retry-After longer than this ends
	// the call rather than blocking the episode.
	RetryMaxDelay time.Duration
	// Mode is ModeNative or ModeReAct; empty means ModeNative.
	Mode Mode
	// CacheSize is the number of answers kept for requests identical to an
	// earlier one (same model, transcript, tools and settings): such a
	// request is answered from the cache, and identical requests in flight
	// at once make one API call. The cache is used only at Temperature 0,
	// where sampling is greedy, so it cannot change what a run samples;
	// 0 disables it.
	CacheSize int
	// Price is the model's price for cost estimates; zero means the seed's
	// price table (PriceFor).
	Price Price
	// HighUsageCost, in USD, logs a warning when the estimated cost of
	// all calls of the policy passes it, and again at each doubling; 0
	// disables the warnings.
	HighUsageCost float64
	// Logger receives retry warnings and per-call debug records; nil
	// discards them.
	Logger *slog.Logger
}

// The defaults, matching the flags of the Real Work framework.
const (
	DefaultModel       = "anthropic/claude-sonnet-4"
	DefaultBaseURL     = "https://openrouter.ai/api/v1"
	DefaultTemperature = 0.7
	DefaultMaxTokens   = 4096
	DefaultTimeout     = 60 * time.Second
	DefaultMaxRetries  = 3
	// DefaultCacheSize is the seed's cache_size.
	DefaultCacheSize = 100
	// DefaultHighUsageCost is the seed's high-usage warning threshold.
	DefaultHighUsageCost = 10.0
)

// Caches reports whether c answers identical requests from a cache:
// CacheSize is set and the temperature is 0.
func (c Config) Caches() bool { return c.CacheSize > 0 && c.Temperature == 0 }

// DefaultConfig returns the default configuration. It is the one place that
// holds the defaults; callers set APIKey and override what they need.
func DefaultConfig() Config {
	return Config{
		Model:          DefaultModel,
		BaseURL:        DefaultBaseURL,
		Temperature:    DefaultTemperature,
		MaxTokens:      DefaultMaxTokens,
		Timeout:        DefaultTimeout,
		MaxRetries:     DefaultMaxRetries,
		RetryBaseDelay: time.Second,
		RetryMaxDelay:  time.Minute,
		Mode:           ModeNative,
		HighUsageCost:  DefaultHighUsageCost,
	}
}

// Validate reports every problem of c, joined.
func (c Config) Validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("model is empty"))
	}
	if u, err := url.Parse(c.BaseURL); err != nil {
		errs = append(errs, fmt.Errorf("base url: %w", err))
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("base url %q: want an absolute http or https url", c.BaseURL))
	}
	if c.Temperature < 0 || c.Temperature > 2 {
		errs = append(errs, fmt.Errorf("temperature %v: want a value in [0, 2]", c.Temperature))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max tokens", int64(c.MaxTokens)},
		{"timeout", int64(c.Timeout)},
		{"max context messages", int64(c.MaxContextMessages)},
		{"max output length", int64(c.MaxOutputLength)},
		{"max retries", int64(c.MaxRetries)},
		{"retry base delay", int64(c.RetryBaseDelay)},
		{"retry max delay", int64(c.RetryMaxDelay)},
		{"cache size", int64(c.CacheSize)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s is negative", f.name))
		}
	}
	if c.Price.InputPer1K < 0 || c.Price.OutputPer1K < 0 {
		errs = append(errs, fmt.Errorf("price %s is negative", c.Price))
	}
	if c.HighUsageCost < 0 {
		errs = append(errs, fmt.Errorf("high usage cost %v is negative", c.HighUsageCost))
	}
	if c.MaxRetries > 0 && c.RetryMaxDelay < c.RetryBaseDelay {
		errs = append(errs, fmt.Errorf("retry max delay %s is below the base delay %s", c.RetryMaxDelay, c.RetryBaseDelay))
	}
	switch c.Mode {
	case "", ModeNative, ModeReAct:
	default:
		errs = append(errs, fmt.Errorf("mode %q is unknown (want %s or %s)", c.Mode, ModeNative, ModeReAct))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("llm policy config: %w", err)
	}
	return nil
}
