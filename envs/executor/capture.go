package executor

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// captureWriteDelay slows every write to a capture; only an in-package test
// sets it, to stand for a starved reader in a loaded sandbox.
var captureWriteDelay time.Duration

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
	if captureWriteDelay > 0 {
		time.Sleep(captureWriteDelay)
	}
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

// readBufs holds the buffers that output pipes are read into, 32 KiB
// each. A buffer made for each read would be zeroed every time, and the
// reader goroutine's stack would grow to hold it, copied at each doubling:
// work and evicted cache lines for every command, most of which write a few
// bytes.
var readBufs = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

// outputPipe carries one output stream of a command into a capture. The
// executor owns the pipe (no os/exec copying goroutine with its own
// deadline): the command gets the write end, a goroutine reads the read end
// until end of file, and finish decides how long to wait for that end.
type outputPipe struct {
	r, w *os.File
	c    *capture
	done chan struct{}
}

// pipeDrainMax bounds what finish takes from a pipe after the deadline: a
// pipe holds at most 1 MiB by default (/proc/sys/fs/pipe-max-size), and a
// holder that keeps writing must not keep finish reading.
const pipeDrainMax = 1 << 20

// newOutputPipe makes the pipe. Only the executor's end goes on the
// runtime's poller: the command's end is a plain blocking descriptor, which
// os.Pipe would register with the poller and os/exec then take off it again,
// some ten system calls per command for nothing.
func newOutputPipe(c *capture) (*outputPipe, error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("output pipe: %w", os.NewSyscallError("pipe2", err))
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("output pipe: %w", os.NewSyscallError("fcntl", err))
	}
	// NewFile puts a non-blocking descriptor on the poller and leaves a
	// blocking one off it.
	r := os.NewFile(uintptr(fds[0]), "|0")
	w := os.NewFile(uintptr(fds[1]), "|1")
	return &outputPipe{r: r, w: w, c: c, done: make(chan struct{})}, nil
}

// start closes the executor's copy of the write end, once the command has
// its own, and starts reading.
func (p *outputPipe) start() {
	p.w.Close()
	go func() {
		defer close(p.done)
		bp := readBufs.Get().(*[]byte)
		defer readBufs.Put(bp)
		buf := *bp
		for {
			n, err := p.r.Read(buf)
			if n > 0 {
				p.c.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
}

// finish waits for the pipe's end of file until limit, once the command
// has exited. If a process left behind still holds the write end, it stops
// the reader, takes what is already in the pipe without waiting, and
// reports cut. It closes the pipe either way.
func (p *outputPipe) finish(limit time.Time) (cut bool, err error) {
	defer p.r.Close()
	t := time.NewTimer(time.Until(limit))
	defer t.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-t.C:
	}
	// The reader ends at its next read (a write in hand completes first).
	if err := p.r.SetReadDeadline(time.Now()); err != nil {
		<-p.done
		return true, fmt.Errorf("stop output reader: %w", err)
	}
	<-p.done
	// A raw read checks no deadline only once the deadline is cleared.
	if err := p.r.SetReadDeadline(time.Time{}); err != nil {
		return true, fmt.Errorf("clear output deadline: %w", err)
	}
	if err := drainBuffered(p.r, func(b []byte) { p.c.Write(b) }); err != nil {
		return true, err
	}
	return true, nil
}

// drainBuffered passes to write what is in pipe f now, without waiting for
// more, up to pipeDrainMax bytes. No reader may be running on f, and f's
// read deadline must be clear.
func drainBuffered(f *os.File, write func([]byte)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("drain pipe: %w", err)
	}
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	var readErr error
	err = rc.Read(func(fd uintptr) bool {
		for taken := 0; taken < pipeDrainMax; {
			n, err := syscall.Read(int(fd), buf)
			switch {
			case n > 0:
				write(buf[:n])
				taken += n
			case err == syscall.EINTR:
			case err == nil || err == syscall.EAGAIN:
				return true // end of file, or nothing more buffered
			default:
				readErr = err
				return true
			}
		}
		return true
	})
	if err = errors.Join(err, readErr); err != nil {
		return fmt.Errorf("drain pipe: %w", err)
	}
	return nil
}

// close releases both ends, for a command that did not start.
func (p *outputPipe) close() {
	p.w.Close()
	p.r.Close()
}
