package policy

import (
	"fmt"
	"unicode/utf8"

	"github.com/gymserver/gymserver/gym"
)

// TrimMessages returns at most max messages of msgs, dropping whole turns
// from the oldest. The head of the transcript (leading system messages and
// the first user message, which states the task) is always kept. A turn is
// an assistant message with everything up to the next assistant message,
// so an assistant message is never separated from its tool replies. When
// the head and the last turn alone exceed max, both are kept anyway.
// max <= 0 keeps everything. msgs is not modified; the result may share its
// backing array only when nothing is dropped.
func TrimMessages(msgs []gym.Message, max int) []gym.Message {
	if max <= 0 || len(msgs) <= max {
		return msgs
	}
	head := 0
	for head < len(msgs) && msgs[head].Role == gym.RoleSystem {
		head++
	}
	for i := head; i < len(msgs) && msgs[i].Role != gym.RoleAssistant; i++ {
		if msgs[i].Role == gym.RoleUser {
			head = i + 1
			break
		}
	}
	// Turn starts after the head, oldest first. Messages between the head
	// and the first assistant message belong to the first turn.
	var starts []int
	for i := head; i < len(msgs); i++ {
		if msgs[i].Role == gym.RoleAssistant || i == head {
			starts = append(starts, i)
		}
	}
	if len(starts) == 0 {
		return msgs
	}
	// Keep the newest turns that fit; always at least the last one.
	keep := starts[len(starts)-1]
	for j := len(starts) - 2; j >= 0; j-- {
		if head+len(msgs)-starts[j] > max {
			break
		}
		keep = starts[j]
	}
	if keep == head {
		return msgs
	}
	out := make([]gym.Message, 0, head+len(msgs)-keep)
	out = append(out, msgs[:head]...)
	return append(out, msgs[keep:]...)
}

// TruncateOutput returns s when it is at most max bytes long, and otherwise
// its first and last bytes (max in total, cut on UTF-8 boundaries) around a
// line stating how many bytes were omitted. max <= 0 keeps everything.
func TruncateOutput(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	headEnd := max / 2
	for headEnd > 0 && !utf8.RuneStart(s[headEnd]) {
		headEnd--
	}
	tailStart := len(s) - (max - max/2)
	for tailStart < len(s) && !utf8.RuneStart(s[tailStart]) {
		tailStart++
	}
	return fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", s[:headEnd], tailStart-headEnd, s[tailStart:])
}
