package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gymserver/gymserver/envs/config"
)

// maxAnswer caps the bytes read from an external plugin's stdout.
const maxAnswer = 16 << 20

// External is a plugin run as a program. For every hook call the program is
// started afresh in the config's directory, receives the Event as one JSON
// object on stdin and answers one Response JSON object on stdout (empty
// output is the empty answer); unknown keys in the answer are an error.
// A non-zero exit status, a timeout or a malformed answer is a failure of
// that call; stderr is kept for the error message. One process per call
// keeps plugins stateless and independent; a plugin that needs state keeps
// it in files.
type External struct {
	name string
	argv []string
	dir  string
	// env is added to the program's environment.
	env []string
}

var _ Plugin = (*External)(nil)

func newExternal(c config.Plugin, dir string) (*External, error) {
	argv := append([]string(nil), c.Command...)
	prog := argv[0]
	switch {
	case strings.Contains(prog, "/"):
		if !filepath.IsAbs(prog) {
			prog = filepath.Join(dir, prog)
		}
		st, err := os.Stat(prog)
		if err != nil {
			return nil, fmt.Errorf("command: %w", err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("command: %s is not an executable file", prog)
		}
		argv[0] = prog
	default:
		if _, err := exec.LookPath(prog); err != nil {
			return nil, fmt.Errorf("command: %w", err)
		}
	}
	return &External{name: c.Name, argv: argv, dir: dir}, nil
}

// Name is the plugin's name in the config.
func (x *External) Name() string { return x.name }

// Hooks returns every hook; the config's hooks list narrows them.
func (x *External) Hooks() []Hook { return slices.Clone(AllHooks) }

// Handle runs the program once for ev.
func (x *External) Handle(ctx context.Context, ev *Event) (Response, error) {
	in, err := json.Marshal(ev)
	if err != nil {
		return Response{}, fmt.Errorf("encode event: %w", err)
	}
	cmd := exec.CommandContext(ctx, x.argv[0], x.argv[1:]...)
	cmd.Dir = x.dir
	if len(x.env) > 0 {
		cmd.Env = append(os.Environ(), x.env...)
	}
	cmd.Stdin = bytes.NewReader(append(in, '\n'))
	var stdout limitedBuffer
	var stderr limitedBuffer
	stdout.max, stderr.max = maxAnswer, 4<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A plugin that leaves children holding its pipes must not block us
	// past its timeout.
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		return Response{}, fmt.Errorf("%s: no answer within %s: %w", x.argv[0], time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return Response{}, fmt.Errorf("%s: %w: %s", x.argv[0], err, msg)
		}
		return Response{}, fmt.Errorf("%s: %w", x.argv[0], err)
	}
	if stdout.over {
		return Response{}, fmt.Errorf("%s: answer longer than %d bytes", x.argv[0], maxAnswer)
	}
	out := bytes.TrimSpace(stdout.Bytes())
	var r Response
	if len(out) == 0 {
		return r, nil
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Response{}, fmt.Errorf("%s: answer is not a response object: %w", x.argv[0], err)
	}
	if dec.More() {
		return Response{}, errors.New(x.argv[0] + ": answer has data after the JSON object")
	}
	return r, nil
}

// limitedBuffer keeps the first max bytes written to it and notes overflow.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
