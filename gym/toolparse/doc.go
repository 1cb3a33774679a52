// Package toolparse turns raw model text into tool calls.
//
// Models that are not served with native function calling write their tool
// calls into their text. Three conventions are supported:
//
//   - "hermes" (Hermes, Qwen): one or more
//     <tool_call>{"name": "...", "arguments": {...}}</tool_call> blocks.
//   - "json": a JSON object {"name": "...", "arguments": {...}} or an array
//     of them, possibly inside a ```json fence.
//   - "react": "Action: TOOL" lines, each followed by an
//     "Action Input: {json}" line.
//
// Text without any tool call parses to no calls. A call that is attempted
// but malformed is an error wrapping gym.ErrAgent whose message tells the
// agent what was wrong and what is expected.
package toolparse
