package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxFrame is the largest frame either side accepts.
const MaxFrame = 64 << 20

// Operations.
const (
	opExec    = "exec"
	opWrite   = "write"
	opRead    = "read"
	opList    = "list"
	opRemove  = "remove"
	opKillAll = "killall"
	opPing    = "ping"
	opCancel  = "cancel"
	opInstall = "install"
	opRoots   = "roots"
	opArchive = "archive"
	opRestore = "restore"
	opFetch   = "fetch"
	opZygote  = "zygote"
	// opPristine records the agent's places as the sandbox started, and
	// opRecycle puts them back for another episode (see recycle.go).
	opPristine = "pristine"
	opRecycle  = "recycle"
	// opMakeDir makes a directory for the agent or for root (see
	// Client.MakeDir).
	opMakeDir = "mkdir"
)

// Error kinds carried on the wire; the client maps them to sandbox errors.
const (
	kindNotExist = "not_exist"
	kindIsDir    = "is_dir"
	kindNotDir   = "not_dir"
	kindTooLarge = "too_large"
	kindInvalid  = "invalid"
	kindOther    = "other"
	// kindNotArchivable and kindInvalidArchive are sandbox.ErrNotArchivable
	// and sandbox.ErrInvalidArchive.
	kindNotArchivable  = "not_archivable"
	kindInvalidArchive = "invalid_archive"
	// kindNotRecyclable says a sandbox cannot serve another episode.
	kindNotRecyclable = "not_recyclable"
)

// request is one frame from the client.
type request struct {
	ID         uint64   `msgpack:"id"`
	Op         string   `msgpack:"op"`
	Argv       []string `msgpack:"argv,omitempty"`
	Dir        string   `msgpack:"dir,omitempty"`
	Env        []string `msgpack:"env,omitempty"`
	TimeoutMS  int64    `msgpack:"timeout_ms,omitempty"`
	MaxOutput  int      `msgpack:"max_output,omitempty"`
	Background bool     `msgpack:"background,omitempty"`
	// Shell runs Argv[0], a command line, in the persistent shell.
	Shell    bool   `msgpack:"shell,omitempty"`
	Stdin    []byte `msgpack:"stdin,omitempty"`
	Path     string `msgpack:"path,omitempty"`
	Data     []byte `msgpack:"data,omitempty"`
	Mode     uint32 `msgpack:"mode,omitempty"`
	MaxBytes int64  `msgpack:"max_bytes,omitempty"`
	// Target is the id of the request a cancel op cancels.
	Target uint64 `msgpack:"target,omitempty"`
	// Priv runs a file operation, or an exec, with the executor's own
	// rights instead of the agent's.
	Priv bool `msgpack:"priv,omitempty"`
	// Report gives an exec a report pipe on ReportFD, read up to
	// ReportMax bytes.
	Report    bool  `msgpack:"report,omitempty"`
	ReportMax int64 `msgpack:"report_max,omitempty"`
	// Files are what an install op puts in place.
	Files []installFile `msgpack:"files,omitempty"`
	// Roots are the places an archive or restore op works on.
	Roots []Root `msgpack:"roots,omitempty"`
	// Hold keeps an archive in the executor, under the request's id, for
	// a fetch op (whose Target is that id) instead of returning it.
	Hold bool `msgpack:"hold,omitempty"`
	// Since, in Unix nanoseconds, makes an archive op take only what
	// changed after it (see Client.Capture); 0 takes everything.
	Since int64 `msgpack:"since,omitempty"`
	// Zygote lets a plain pytest exec run through the verifier zygote
	// (see zygote.go); for a zygote op, it starts the zygote.
	Zygote bool `msgpack:"zygote,omitempty"`
	// Wait makes a zygote op wait until the zygote is ready or failed.
	Wait bool `msgpack:"wait,omitempty"`
	// Preload names modules a zygote op asks the zygote to import ahead
	// of the tests; it imports only those it allows (see zygote.py).
	// NoStart makes a zygote op only pass Preload on: to the zygote if one
	// runs, or to the one started later.
	Preload []string `msgpack:"preload,omitempty"`
	NoStart bool     `msgpack:"no_start,omitempty"`
	// ForAgent gives the directory of a mkdir op to the agent.
	ForAgent bool `msgpack:"for_agent,omitempty"`
}

// installFile is one file of an install op.
type installFile struct {
	Path string `msgpack:"path"`
	Data []byte `msgpack:"data"`
	// Mode with any execute bit installs the file 0755, else 0644.
	Mode uint32 `msgpack:"mode,omitempty"`
}

// response is one frame from the executor.
type response struct {
	ID            uint64  `msgpack:"id"`
	ErrKind       string  `msgpack:"err_kind,omitempty"`
	Err           string  `msgpack:"err,omitempty"`
	ExitCode      int     `msgpack:"exit_code"`
	Stdout        []byte  `msgpack:"stdout,omitempty"`
	Stderr        []byte  `msgpack:"stderr,omitempty"`
	StdoutDropped int64   `msgpack:"stdout_dropped,omitempty"`
	StderrDropped int64   `msgpack:"stderr_dropped,omitempty"`
	TimedOut      bool    `msgpack:"timed_out,omitempty"`
	Signal        string  `msgpack:"signal,omitempty"`
	OOMKilled     bool    `msgpack:"oom_killed,omitempty"`
	PID           int     `msgpack:"pid,omitempty"`
	DurationNS    int64   `msgpack:"duration_ns,omitempty"`
	Data          []byte  `msgpack:"data,omitempty"`
	Entries       []entry `msgpack:"entries,omitempty"`
	Report        []byte  `msgpack:"report,omitempty"`
	ReportDropped int64   `msgpack:"report_dropped,omitempty"`
	Roots         []Root  `msgpack:"roots,omitempty"`
	// Size is the size of an archive held for a fetch.
	Size int64 `msgpack:"size,omitempty"`
	// ViaZygote says an exec ran through the zygote; ZygoteMiss says why
	// an exec that asked for it did not, and ZygoteWaitNS how long it
	// waited for the zygote to be ready.
	ViaZygote    bool   `msgpack:"via_zygote,omitempty"`
	ZygoteMiss   string `msgpack:"zygote_miss,omitempty"`
	ZygoteWaitNS int64  `msgpack:"zygote_wait_ns,omitempty"`
	// Zygote answers a zygote op.
	Zygote *zygoteStatus `msgpack:"zygote,omitempty"`
}

// entry is one directory entry on the wire.
type entry struct {
	Name  string `msgpack:"name"`
	IsDir bool   `msgpack:"is_dir"`
	Size  int64  `msgpack:"size"`
	Mode  uint32 `msgpack:"mode"`
}

// errFrameTooLarge is returned for a frame over MaxFrame.
var errFrameTooLarge = errors.New("frame too large")

// readFrame reads one frame into v.
func readFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		if printable(hdr[:]) {
			// A program that prints text where the executor should
			// speak (a wrong executor command, a shell's message).
			return fmt.Errorf("%w: %d bytes; the stream holds text (%q...), not frames: is the executor command right?", errFrameTooLarge, n, hdr[:])
		}
		return fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)
	}
	if n >= streamFrame {
		return decodeStream(r, int64(n), v)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := msgpack.Unmarshal(buf, v); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

// printable says whether b is all printable ASCII or whitespace.
func printable(b []byte) bool {
	for _, c := range b {
		if (c < ' ' || c > '~') && c != '\n' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// streamFrame is the size from which readFrame decodes a frame's body as
// it reads it, instead of reading it whole and then decoding it: the
// bytes of a large frame (a restore's archive) are read once, straight
// into the slice they are decoded to. A small frame is read whole, which
// is cheaper than a decoder reading through a buffer of its own.
const streamFrame = 64 << 10

// decodeStream decodes v from the next n bytes of r, a frame's body, and
// reads all n of them whatever the body holds, so that the next frame is
// read from its start. A body cut short by the end of r is
// io.ErrUnexpectedEOF.
func decodeStream(r io.Reader, n int64, v any) error {
	lr := &io.LimitedReader{R: r, N: n}
	dec := msgpack.GetDecoder()
	dec.UsePreallocateValues(true) // as msgpack.Unmarshal does
	dec.Reset(lr)
	err := dec.Decode(v)
	msgpack.PutDecoder(dec)
	// Bytes after the value are ignored, as msgpack.Unmarshal ignores
	// them; the decoder's buffer may hold some of them already.
	if _, cerr := io.Copy(io.Discard, lr); cerr != nil || lr.N > 0 {
		if cerr == nil || cerr == io.EOF {
			cerr = io.ErrUnexpectedEOF
		}
		return cerr
	}
	if err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

// encodeFrame encodes v as a frame: the length, then the msgpack body,
// encoded in place into one buffer sized up front (see frameHint), so that
// the bytes a frame carries (a restore's archive, a fetched one) are
// copied once, not again when the buffer grows or the length is put in
// front.
func encodeFrame(v any) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 4, 4+frameHint(v)))
	enc := msgpack.GetEncoder()
	enc.Reset(buf)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, err
	}
	out := buf.Bytes()
	n := len(out) - 4
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)
	}
	binary.BigEndian.PutUint32(out, uint32(n))
	return out, nil
}

// frameSlack is room for a frame's fields beside its large byte slices.
const frameSlack = 512

// frameHint is about the size of v's msgpack body: its large byte slices
// and some room for the rest. A low guess costs only a copy.
func frameHint(v any) int {
	n := frameSlack
	switch v := v.(type) {
	case request:
		n += len(v.Data) + len(v.Stdin)
		for _, f := range v.Files {
			n += len(f.Data) + len(f.Path) + 32
		}
	case response:
		n += len(v.Data) + len(v.Stdout) + len(v.Stderr) + len(v.Report)
	}
	return min(n, MaxFrame+frameSlack)
}
