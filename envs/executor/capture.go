package executor

// capture keeps the first and last halves of what is written to it, up to
// max bytes in all, and counts what it drops in between. Memory stays
// bounded however much is written.
type capture struct {
	max     int
	head    []byte
	tail    []byte // ring buffer of the last max-max/2 bytes
	tailPos int    // next write position in tail once it is full
	total   int64
}

func newCapture(max int) *capture {
	return &capture{max: max}
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	headCap := c.max / 2
	if len(c.head) < headCap {
		k := min(headCap-len(c.head), len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	tailCap := c.max - headCap
	if tailCap == 0 {
		return n, nil
	}
	if len(p) >= tailCap {
		c.tail = append(c.tail[:0], p[len(p)-tailCap:]...)
		c.tailPos = 0
		return n, nil
	}
	for len(p) > 0 {
		if len(c.tail) < tailCap {
			k := min(tailCap-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(c.tail[c.tailPos:], p)
		c.tailPos = (c.tailPos + k) % tailCap
		p = p[k:]
	}
	return n, nil
}

// bytes returns head and tail joined, and the number of bytes dropped
// between them. When bytes were dropped the head is exactly max/2 long.
func (c *capture) bytes() ([]byte, int64) {
	out := make([]byte, 0, len(c.head)+len(c.tail))
	out = append(out, c.head...)
	out = append(out, c.tail[c.tailPos:]...)
	out = append(out, c.tail[:c.tailPos]...)
	return out, c.total - int64(len(out))
}
