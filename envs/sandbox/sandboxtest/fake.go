package sandboxtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// ExecFunc answers a fake sandbox's Exec. It may read and write the
// sandbox's files through sb.
type ExecFunc func(ctx context.Context, sb *FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error)

// FakeProvider is an in-memory sandbox.Provider for unit tests of the layers
// above the sandbox. Files behave like the real thing (the conformance
// suite's file checks pass on it); commands run nothing: Exec calls
// ExecFunc, or reports exit code 0 with no output when it is nil.
type FakeProvider struct {
	// ExecFunc answers Exec; set it before creating sandboxes.
	ExecFunc ExecFunc
	// NoArchive makes every Archive fail with ErrNotArchivable, so that
	// snapshots fall back to Commit.
	NoArchive bool

	// mu guards the fields below.
	mu     sync.Mutex
	images map[string][]sandbox.File
	live   map[string]*FakeSandbox
	seq    int
}

var _ sandbox.Provider = (*FakeProvider)(nil)

// NewFakeProvider returns an empty fake provider.
func NewFakeProvider() *FakeProvider {
	return &FakeProvider{images: map[string][]sandbox.File{}, live: map[string]*FakeSandbox{}}
}

// Prepare records the spec's files under a content-hash reference.
func (p *FakeProvider) Prepare(ctx context.Context, spec sandbox.ImageSpec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%q\n", spec.BaseImage, spec.WorkDir, spec.InitCommands)
	for _, f := range spec.Files {
		fmt.Fprintf(h, "%s\x00%o\x00%d\n", f.Path, f.Mode, len(f.Data))
		h.Write(f.Data)
	}
	ref := "fake-prepared:" + hex.EncodeToString(h.Sum(nil))[:24]
	p.mu.Lock()
	defer p.mu.Unlock()
	p.images[ref] = append([]sandbox.File(nil), spec.Files...)
	return ref, nil
}

// Create makes a sandbox holding the prepared image's files.
func (p *FakeProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	files, ok := p.images[spec.Image]
	if !ok {
		return nil, gym.Errorf(gym.ClassSandbox, "fake: image %s was not prepared", spec.Image)
	}
	p.seq++
	workdir := spec.WorkDir
	if workdir == "" {
		workdir = "/"
	}
	sb := &FakeSandbox{p: p, id: fmt.Sprintf("fake-%d", p.seq), session: sandbox.NewSessionID(), workdir: workdir,
		files: map[string]*fakeFile{}, dirs: map[string]bool{"/": true}}
	sb.mkdirAll(workdir, false)
	for _, f := range files {
		sb.put(f.Path, f.Data, f.Mode, false)
	}
	p.live[sb.id] = sb
	return sb, nil
}

// Gone reports whether the sandbox with id was closed (or never existed).
func (p *FakeProvider) Gone(ctx context.Context, id string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.live[id]
	return !ok, nil
}

// Live returns the number of sandboxes not yet closed.
func (p *FakeProvider) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.live)
}

// Close closes every live sandbox.
func (p *FakeProvider) Close(ctx context.Context) error {
	p.mu.Lock()
	live := make([]*FakeSandbox, 0, len(p.live))
	for _, sb := range p.live {
		live = append(live, sb)
	}
	p.mu.Unlock()
	for _, sb := range live {
		_ = sb.Close(ctx)
	}
	return nil
}

// FakeSandbox is a sandbox whose files live in memory.
type FakeSandbox struct {
	p       *FakeProvider
	id      string
	session string
	workdir string

	// mu guards the fields below.
	mu    sync.Mutex
	files map[string]*fakeFile
	// dirs maps each directory to whether root owns it (CopyIn made it).
	dirs   map[string]bool
	closed bool
	// Execs records every command run, in order.
	execs []sandbox.ExecRequest
}

type fakeFile struct {
	data []byte
	mode fs.FileMode
	// root marks files installed by CopyIn: the sandbox user cannot
	// change them.
	root bool
}

var _ sandbox.Sandbox = (*FakeSandbox)(nil)

// ID returns the sandbox id.
func (s *FakeSandbox) ID() string { return s.id }

// SessionID returns the id of the sandbox's session, minted by Create.
func (s *FakeSandbox) SessionID() string { return s.session }

// Execs returns the commands run so far.
func (s *FakeSandbox) Execs() []sandbox.ExecRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sandbox.ExecRequest(nil), s.execs...)
}

func (s *FakeSandbox) abs(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(s.workdir, p)
	}
	return path.Clean(p)
}

func (s *FakeSandbox) check() error {
	if s.closed {
		return gym.Errorf(gym.ClassSandbox, "fake sandbox %s is closed", s.id)
	}
	return nil
}

// mkdirAll creates dir and its parents; root says who owns the new ones.
func (s *FakeSandbox) mkdirAll(dir string, root bool) {
	for d := dir; d != "/" && d != "."; d = path.Dir(d) {
		if _, ok := s.dirs[d]; !ok {
			s.dirs[d] = root
		}
	}
}

func (s *FakeSandbox) put(p string, data []byte, mode fs.FileMode, root bool) {
	p = s.abs(p)
	s.mkdirAll(path.Dir(p), root)
	s.files[p] = &fakeFile{data: append([]byte(nil), data...), mode: mode.Perm(), root: root}
}

// Exec records the request and answers it with the provider's ExecFunc.
func (s *FakeSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	s.mu.Lock()
	if err := s.check(); err != nil {
		s.mu.Unlock()
		return sandbox.ExecResult{}, err
	}
	s.execs = append(s.execs, req)
	s.mu.Unlock()
	if s.p.ExecFunc == nil {
		return sandbox.ExecResult{}, ctx.Err()
	}
	return s.p.ExecFunc(ctx, s, req)
}

// WriteFile writes a file, creating its parents.
func (s *FakeSandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	p = s.abs(p)
	if _, ok := s.dirs[p]; ok {
		return fmt.Errorf("write %s: %w", p, sandbox.ErrIsDir)
	}
	if f, ok := s.files[p]; (ok && f.root) || s.dirs[path.Dir(p)] {
		return fmt.Errorf("write %s: %w", p, fs.ErrPermission)
	}
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := s.files[d]; ok {
			return fmt.Errorf("write %s: %w", p, sandbox.ErrNotDir)
		}
	}
	s.put(p, data, mode, false)
	return nil
}

// ReadFile reads at most maxBytes of a file.
func (s *FakeSandbox) ReadFile(ctx context.Context, p string, maxBytes int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	p = s.abs(p)
	if _, ok := s.dirs[p]; ok {
		return nil, fmt.Errorf("read %s: %w", p, sandbox.ErrIsDir)
	}
	f, ok := s.files[p]
	if !ok {
		return nil, fmt.Errorf("read %s: %w", p, sandbox.ErrNotExist)
	}
	if int64(len(f.data)) > maxBytes {
		return append([]byte(nil), f.data[:maxBytes]...), fmt.Errorf("read %s: %w", p, sandbox.ErrTooLarge)
	}
	return append([]byte(nil), f.data...), nil
}

// ListDir lists a directory, sorted by name.
func (s *FakeSandbox) ListDir(ctx context.Context, p string) ([]sandbox.DirEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	p = s.abs(p)
	if _, ok := s.files[p]; ok {
		return nil, fmt.Errorf("list %s: %w", p, sandbox.ErrNotDir)
	}
	if _, ok := s.dirs[p]; !ok {
		return nil, fmt.Errorf("list %s: %w", p, sandbox.ErrNotExist)
	}
	var out []sandbox.DirEntry
	for d := range s.dirs {
		if d != p && path.Dir(d) == p {
			out = append(out, sandbox.DirEntry{Name: path.Base(d), IsDir: true, Mode: fs.ModeDir | 0o755})
		}
	}
	for f, ff := range s.files {
		if path.Dir(f) == p {
			out = append(out, sandbox.DirEntry{Name: path.Base(f), Size: int64(len(ff.data)), Mode: ff.mode})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes a path recursively with the machinery's rights, root's
// files included.
func (s *FakeSandbox) Remove(ctx context.Context, p string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	p = s.abs(p)
	under := func(x string) bool { return x == p || strings.HasPrefix(x, p+"/") }
	for f := range s.files {
		if under(f) {
			delete(s.files, f)
		}
	}
	for d := range s.dirs {
		if under(d) && d != "/" {
			delete(s.dirs, d)
		}
	}
	return nil
}

// KillAll does nothing: the fake runs no processes.
func (s *FakeSandbox) KillAll(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.check()
}

// CopyIn installs files the sandbox user cannot change.
func (s *FakeSandbox) CopyIn(ctx context.Context, files []sandbox.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	for _, f := range files {
		s.put(f.Path, f.Data, 0o644, true)
	}
	return nil
}

// Close forgets the sandbox; it is idempotent.
func (s *FakeSandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.p.mu.Lock()
	delete(s.p.live, s.id)
	s.p.mu.Unlock()
	return nil
}

var (
	_ sandbox.Committer    = (*FakeSandbox)(nil)
	_ sandbox.ImageDropper = (*FakeProvider)(nil)
)

// Commit saves the sandbox's files as a new image of the provider.
func (s *FakeSandbox) Commit(ctx context.Context) (string, error) {
	s.mu.Lock()
	if err := s.check(); err != nil {
		s.mu.Unlock()
		return "", err
	}
	var files []sandbox.File
	for p, f := range s.files {
		files = append(files, sandbox.File{Path: p, Data: append([]byte(nil), f.data...), Mode: f.mode})
	}
	s.mu.Unlock()
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.seq++
	ref := fmt.Sprintf("fake-snapshot:%d", s.p.seq)
	s.p.images[ref] = files
	return ref, nil
}

// DropImage forgets an image.
func (p *FakeProvider) DropImage(ctx context.Context, ref string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.images[ref]; !ok {
		return fmt.Errorf("fake: image %s: %w", ref, gym.ErrNotFound)
	}
	delete(p.images, ref)
	return nil
}

// Images returns the number of images the provider holds.
func (p *FakeProvider) Images() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.images)
}

var _ sandbox.Archiver = (*FakeSandbox)(nil)

// fakeArchive is the fake's archive: the agent's files and directories.
type fakeArchive struct {
	Files []sandbox.File
	Dirs  []string
}

// Archive saves the files and directories the sandbox user owns, as JSON.
// It fails with ErrNotArchivable past maxBytes (0: no limit) or when the
// provider's NoArchive is set.
func (s *FakeSandbox) Archive(ctx context.Context, maxBytes int64) (sandbox.Capture, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return sandbox.Capture{}, err
	}
	if s.p.NoArchive {
		return sandbox.Capture{}, fmt.Errorf("fake: archives are off: %w", sandbox.ErrNotArchivable)
	}
	var a fakeArchive
	for p, f := range s.files {
		if !f.root {
			a.Files = append(a.Files, sandbox.File{Path: p, Data: f.data, Mode: f.mode})
		}
	}
	for d, root := range s.dirs {
		if !root {
			a.Dirs = append(a.Dirs, d)
		}
	}
	data, err := json.Marshal(a)
	if err != nil {
		return sandbox.Capture{}, err
	}
	if maxBytes > 0 && int64(len(data)) > maxBytes {
		return sandbox.Capture{}, fmt.Errorf("fake: %d bytes exceed %d: %w", len(data), maxBytes, sandbox.ErrNotArchivable)
	}
	fetch := func(ctx context.Context) ([]byte, error) { return data, nil }
	return sandbox.Capture{Size: int64(len(data)), Fetch: fetch}, nil
}

// Restore replaces the sandbox user's files and directories with an
// archive's.
func (s *FakeSandbox) Restore(ctx context.Context, archive []byte) error {
	var a fakeArchive
	if err := json.Unmarshal(archive, &a); err != nil {
		return fmt.Errorf("fake: %v: %w", err, sandbox.ErrInvalidArchive)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	for p, f := range s.files {
		if !f.root {
			delete(s.files, p)
		}
	}
	for d, root := range s.dirs {
		if !root && d != "/" {
			delete(s.dirs, d)
		}
	}
	for _, d := range a.Dirs {
		s.mkdirAll(d, false)
	}
	for _, f := range a.Files {
		s.put(f.Path, f.Data, f.Mode, false)
	}
	return nil
}
