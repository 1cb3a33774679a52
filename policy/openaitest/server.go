package openaitest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Script chooses the reply to the n-th chat-completion request (0-based;
// requests rejected before the script runs, such as a wrong API key, count).
// The server calls it for one request at a time, so it may keep state; a
// reply's Delay is waited out after it returns.
type Script func(n int, req ChatRequest) Reply

// Reply is what the server answers to one chat-completion request: a
// completion, or an error when Status is set to a non-2xx code.
type Reply struct {
	// Content is the assistant's text.
	Content string
	// ToolCalls are sent as given; an empty ID stays empty.
	ToolCalls []ToolCall
	// FinishReason defaults to "tool_calls" when there are tool calls and
	// "stop" otherwise.
	FinishReason string
	// Usage defaults to a deterministic estimate from the text lengths.
	Usage *Usage

	// Status, when not 0 or 200, makes the reply an error with this HTTP
	// status and Error as the OpenAI error body.
	Status int
	Error  APIError
	// Header is added to the response (for example Retry-After).
	Header http.Header
	// Delay holds the answer back; a client that gives up first sees a
	// timeout.
	Delay time.Duration
	// Body, when set, is sent verbatim instead of a JSON response.
	Body string
}

// Text returns a reply with assistant text and no tool calls.
func Text(content string) Reply { return Reply{Content: content} }

// Calls returns a reply that calls tools.
func Calls(calls ...ToolCall) Reply { return Reply{ToolCalls: calls} }

// Call returns a function tool call.
func Call(id, name, arguments string) ToolCall {
	return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: arguments}}
}

// Error returns an error reply with the OpenAI error type that goes with
// the status.
func Error(status int, message string) Reply {
	typ, code := "api_error", ""
	switch {
	case status == http.StatusUnauthorized:
		typ, code = "invalid_request_error", "invalid_api_key"
	case status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	case status >= 400 && status < 500:
		typ = "invalid_request_error"
	case status >= 500:
		typ = "server_error"
	}
	e := APIError{Message: message, Type: typ}
	if code != "" {
		e.Code = &code
	}
	return Reply{Status: status, Error: e}
}

// RateLimited returns a 429 reply carrying a Retry-After header (seconds or
// an HTTP date).
func RateLimited(retryAfter string) Reply {
	r := Error(http.StatusTooManyRequests, "Rate limit reached; please retry later.")
	r.Header = http.Header{"Retry-After": {retryAfter}}
	return r
}

// Queue returns a script that gives the replies in order. A request beyond
// the queue fails the test and gets a 500.
func Queue(tb testing.TB, replies ...Reply) Script {
	return func(n int, _ ChatRequest) Reply {
		if n < len(replies) {
			return replies[n]
		}
		tb.Errorf("openaitest: request %d is past the %d scripted replies", n, len(replies))
		return Error(http.StatusInternalServerError, fmt.Sprintf("openaitest: no scripted reply for request %d", n))
	}
}

// Always returns a script that gives the same reply to every request.
func Always(r Reply) Script { return func(int, ChatRequest) Reply { return r } }

// Request is one chat-completion request as the server received it.
type Request struct {
	// Time is when the request arrived.
	Time   time.Time
	Header http.Header
	// Body is the decoded request; Raw is its exact bytes.
	Body ChatRequest
	Raw  []byte
}

// Option configures a Server.
type Option func(*Server)

// WithAPIKey makes the server answer 401 to requests without
// "Authorization: Bearer key".
func WithAPIKey(key string) Option { return func(s *Server) { s.apiKey = key } }

// WithModels sets the models listed by GET /v1/models.
func WithModels(ids ...string) Option { return func(s *Server) { s.models = ids } }

// Server is a running fixture. Its methods are safe for concurrent use.
type Server struct {
	// URL is the API base URL, ending in /v1, as a client's base URL.
	URL string

	srv    *httptest.Server
	apiKey string
	models []string

	// scriptMu serialises calls of script, so scripts may keep state.
	scriptMu sync.Mutex
	script   Script

	// mu guards the fields below.
	mu       sync.Mutex
	requests []Request
}

// New starts a server on 127.0.0.1 that answers chat completions with
// script. The server is closed when the test ends.
func New(tb testing.TB, script Script, opts ...Option) *Server {
	tb.Helper()
	s := &Server{script: script, models: []string{"test-model"}}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, APIError{Message: fmt.Sprintf("unknown endpoint %s %s", r.Method, r.URL.Path), Type: "invalid_request_error"})
	})
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL + "/v1"
	tb.Cleanup(s.srv.Close)
	return s
}

// Requests returns the chat-completion requests received so far, in arrival
// order, including those answered with an error.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) authorized(r *http.Request) bool {
	return s.apiKey == "" || r.Header.Get("Authorization") == "Bearer "+s.apiKey
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		writeReply(w, r, Error(http.StatusUnauthorized, "Incorrect API key provided."))
		return
	}
	list := modelList{Object: "list"}
	for _, id := range s.models {
		list.Data = append(list.Data, model{ID: id, Object: "model", Created: time.Now().Unix(), OwnedBy: "openaitest"})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, APIError{Message: "reading body: " + err.Error(), Type: "invalid_request_error"})
		return
	}
	var req ChatRequest
	decodeErr := json.Unmarshal(raw, &req)

	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, Request{Time: arrived, Header: r.Header.Clone(), Body: req, Raw: raw})
	s.mu.Unlock()

	if !s.authorized(r) {
		writeReply(w, r, Error(http.StatusUnauthorized, "Incorrect API key provided."))
		return
	}
	if decodeErr != nil {
		writeError(w, http.StatusBadRequest, APIError{Message: "We could not parse the JSON body of your request: " + decodeErr.Error(), Type: "invalid_request_error"})
		return
	}
	if err := validate(req); err != nil {
		writeError(w, http.StatusBadRequest, APIError{Message: err.Error(), Type: "invalid_request_error"})
		return
	}
	s.scriptMu.Lock()
	reply := s.script(n, req)
	s.scriptMu.Unlock()
	if reply.Status == 0 || reply.Status == http.StatusOK {
		reply = complete(reply, req)
	}
	writeReply(w, r, withCompletion(reply, n, req))
}

// validate rejects requests a real endpoint would reject.
func validate(req ChatRequest) error {
	var errs []error
	if req.Model == "" {
		errs = append(errs, errors.New("you must provide a model parameter"))
	}
	if len(req.Messages) == 0 {
		errs = append(errs, errors.New("'messages' must contain at least one message"))
	}
	if req.Stream {
		errs = append(errs, errors.New("openaitest: streaming is not supported"))
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			errs = append(errs, fmt.Errorf("tools[%d]: a function tool with a name is required", i))
		}
	}
	// pending holds the tool call ids of the last assistant message that
	// still wait for their tool messages.
	pending := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user":
			if !m.HasContent {
				errs = append(errs, fmt.Errorf("messages[%d].content is required", i))
			}
		case "assistant":
		case "tool":
			if !m.HasContent {
				errs = append(errs, fmt.Errorf("messages[%d].content is required", i))
			}
			if !pending[m.ToolCallID] {
				errs = append(errs, fmt.Errorf("messages[%d]: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (tool_call_id %q)", i, m.ToolCallID))
			}
			delete(pending, m.ToolCallID)
			continue
		default:
			errs = append(errs, fmt.Errorf("messages[%d].role: %q is not a valid role", i, m.Role))
		}
		if len(pending) > 0 {
			errs = append(errs, fmt.Errorf("messages[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", i))
			clear(pending)
		}
		for _, c := range m.ToolCalls {
			pending[c.ID] = true
		}
	}
	if len(pending) > 0 {
		errs = append(errs, errors.New("an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'"))
	}
	return errors.Join(errs...)
}

// complete fills the defaults of a successful reply.
func complete(r Reply, req ChatRequest) Reply {
	if r.FinishReason == "" {
		r.FinishReason = "stop"
		if len(r.ToolCalls) > 0 {
			r.FinishReason = "tool_calls"
		}
	}
	if r.Usage == nil {
		prompt := 1
		for _, m := range req.Messages {
			prompt += tokens(m.Content)
			for _, c := range m.ToolCalls {
				prompt += tokens(c.Function.Arguments)
			}
		}
		completion := 1 + tokens(r.Content)
		for _, c := range r.ToolCalls {
			completion += tokens(c.Function.Name) + tokens(c.Function.Arguments)
		}
		r.Usage = &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	}
	return r
}

// tokens is a rough, deterministic token count: one per 4 bytes.
func tokens(s string) int { return (len(s) + 3) / 4 }

// withCompletion turns a successful reply into its body.
func withCompletion(r Reply, n int, req ChatRequest) Reply {
	if r.Body != "" || (r.Status != 0 && r.Status != http.StatusOK) {
		return r
	}
	msg := Message{Role: "assistant", ToolCalls: r.ToolCalls}
	if r.Content != "" || len(r.ToolCalls) == 0 {
		msg.Content, msg.HasContent = r.Content, true
	}
	resp := chatResponse{
		ID:      fmt.Sprintf("chatcmpl-openaitest-%d", n),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   req.Model,
		Choices: []choice{{Index: 0, Message: msg, FinishReason: r.FinishReason}},
		Usage:   *r.Usage,
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return Error(http.StatusInternalServerError, "openaitest: encoding response: "+err.Error())
	}
	r.Body = string(b)
	return r
}

// writeReply waits out the reply's delay and writes it.
func writeReply(w http.ResponseWriter, r *http.Request, reply Reply) {
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	for k, vs := range reply.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if reply.Body != "" {
		status := reply.Status
		if status == 0 {
			status = http.StatusOK
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, reply.Body)
		return
	}
	writeError(w, reply.Status, reply.Error)
}

func writeError(w http.ResponseWriter, status int, e APIError) {
	writeJSON(w, status, errorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"openaitest: encoding failed","type":"server_error","code":null,"param":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
