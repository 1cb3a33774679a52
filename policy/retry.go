package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// statusOf returns the HTTP status of an API error, or 0.
func statusOf(err error) int {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		return apiErr.HTTPStatusCode
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		return reqErr.HTTPStatusCode
	}
	return 0
}

// retryable reports whether a failed call may succeed if repeated: rate
// limits, server errors, timeouts, network failures and unusable responses.
// Client errors (400, 401, 403, 404, ...) and errors raised before the
// request was sent are final.
func retryable(err error, a *attempt) bool {
	if !a.sent {
		return false
	}
	switch st := statusOf(err); {
	case st == 0:
		return true
	case st == http.StatusRequestTimeout, st == http.StatusConflict, st == http.StatusTooManyRequests:
		return true
	default:
		return st >= 500
	}
}

// backoff returns the wait before retry n (1-based): the server's
// Retry-After when it sent one, else exponential backoff with jitter.
func (l *LLM) backoff(n int, h http.Header, now time.Time) (time.Duration, error) {
	if ra, ok := retryAfter(h, now); ok {
		if ra > l.cfg.RetryMaxDelay {
			return 0, fmt.Errorf("the server asks to retry after %s, longer than the retry max delay %s", ra, l.cfg.RetryMaxDelay)
		}
		// A little jitter, never earlier than asked.
		return ra + rand.N(ra/10+1), nil
	}
	d := l.cfg.RetryBaseDelay
	for i := 1; i < n && d < l.cfg.RetryMaxDelay; i++ {
		d *= 2
	}
	d = min(d, l.cfg.RetryMaxDelay)
	// Jitter in [d/2, d] spreads the retries of parallel episodes.
	return d/2 + rand.N(d/2+1), nil
}

// retryAfter reads the wait a server asks for: Retry-After-Ms (OpenAI), or
// Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < math.MaxInt32 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < math.MaxInt32 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// callError is a failed API call after its last attempt.
type callError struct {
	attempts int
	// timeout is the per-call timeout, for the message.
	timeout time.Duration
	err     error
}

func (e *callError) Error() string {
	s := "s"
	if e.attempts == 1 {
		s = ""
	}
	return fmt.Sprintf("%s (%d attempt%s)", e.describe(), e.attempts, s)
}

func (e *callError) Unwrap() error { return e.err }

// describe says what went wrong in words a user can act on.
func (e *callError) describe() string {
	var apiErr *openai.APIError
	if errors.As(e.err, &apiErr) && apiErr.HTTPStatusCode > 0 {
		msg := apiErr.Message
		if msg == "" {
			msg = http.StatusText(apiErr.HTTPStatusCode)
		}
		var kind []string
		if apiErr.Type != "" {
			kind = append(kind, apiErr.Type)
		}
		// go-openai decodes a null code as the number 0.
		if code := fmt.Sprint(apiErr.Code); apiErr.Code != nil && code != "" && code != "0" {
			kind = append(kind, code)
		}
		s := fmt.Sprintf("status %d: %s", apiErr.HTTPStatusCode, msg)
		if len(kind) > 0 {
			s += " (" + strings.Join(kind, ", ") + ")"
		}
		return s + hint(apiErr.HTTPStatusCode)
	}
	var reqErr *openai.RequestError
	if errors.As(e.err, &reqErr) {
		body := strings.TrimSpace(string(reqErr.Body))
		if len(body) > 200 {
			body = body[:200] + "..."
		}
		if body == "" {
			body = http.StatusText(reqErr.HTTPStatusCode)
		}
		return fmt.Sprintf("status %d: %s", reqErr.HTTPStatusCode, body) + hint(reqErr.HTTPStatusCode)
	}
	if errors.Is(e.err, context.DeadlineExceeded) && e.timeout > 0 {
		return fmt.Sprintf("no answer within the timeout of %s", e.timeout)
	}
	return e.err.Error()
}

// hint suggests the usual cause of a status.
func hint(status int) string {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return "; check the API key"
	case http.StatusNotFound:
		return "; check the base URL and the model id"
	}
	return ""
}
