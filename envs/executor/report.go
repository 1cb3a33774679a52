package executor

import (
	"errors"
	"io"
	"os"
	"time"
)

// ReportFD is the file descriptor of the report pipe in a command that asked
// for one: a test runner writes its report to /dev/fd/3.
const ReportFD = 3

// defaultReportMax caps a report when the request gives no cap.
const defaultReportMax = 16 << 20

// reportDrain bounds the wait for the report's end once every process that
// could write to it has been killed.
const reportDrain = 5 * time.Second

// reportPipe is the pipe a command writes its report to. A pipe can only be
// appended to: whatever writes after the test runner (an exit handler, a
// leftover daemon) adds bytes after the report instead of replacing it, and
// the reader sees both.
type reportPipe struct {
	r, w *os.File
	max  int64
	// done carries the reader's result once it reaches end of file.
	done chan reportData
}

type reportData struct {
	data    []byte
	dropped int64
	err     error
}

// newReportPipe makes the pipe; with an agent, the pipe belongs to the
// agent, write-only, so that the command can open /dev/fd/3 by name (test
// runners do) but not to read.
func newReportPipe(agent *Cred, max int64) (*reportPipe, error) {
	if max <= 0 {
		max = defaultReportMax
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	if agent != nil {
		// Write-only, even for its owner: code under test that reopens
		// /dev/fd/3 to read could otherwise take the report away.
		if err := errors.Join(w.Chown(agent.UID, agent.GID), w.Chmod(0o200)); err != nil {
			r.Close()
			w.Close()
			return nil, err
		}
	}
	return &reportPipe{r: r, w: w, max: max, done: make(chan reportData, 1)}, nil
}

// started closes the executor's copy of the write end, once the command has
// its own, and starts reading.
func (p *reportPipe) started() {
	p.w.Close()
	go func() {
		var d reportData
		d.data, d.err = io.ReadAll(io.LimitReader(p.r, p.max))
		if d.err == nil {
			d.dropped, d.err = io.Copy(io.Discard, p.r)
		}
		p.done <- d
	}()
}

// finish waits for the report's end of file: every writer is gone.
func (p *reportPipe) finish() ([]byte, int64, error) {
	select {
	case d := <-p.done:
		return d.data, d.dropped, d.err
	case <-time.After(reportDrain):
		return nil, 0, errors.New("the report pipe is still open after every process that could hold it was killed")
	}
}

// close releases the pipe; a reader still running ends.
func (p *reportPipe) close() {
	p.w.Close()
	p.r.Close()
}
