package executor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// Client talks to one executor over a stream. It is safe for concurrent
// use: requests are pipelined, each with an id, and answered out of order.
// When the stream breaks, every pending and later call fails with an error
// wrapping gym.ErrSandbox.
//
// Every call returns when its context ends, also when the executor has
// stopped reading its stream: one writer goroutine writes the frames, and
// a call hands its frame over or gives up with its context. A frame the
// executor never reads holds only the writer, until Close. The client
// owns its goroutines (the reader, the writer and the cancellations of
// abandoned commands); Close waits for all of them.
type Client struct {
	r io.Reader
	w io.WriteCloser
	// writes carries frames to the writer goroutine, which alone writes
	// to w.
	writes chan []byte

	// mu guards the fields below.
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan response
	err     error

	done      chan struct{}
	readDone  chan struct{}
	writeDone chan struct{}
	// cancels counts the cancellations in flight; one is added under mu
	// only while err is nil, so Close's Wait, after fail, sees them all.
	cancels sync.WaitGroup
}

// NewClient starts a client reading responses from r and writing requests
// to w. Close closes w (and r, when it is an io.Closer).
func NewClient(r io.Reader, w io.WriteCloser) *Client {
	c := &Client{
		r:         r,
		w:         w,
		writes:    make(chan []byte),
		pending:   map[uint64]chan response{},
		done:      make(chan struct{}),
		readDone:  make(chan struct{}),
		writeDone: make(chan struct{}),
	}
	go c.readLoop()
	go c.writeLoop()
	return c
}

// writeLoop writes the frames calls hand over until the stream ends. A
// write the executor does not read blocks it until Close closes w.
func (c *Client) writeLoop() {
	defer close(c.writeDone)
	for {
		select {
		case frame := <-c.writes:
			if _, err := c.w.Write(frame); err != nil {
				c.fail(fmt.Errorf("write: %w", err))
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *Client) readLoop() {
	defer close(c.readDone)
	br := bufio.NewReader(c.r)
	for {
		var resp response
		if err := readFrame(br, &resp); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("executor closed its stream")
			}
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// fail marks the stream broken and fails every pending call.
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = gym.Classify(fmt.Errorf("executor: %w", err), gym.ClassSandbox)
	for id, ch := range c.pending {
		delete(c.pending, id)
		close(ch)
	}
	close(c.done)
}

// Done is closed when the stream has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the stream ended, or nil while it works.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the stream and waits for the client's goroutines to stop.
// Pending and later calls fail with gym.ErrSandbox.
func (c *Client) Close() error {
	c.fail(errors.New("client closed"))
	err := c.w.Close() // unblocks a write the executor does not read
	if rc, ok := c.r.(io.Closer); ok {
		rc.Close()
	}
	<-c.readDone
	<-c.writeDone
	c.cancels.Wait()
	return err
}

// call sends req and waits for its response, or until ctx ends.
func (c *Client) call(ctx context.Context, req request) (response, error) {
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return response{}, err
	}
	c.next++
	req.ID = c.next
	c.pending[req.ID] = ch
	c.mu.Unlock()

	frame, err := encodeFrame(req)
	if err != nil {
		c.forget(req.ID)
		return response{}, gym.Classify(fmt.Errorf("executor: %s request: %w", req.Op, err), gym.ClassInvalidArgument)
	}
	select {
	case c.writes <- frame:
	case <-ctx.Done():
		// Never sent: nothing to cancel.
		c.forget(req.ID)
		return response{}, ctx.Err()
	case <-c.done:
		return response{}, c.Err()
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return response{}, c.Err()
		}
		return resp, nil
	case <-ctx.Done():
		c.forget(req.ID)
		if req.Op == opExec {
			// Stop the command in the sandbox too; nobody waits for it.
			c.cancelLater(req.ID)
		}
		return response{}, ctx.Err()
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// cancelTimeout bounds a cancellation request.
const cancelTimeout = 5 * time.Second

// cancelLater asks the executor, in the background, to kill the command
// of request id; Close waits for the request.
func (c *Client) cancelLater(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return // the stream is gone, and the command with it
	}
	c.cancels.Add(1)
	go func() {
		defer c.cancels.Done()
		ctx, stop := context.WithTimeout(context.Background(), cancelTimeout)
		defer stop()
		_, _ = c.call(ctx, request{Op: opCancel, Target: id})
	}()
}

// respErr rebuilds the error of a response.
func respErr(op, path string, resp response) error {
	if resp.ErrKind == "" {
		return nil
	}
	var sentinel error
	switch resp.ErrKind {
	case kindNotExist:
		sentinel = sandbox.ErrNotExist
	case kindIsDir:
		sentinel = sandbox.ErrIsDir
	case kindNotDir:
		sentinel = sandbox.ErrNotDir
	case kindTooLarge:
		sentinel = sandbox.ErrTooLarge
	case kindInvalid:
		sentinel = gym.ErrInvalidArgument
	case kindNotArchivable:
		sentinel = sandbox.ErrNotArchivable
	case kindInvalidArchive:
		sentinel = sandbox.ErrInvalidArchive
	default:
		return fmt.Errorf("%s %s: %s", op, path, resp.Err)
	}
	return fmt.Errorf("%s %s: %s: %w", op, path, resp.Err, sentinel)
}

// Exec runs one command; see sandbox.Sandbox.Exec.
func (c *Client) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	resp, err := c.call(ctx, request{
		Op:         opExec,
		Argv:       req.Argv,
		Dir:        req.Dir,
		Env:        req.Env,
		TimeoutMS:  req.Timeout.Milliseconds(),
		MaxOutput:  req.MaxOutput,
		Background: req.Background,
		Shell:      req.Shell,
		Stdin:      req.Stdin,
		Report:     req.Report,
		ReportMax:  req.ReportMax,
		Priv:       req.Priv,
		Zygote:     req.Zygote,
	})
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	if err := respErr("exec", firstArg(req.Argv), resp); err != nil {
		return sandbox.ExecResult{}, err
	}
	return sandbox.ExecResult{
		ExitCode:      resp.ExitCode,
		Stdout:        resp.Stdout,
		Stderr:        resp.Stderr,
		StdoutDropped: resp.StdoutDropped,
		StderrDropped: resp.StderrDropped,
		TimedOut:      resp.TimedOut,
		Signal:        resp.Signal,
		OOMKilled:     resp.OOMKilled,
		PID:           resp.PID,
		Duration:      time.Duration(resp.DurationNS),
		Report:        resp.Report,
		ReportDropped: resp.ReportDropped,
		ViaZygote:     resp.ViaZygote,
		ZygoteMiss:    resp.ZygoteMiss,
		ZygoteWait:    time.Duration(resp.ZygoteWaitNS),
	}, nil
}

// StartZygote starts the executor's verifier zygote; see
// sandbox.ZygoteStarter.
func (c *Client) StartZygote(ctx context.Context, opts sandbox.ZygoteOptions) (sandbox.ZygoteStatus, error) {
	return c.zygoteOp(ctx, request{Op: opZygote, Wait: opts.Wait, Preload: opts.Preload})
}

// PreloadZygote passes module names to preload on to the executor's
// verifier zygote, or to the one it starts later, and starts none itself.
func (c *Client) PreloadZygote(ctx context.Context, names []string) error {
	_, err := c.zygoteOp(ctx, request{Op: opZygote, Preload: names, NoStart: true})
	return err
}

func (c *Client) zygoteOp(ctx context.Context, req request) (sandbox.ZygoteStatus, error) {
	resp, err := c.call(ctx, req)
	if err != nil {
		return sandbox.ZygoteStatus{}, err
	}
	if err := respErr("zygote", "", resp); err != nil {
		return sandbox.ZygoteStatus{}, err
	}
	st := resp.Zygote
	if st == nil {
		return sandbox.ZygoteStatus{Error: "the executor does not know the zygote op"}, nil
	}
	return sandbox.ZygoteStatus{Ready: st.Ready, Error: st.Error, ReadyIn: st.ReadyIn, RSS: st.RSS, PytestVersion: st.PytestVersion}, nil
}

func firstArg(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

// WriteFile writes data to path, creating parents; see sandbox.Sandbox.
func (c *Client) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	if data == nil {
		data = []byte{}
	}
	resp, err := c.call(ctx, request{Op: opWrite, Path: path, Data: data, Mode: uint32(mode.Perm())})
	if err != nil {
		return err
	}
	return respErr("write", path, resp)
}

// ReadFile reads at most maxBytes of path; see sandbox.Sandbox.
func (c *Client) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	resp, err := c.call(ctx, request{Op: opRead, Path: path, MaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	return resp.Data, respErr("read", path, resp)
}

// ListDir lists a directory, sorted by name.
func (c *Client) ListDir(ctx context.Context, path string) ([]sandbox.DirEntry, error) {
	resp, err := c.call(ctx, request{Op: opList, Path: path})
	if err != nil {
		return nil, err
	}
	if err := respErr("list", path, resp); err != nil {
		return nil, err
	}
	out := make([]sandbox.DirEntry, len(resp.Entries))
	for i, e := range resp.Entries {
		out[i] = sandbox.DirEntry{Name: e.Name, IsDir: e.IsDir, Size: e.Size, Mode: fs.FileMode(e.Mode)}
	}
	return out, nil
}

// Remove deletes path recursively; a missing path is not an error.
func (c *Client) Remove(ctx context.Context, path string) error {
	resp, err := c.call(ctx, request{Op: opRemove, Path: path})
	if err != nil {
		return err
	}
	return respErr("remove", path, resp)
}

// KillAll kills every process the executor started, and inside a container
// every process but the container's machinery.
func (c *Client) KillAll(ctx context.Context) error {
	resp, err := c.call(ctx, request{Op: opKillAll})
	if err != nil {
		return err
	}
	return respErr("killall", "", resp)
}

// Ping checks that the executor answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.call(ctx, request{Op: opPing})
	return err
}

// Install puts files in place with the executor's own rights; see
// sandbox.Sandbox.CopyIn.
func (c *Client) Install(ctx context.Context, files []sandbox.File) error {
	req := request{Op: opInstall, Files: make([]installFile, len(files))}
	for i, f := range files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("install %s: path is not absolute: %w", f.Path, gym.ErrInvalidArgument)
		}
		req.Files[i] = installFile{Path: f.Path, Data: f.Data, Mode: uint32(f.Mode.Perm())}
		if req.Files[i].Data == nil {
			req.Files[i].Data = []byte{}
		}
	}
	resp, err := c.call(ctx, req)
	if err != nil {
		return err
	}
	return respErr("install", "", resp)
}

// Roots lists the places the agent can write; see Root.
func (c *Client) Roots(ctx context.Context) ([]Root, error) {
	resp, err := c.call(ctx, request{Op: opRoots})
	if err != nil {
		return nil, err
	}
	return resp.Roots, respErr("roots", "", resp)
}

// Pristine records what the agent's places (roots; the executor lists them
// when roots is empty) hold, before any command of the agent ran, so that
// Recycle can put it back. It returns the size of what it keeps. An error
// means the sandbox cannot be recycled.
func (c *Client) Pristine(ctx context.Context, roots []Root) (int64, error) {
	resp, err := c.call(ctx, request{Op: opPristine, Roots: roots})
	if err != nil {
		return 0, err
	}
	return resp.Size, respErr("pristine", "", resp)
}

// Recycle makes the sandbox as it was when Pristine ran, for another
// episode: no process of the agent, the agent's places as they were, no
// file that an install op added, no System V IPC object, an empty /dev/shm
// and /dev/mqueue. The verifier zygote, if any, stays. An error means the
// sandbox must not serve again; see recycle.go for what it refuses.
func (c *Client) Recycle(ctx context.Context) error {
	resp, err := c.call(ctx, request{Op: opRecycle})
	if err != nil {
		return err
	}
	return respErr("recycle", "", resp)
}

// MakeDir makes the directory path and its missing parents with the
// executor's rights; see sandbox.DirMaker.
func (c *Client) MakeDir(ctx context.Context, path string, forAgent bool) error {
	resp, err := c.call(ctx, request{Op: opMakeDir, Path: path, ForAgent: forAgent})
	if err != nil {
		return err
	}
	return respErr("mkdir", path, resp)
}

// Capture takes what is in roots as a tar archive of at most maxBytes,
// read as the agent, and leaves it in the executor: it returns the
// archive's size and the id Fetch takes. A non-zero since makes a delta
// archive: what changed after since, and for each changed directory the
// children it kept, so that Restore into a fresh sandbox of the same image
// removes the others. See sandbox.Archiver.
func (c *Client) Capture(ctx context.Context, roots []Root, maxBytes int64, since time.Time) (uint64, int64, error) {
	req := request{Op: opArchive, Roots: roots, MaxBytes: maxBytes, Hold: true}
	if !since.IsZero() {
		req.Since = since.UnixNano()
	}
	resp, err := c.call(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	if err := respErr("archive", "", resp); err != nil {
		return 0, 0, err
	}
	return resp.ID, resp.Size, nil
}

// Fetch returns, once, an archive Capture left in the executor.
func (c *Client) Fetch(ctx context.Context, id uint64) ([]byte, error) {
	resp, err := c.call(ctx, request{Op: opFetch, Target: id})
	if err != nil {
		return nil, err
	}
	if err := respErr("fetch", "", resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// Restore replaces what is in roots with an archive from Archive, as the
// agent; see sandbox.Archiver.
func (c *Client) Restore(ctx context.Context, roots []Root, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	resp, err := c.call(ctx, request{Op: opRestore, Roots: roots, Data: data})
	if err != nil {
		return err
	}
	return respErr("restore", "", resp)
}
