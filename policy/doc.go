// Package policy provides gym.Policy implementations: an LLM driver for any
// OpenAI-compatible chat-completions endpoint (OpenRouter, vLLM, OpenAI),
// and scripted policies that replay fixed tool calls without a network.
//
// The LLM policy sends the transcript and the environment's tools and turns
// the answer into a gym.Turn. In native mode the endpoint's function calling
// is used and tool calls come back structured; their arguments are kept
// exactly as the model wrote them, even when they are not valid JSON, so that
// the environment can answer with an agent_error observation. In ReAct mode,
// for endpoints without function calling, the tools are described in the
// system prompt and the answer's text is the turn: gym.Turn.Parser names
// its format (gym/toolparse.Detect) and the environment reads the calls from
// it, exactly as it reads a remote trainer's text.
//
// Transient API failures (429, 5xx, network errors, timeouts) are retried
// with exponential backoff and jitter, honouring Retry-After; other failures
// end the call at once. Errors that remain are classified gym.ClassPolicy.
//
// Before each call the transcript may be trimmed to a number of messages
// (on turn boundaries, keeping the system prompt and the task) and long tool
// outputs may be cut in the middle; both only change what the model is sent,
// never the caller's transcript.
//
// Responses are cached only when asked (Config.CacheSize, the seed's
// enable_caching) and only at temperature 0: a request identical to an
// earlier one (the whole request: model, transcript, tools, settings, and
// the endpoint) gets the earlier answer, and identical requests in flight
// at once share one API call. At any other temperature sampling the same
// prompt twice is what a trainer asks for, so nothing is cached.
//
// Usage: every turn reports the tokens of its call (a cached answer counts
// as a cached call of no tokens). Costs are estimates from a Price, by
// default the seed's price table (PriceFor); past Config.HighUsageCost the
// policy logs a warning, and again at each doubling, as the seed's
// warn_high_usage did.
//
// All policies are safe for concurrent use by many episodes.
package policy
