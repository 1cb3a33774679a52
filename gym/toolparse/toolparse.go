package toolparse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/gymserver/gymserver/gym"
)

// Names of the parsers.
const (
	Hermes = "hermes"
	JSON   = "json"
	ReAct  = "react"
)

// Parsers returns the names of the supported parsers.
func Parsers() []string { return []string{Hermes, JSON, ReAct} }

// Calls returns the tool calls of an action: its ToolCalls, or, when it
// names a Parser, the calls parsed from its Text. Parsed calls have no id,
// also when the text gives one (models repeat the ids of earlier turns):
// the environment gives them gym.CallID ids, as it does to structured calls
// without one. Errors: gym.ErrInvalidArgument for an unknown parser (the
// step cannot be attempted), gym.ErrAgent for text whose calls cannot be
// read (an observation for the agent).
func Calls(a gym.Action) ([]gym.ToolCall, error) {
	if a.Parser == "" {
		return a.ToolCalls, nil
	}
	calls, err := Parse(a.Parser, a.Text)
	for i := range calls {
		calls[i].ID = ""
	}
	return calls, err
}

// Known reports whether parser is the name of a supported parser.
func Known(parser string) bool {
	for _, p := range Parsers() {
		if p == parser {
			return true
		}
	}
	return false
}

// Detect returns the parser that fits text best, for text-mode policies
// that accept every format: react when it has an "Action:" line, else
// hermes when it has a <tool_call> block, else json when it starts with a
// JSON object or array or has a ```json fence, else react (which finds no
// call in it).
func Detect(text string) string {
	if actionLine.MatchString(text) {
		return ReAct
	}
	if strings.Contains(text, "<tool_call>") {
		return Hermes
	}
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "{") || strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(t, "[")), "{") || strings.Contains(t, "```json") {
		return JSON
	}
	return ReAct
}

// Parse extracts the tool calls from text with the named parser. A call
// keeps the id the text gives it ("id" in a JSON call object) and has an
// empty id otherwise. Errors: gym.ErrInvalidArgument for an unknown
// parser, gym.ErrAgent for a malformed call.
func Parse(parser, text string) ([]gym.ToolCall, error) {
	var (
		raws []rawCall
		err  error
	)
	switch parser {
	case Hermes:
		raws, err = parseHermes(text)
	case JSON:
		raws, err = parseJSON(text)
	case ReAct:
		raws, err = parseReAct(text)
	default:
		return nil, gym.Errorf(gym.ClassInvalidArgument, "tool-call parser %q is unknown (want %s)", parser, strings.Join(Parsers(), ", "))
	}
	if err != nil {
		return nil, err
	}
	calls := make([]gym.ToolCall, 0, len(raws))
	for _, r := range raws {
		calls = append(calls, gym.NewToolCall(r.id, r.name, r.args))
	}
	return calls, nil
}

// rawCall is one parsed call before ids are assigned.
type rawCall struct{ id, name, args string }

// callObject is the JSON shape of a call in the hermes and json formats.
type callObject struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// Parameters is an alias of Arguments some models write.
	Parameters json.RawMessage `json:"parameters"`
}

// fromObject validates a decoded call object; what names the call in
// error messages.
func fromObject(what, shape string, data []byte) (rawCall, error) {
	var obj callObject
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&obj); err != nil {
		return rawCall{}, gym.Errorf(gym.ClassAgent, "%s is not a valid JSON object (%v); write %s", what, err, shape)
	}
	if obj.Name == "" {
		return rawCall{}, gym.Errorf(gym.ClassAgent, "%s has no \"name\"; write %s", what, shape)
	}
	args := obj.Arguments
	if len(args) == 0 {
		args = obj.Parameters
	}
	a, err := argumentsText(args)
	if err != nil {
		return rawCall{}, gym.Errorf(gym.ClassAgent, "%s (%s): %v; write %s", what, obj.Name, err, shape)
	}
	return rawCall{id: obj.ID, name: obj.Name, args: a}, nil
}

// argumentsText returns the arguments as raw JSON text: an object is kept
// exactly as written, a string is taken as already-encoded JSON (the OpenAI way),
// absent or null arguments become "{}".
func argumentsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
	}
	switch raw[0] {
	case '{':
		if !json.Valid(raw) {
			return "", fmt.Errorf("\"arguments\" is not valid JSON")
		}
		return string(raw), nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("\"arguments\" is not a valid JSON string: %v", err)
		}
		return s, nil
	}
	return "", fmt.Errorf("\"arguments\" must be a JSON object, not %s", raw)
}

const hermesShape = `<tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>`

// parseHermes reads every <tool_call>...</tool_call> block; a block left
// open at the end of the text (the model stopped) runs to the end.
func parseHermes(text string) ([]rawCall, error) {
	const open, closing = "<tool_call>", "</tool_call>"
	var calls []rawCall
	for n := 1; ; n++ {
		i := strings.Index(text, open)
		if i < 0 {
			return calls, nil
		}
		text = text[i+len(open):]
		body := text
		if j := strings.Index(text, closing); j >= 0 {
			body, text = text[:j], text[j+len(closing):]
		} else {
			text = ""
		}
		c, err := fromObject(fmt.Sprintf("<tool_call> block %d", n), hermesShape, []byte(strings.TrimSpace(body)))
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
}

const jsonShape = `{"name": "TOOL", "arguments": {...}} or a JSON array of such objects`

var fence = regexp.MustCompile("(?s)```[a-zA-Z]*[ \t]*\r?\n(.*?)```")

// parseJSON reads a call object or an array of them: the content of the
// first code fence if there is one, else the text from its first '{' or '['.
func parseJSON(text string) ([]rawCall, error) {
	if m := fence.FindStringSubmatch(text); m != nil {
		text = m[1]
	}
	i := strings.IndexAny(text, "{[")
	if i < 0 {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(text[i:]))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return nil, gym.Errorf(gym.ClassAgent, "the tool call is not valid JSON (%v); write %s", err, jsonShape)
	}
	if v[0] == '{' {
		c, err := fromObject("the tool call", jsonShape, v)
		if err != nil {
			return nil, err
		}
		return []rawCall{c}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, gym.Errorf(gym.ClassAgent, "the tool calls are not valid JSON (%v); write %s", err, jsonShape)
	}
	calls := make([]rawCall, 0, len(items))
	for n, item := range items {
		c, err := fromObject(fmt.Sprintf("tool call %d", n+1), jsonShape, item)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, nil
}

const reactShape = "\"Action: TOOL\" on one line and \"Action Input: {...}\" (a JSON object) on the next"

var (
	actionLine = regexp.MustCompile(`(?m)^[ \t]*Action[ \t]*:[ \t]*(.*)$`)
	inputLine  = regexp.MustCompile(`^\s*Action[ \t]+Input[ \t]*:`)
)

// parseReAct reads every "Action:" line and the "Action Input:" that
// follows it; an action without input gets "{}".
func parseReAct(text string) ([]rawCall, error) {
	var calls []rawCall
	locs := actionLine.FindAllStringSubmatchIndex(text, -1)
	for n, loc := range locs {
		name := strings.Trim(strings.TrimSpace(text[loc[2]:loc[3]]), "`\"'*")
		what := fmt.Sprintf("action %d", n+1)
		if name == "" || strings.ContainsAny(name, " \t{}()") {
			return nil, gym.Errorf(gym.ClassAgent, "%s: %q is not a tool name; write %s", what, name, reactShape)
		}
		rest := text[loc[1]:]
		if n+1 < len(locs) {
			rest = text[loc[1]:locs[n+1][0]]
		}
		m := inputLine.FindStringIndex(rest)
		if m == nil {
			calls = append(calls, rawCall{name: name, args: "{}"})
			continue
		}
		input := strings.TrimSpace(rest[m[1]:])
		input = strings.TrimPrefix(strings.TrimPrefix(input, "```json"), "```")
		input = strings.TrimSpace(input)
		if input == "" {
			calls = append(calls, rawCall{name: name, args: "{}"})
			continue
		}
		dec := json.NewDecoder(strings.NewReader(input))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, gym.Errorf(gym.ClassAgent, "%s (%s): Action Input is not valid JSON (%v); write %s", what, name, err, reactShape)
		}
		if v[0] != '{' {
			return nil, gym.Errorf(gym.ClassAgent, "%s (%s): Action Input must be a JSON object, not %s; write %s", what, name, v, reactShape)
		}
		args, err := argumentsText(v)
		if err != nil {
			return nil, gym.Errorf(gym.ClassAgent, "%s (%s): %v; write %s", what, name, err, reactShape)
		}
		calls = append(calls, rawCall{name: name, args: args})
	}
	return calls, nil
}
