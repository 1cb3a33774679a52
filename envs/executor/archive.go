package executor

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Root is a place the agent can write: a directory whose whole tree is
// the agent's to change, or a single file. Roots lists them for a file
// system; Archive and Restore save and replace what is in them.
type Root struct {
	// Path is absolute and clean.
	Path string `msgpack:"path"`
	Dir  bool   `msgpack:"dir"`
}

// roots lists the places the agent (s.opts.Agent) can write in the file
// system of "/", without crossing into other mounts (/proc, /dev, the
// engine's bind mounts): every directory the agent owns or may write to,
// not looking further inside it, and every other file it owns or may
// write to. It reads metadata only, with the executor's rights, and does
// not follow symbolic links. The agent cannot change what it finds outside
// those places, so the list is the same for every sandbox of an image, at
// any point of an episode, except for files put in place for its task.
func (s *server) roots() ([]Root, error) {
	a := s.opts.Agent
	if a == nil {
		return nil, &kindError{kindInvalid, "roots: the executor has no agent identity"}
	}
	var top syscall.Stat_t
	if err := syscall.Lstat("/", &top); err != nil {
		return nil, fmt.Errorf("roots: %w", err)
	}
	var out []Root
	err := filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Unreadable to root as well: nothing the agent can use.
			if d != nil && d.IsDir() && p != "/" {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Dev != top.Dev {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == "/" || !agentWritable(st, a) {
			return nil
		}
		out = append(out, Root{Path: p, Dir: d.IsDir()})
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("roots: %w", err)
	}
	return out, nil
}

// agentWritable reports whether the agent owns the entry (and so may make
// it writable) or may write to it through its group or others' bits.
func agentWritable(st *syscall.Stat_t, a *Cred) bool {
	return int(st.Uid) == a.UID ||
		(int(st.Gid) == a.GID && st.Mode&0o020 != 0) ||
		st.Mode&0o002 != 0
}

// notArchivable is the error of a state an archive cannot carry.
func notArchivable(format string, args ...any) error {
	return &kindError{kindNotArchivable, fmt.Sprintf(format, args...)}
}

// archivable are the mode bits an archive keeps: permissions and the
// sticky bit, never set-id bits.
const archivable = fs.ModePerm | fs.ModeSticky

// archive writes everything inside roots, and the roots themselves, to a
// tar archive of at most max bytes, reading as the agent: it holds only
// what the agent can read. Names are relative to "/". Every entry below a
// directory root must be the agent's and a directory, a regular file or a
// symbolic link; hard links within the archive are kept as links.
//
// A since other than 0 (Unix nanoseconds) makes a delta archive: only the
// entries whose status changed after since, the instant the sandbox was
// made (every change of a file's content, mode, owner, links or name sets
// its change time, and no process of the agent can set it back), with
// the agent's checks above; the unchanged directories on the way to them
// as pass entries; the directory roots always. A changed directory lists
// the children it kept unchanged (paxKeep): a restore removes every other
// child of the sandbox it restores into, which carries deletions. Every
// entry of a delta archive carries paxDelta.
func (s *server) archive(roots []Root, max, since int64) ([]byte, error) {
	a := s.opts.Agent
	if a == nil {
		return nil, &kindError{kindInvalid, "archive: the executor has no agent identity"}
	}
	w := &archiveWriter{agent: a, max: max, since: since}
	w.tw = tar.NewWriter(&w.buf)
	var err error
	for _, r := range roots {
		if err = checkRoot(r); err != nil {
			return nil, err
		}
		// Hard links are kept within a root; across roots, copies.
		w.links = map[[2]uint64]string{}
		switch {
		case r.Dir && since != 0:
			err = w.addDirChanges(r.Path)
		case r.Dir:
			err = w.addDir(r.Path)
		case since != 0:
			err = w.addFileChanges(r.Path)
		default:
			err = w.addFile(nil, r.Path, r.Path, false)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := w.tw.Close(); err != nil {
		return nil, err
	}
	return w.buf.Bytes(), nil
}

// checkRoot refuses a root that is not an absolute clean path below "/".
func checkRoot(r Root) error {
	if !path.IsAbs(r.Path) || path.Clean(r.Path) != r.Path || r.Path == "/" {
		return &kindError{kindInvalid, fmt.Sprintf("root %q: want an absolute clean path below /", r.Path)}
	}
	return nil
}

// The PAX records of a delta archive (see archive).
const (
	// paxDelta is on every entry of a delta archive: deltaChanged or
	// deltaPass.
	paxDelta = "GYMSERVER.delta"
	// paxKeep is on a changed directory: the children it kept unchanged,
	// each as "type size mtime name" and a NUL, where type is the
	// fs.FileMode type bits and mtime is in Unix nanoseconds.
	paxKeep = "GYMSERVER.keep"
	// deltaChanged marks an entry restored as archived; deltaPass an
	// unchanged directory, which must be there already and stays as it is.
	deltaChanged = "changed"
	deltaPass    = "pass"
)

// archiveWriter builds one archive.
type archiveWriter struct {
	agent *Cred
	max   int64
	// since is the change time after which an entry is in a delta
	// archive; 0 for a whole one.
	since int64
	buf   bytes.Buffer
	tw    *tar.Writer
	// links maps a file's device and inode to the first name it was
	// archived under in the current root.
	links map[[2]uint64]string
	// pending are the unchanged directories, outermost first, on the path
	// to the entry being looked at that are not in the archive yet.
	pending []*tar.Header
}

// header returns the tar header of fi under the absolute path p, marked
// changed in a delta archive.
func (w *archiveWriter) header(p string, fi fs.FileInfo) *tar.Header {
	name := strings.TrimPrefix(p, "/")
	h := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(),
		Uid: w.agent.UID, Gid: w.agent.GID, Format: tar.FormatPAX}
	if fi.Mode()&fs.ModeSticky != 0 {
		h.Mode |= 0o1000
	}
	if w.since != 0 {
		h.PAXRecords = map[string]string{paxDelta: deltaChanged}
	}
	return h
}

// changed reports whether an entry's status changed after w.since.
func (w *archiveWriter) changed(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Ctim.Nano() > w.since
}

// write adds h and data, within the size limit; a nil h only checks the
// limit for what was written.
func (w *archiveWriter) write(h *tar.Header, data []byte) error {
	if h != nil {
		if err := w.tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := w.tw.Write(data); err != nil {
			return err
		}
	}
	if err := w.tw.Flush(); err != nil {
		return err
	}
	if int64(w.buf.Len()) > w.max {
		return notArchivable("the files the agent can change exceed %d bytes", w.max)
	}
	return nil
}

// addDir adds the directory root dir and everything below it.
func (w *archiveWriter) addDir(dir string) error {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return notArchivable("%s: %v", dir, err)
	}
	defer r.Close()
	fi, err := r.Lstat(".")
	if err != nil {
		return notArchivable("%s: %v", dir, err)
	}
	h := w.header(dir, fi)
	h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
	if err := w.write(h, nil); err != nil {
		return err
	}
	return fs.WalkDir(r.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return notArchivable("%s: %v", path.Join(dir, rel), err)
		}
		if rel == "." {
			return nil
		}
		p := path.Join(dir, rel)
		fi, err := r.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile by a running process
		}
		if err != nil {
			return notArchivable("%s: %v", p, err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != w.agent.UID {
			return notArchivable("%s belongs to another user", p)
		}
		return w.addEntry(r, rel, p, fi, w.header(p, fi))
	})
}

// addEntry adds the entry rel (absolute path p, status fi) of the
// directory root r under the header h: a directory, a symbolic link or a
// regular file.
func (w *archiveWriter) addEntry(r *os.Root, rel, p string, fi fs.FileInfo, h *tar.Header) error {
	switch {
	case fi.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		return w.write(h, nil)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := r.Readlink(rel)
		if err != nil {
			return notArchivable("%s: %v", p, err)
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		return w.write(h, nil)
	case fi.Mode().IsRegular():
		return w.addFile(r, rel, p, true)
	}
	return notArchivable("%s is a %s", p, fi.Mode().Type())
}

// addDirChanges adds to a delta archive the directory root dir and what
// changed below it (see archive).
func (w *archiveWriter) addDirChanges(dir string) error {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return notArchivable("%s: %v", dir, err)
	}
	defer r.Close()
	w.pending = w.pending[:0]
	return fs.WalkDir(r.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		p := path.Join(dir, rel)
		if err != nil {
			return notArchivable("%s: %v", p, err)
		}
		fi, err := r.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) && rel != "." {
			return nil // removed meanwhile by a running process
		}
		if err != nil {
			return notArchivable("%s: %v", p, err)
		}
		for n := len(w.pending); n > 0 && !strings.HasPrefix(p, "/"+w.pending[n-1].Name); n-- {
			w.pending = w.pending[:n-1]
		}
		h := w.header(p, fi)
		if !w.changed(fi) {
			if !fi.IsDir() {
				return nil
			}
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			h.PAXRecords[paxDelta] = deltaPass
			if rel == "." {
				// The roots are always there: a delta archive is never
				// empty, so never taken for a whole one.
				return w.write(h, nil)
			}
			w.pending = append(w.pending, h)
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); rel != "." && (!ok || int(st.Uid) != w.agent.UID) {
			return notArchivable("%s belongs to another user", p)
		}
		for _, ph := range w.pending {
			if err := w.write(ph, nil); err != nil {
				return err
			}
		}
		w.pending = w.pending[:0]
		if fi.IsDir() {
			keep, err := w.kept(r, rel)
			if err != nil {
				return notArchivable("%s: %v", p, err)
			}
			h.PAXRecords[paxKeep] = keep
		}
		return w.addEntry(r, rel, p, fi, h)
	})
}

// kept lists, in the paxKeep form, the children of the directory rel of r
// that did not change after w.since.
func (w *archiveWriter) kept(r *os.Root, rel string) (string, error) {
	list, err := fs.ReadDir(r.FS(), rel)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, e := range list {
		fi, err := r.Lstat(path.Join(rel, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if !w.changed(fi) {
			fmt.Fprintf(&b, "%d %d %d %s\x00", uint32(fi.Mode().Type()), fi.Size(), fi.ModTime().UnixNano(), e.Name())
		}
	}
	return b.String(), nil
}

// addFileChanges adds the file root p to a delta archive if it changed.
func (w *archiveWriter) addFileChanges(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return notArchivable("%s: %v", p, err)
	}
	if !w.changed(fi) {
		return nil
	}
	return w.addFile(nil, p, p, false)
}

// addFile adds the regular file rel of r (or the absolute path p when r is
// nil), opened without following a link and checked on the open file.
func (w *archiveWriter) addFile(r *os.Root, rel, p string, owned bool) error {
	const flags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	var f *os.File
	var err error
	if r != nil {
		f, err = r.OpenFile(rel, flags, 0)
	} else {
		f, err = os.OpenFile(p, flags, 0)
	}
	if errors.Is(err, fs.ErrNotExist) && r != nil {
		return nil // removed meanwhile by a running process
	}
	if err != nil {
		return notArchivable("%s: %v", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return notArchivable("%s: %v", p, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok {
		return notArchivable("%s is a %s", p, fi.Mode().Type())
	}
	if owned && int(st.Uid) != w.agent.UID {
		return notArchivable("%s belongs to another user", p)
	}
	h := w.header(p, fi)
	key := [2]uint64{uint64(st.Dev), st.Ino}
	if first, ok := w.links[key]; ok && st.Nlink > 1 {
		h.Typeflag, h.Linkname = tar.TypeLink, first
		return w.write(h, nil)
	}
	w.links[key] = h.Name
	if fi.Size() > w.max-int64(w.buf.Len()) {
		return notArchivable("the files the agent can change exceed %d bytes", w.max)
	}
	// The file is copied straight into the archive, as long as it was
	// when opened: a process of the agent may change it meanwhile, and
	// what it cut is made up with zeros.
	h.Typeflag, h.Size = tar.TypeReg, fi.Size()
	w.buf.Grow(int(fi.Size()) + 1024)
	if err := w.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyN(w.tw, f, h.Size)
	if err != nil && err != io.EOF {
		return notArchivable("%s: %v", p, err)
	}
	if _, err := w.tw.Write(make([]byte, h.Size-n)); err != nil {
		return err
	}
	return w.write(nil, nil)
}

// restoreEntry is one checked entry of an archive being restored.
type restoreEntry struct {
	h    *tar.Header
	data []byte
	// root is the root the entry is in, and rel its name inside the root
	// ("." for the root itself).
	root Root
	rel  string
	// delta is the entry's paxDelta, "" in a whole archive; keep are the
	// children a changed directory of a delta archive kept.
	delta string
	keep  []keptChild
}

// keptChild is a child a directory kept unchanged in a delta archive.
type keptChild struct {
	name  string
	typ   fs.FileMode
	size  int64
	mtime int64
}

// restore replaces what is in roots with the archive's content, with the
// agent's rights only (the caller runs it as the agent): the directory
// roots are emptied, then the entries are made. The whole archive is
// checked first; an entry outside roots, below a symbolic link of the
// archive, of another type than directory, regular file, symbolic link or
// hard link to an earlier file, or naming a file root as a directory, is
// refused before anything changes.
//
// A restore touches only what it must: every operation on a sandbox's
// files may be a round trip to a file-system daemon (fuse-overlayfs), so
// each directory is opened once (restoreDirs), a directory root that a
// delta archive only passes through is not opened at all, nothing is
// looked up inside a directory the restore made itself, and a file gets
// its mode and time through the descriptor it was written through.
func (s *server) restore(roots []Root, data []byte) error {
	if s.opts.Agent == nil {
		return &kindError{kindInvalid, "restore: the executor has no agent identity"}
	}
	for _, r := range roots {
		if err := checkRoot(r); err != nil {
			return err
		}
	}
	ents, delta, err := readArchive(roots, data)
	if err != nil {
		return err
	}
	d := &restoreDirs{open: map[string]*os.Root{}, made: map[string]fs.FileMode{}, umask: processUmask()}
	defer d.close()
	if !delta {
		for _, r := range roots {
			if !r.Dir {
				continue
			}
			rt, err := d.root(r)
			if err != nil {
				return fmt.Errorf("restore %s: %w", r.Path, err)
			}
			list, err := fs.ReadDir(rt.FS(), ".")
			if err != nil {
				return fmt.Errorf("restore %s: %w", r.Path, err)
			}
			for _, e := range list {
				if err := rt.RemoveAll(e.Name()); err != nil {
					return fmt.Errorf("restore %s: clear: %w", r.Path, err)
				}
			}
		}
	}
	// children are, in a delta archive, the names each directory (by
	// absolute path) has entries for.
	children := map[string]map[string]bool{}
	for _, e := range ents {
		if delta && e.rel != "." {
			dir := path.Join(e.root.Path, path.Dir(e.rel))
			if children[dir] == nil {
				children[dir] = map[string]bool{}
			}
			children[dir][path.Base(e.rel)] = true
		}
	}
	var dirs []restoreEntry
	for _, e := range ents {
		if delta && e.delta == deltaPass && e.rel == "." {
			// A root the snapshot's sandbox did not change: it is the
			// image's, as here.
			continue
		}
		var err error
		if delta {
			err = d.replace(e, children[path.Join(e.root.Path, e.rel)], s.opts.Agent.UID)
		} else {
			err = d.make(e, false)
		}
		if err != nil {
			return fmt.Errorf("restore /%s: %w", strings.TrimSuffix(e.h.Name, "/"), err)
		}
		if e.h.Typeflag == tar.TypeDir && e.delta != deltaPass {
			dirs = append(dirs, e)
		}
	}
	// Directories get their mode and time last, deepest first: their
	// content is in place and a read-only one could not be filled.
	for _, e := range slices.Backward(dirs) {
		dir, name, err := d.parent(e)
		if err != nil {
			return fmt.Errorf("restore /%s: %w", e.h.Name, err)
		}
		mode := fs.FileMode(e.h.Mode).Perm()
		if e.h.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		if e.rel == "." {
			// A root the agent does not own (/tmp) keeps its mode.
			fi, err := dir.Lstat(".")
			if st, ok := sysStat(fi); err != nil || !ok || int(st.Uid) != s.opts.Agent.UID {
				continue
			}
		}
		if made, ok := d.made[path.Join(e.root.Path, e.rel)]; !ok || made != mode {
			if err := dir.Chmod(name, mode); err != nil {
				return fmt.Errorf("restore /%s: %w", e.h.Name, err)
			}
		}
		_ = dir.Chtimes(name, time.Time{}, e.h.ModTime)
	}
	return nil
}

// restoreDirs are the directories one restore has opened, and those it
// made.
type restoreDirs struct {
	// open are the directories opened so far, by absolute path: roots
	// and directories below them.
	open map[string]*os.Root
	// made are the directories the restore made, by absolute path, with
	// the mode they were made with: they hold only what the restore put
	// there.
	made map[string]fs.FileMode
	// umask is the executor's, which the kernel applies to what it makes.
	umask fs.FileMode
}

// close closes every directory d opened.
func (d *restoreDirs) close() {
	for _, r := range d.open {
		r.Close()
	}
}

// root returns the directory root r, opened once.
func (d *restoreDirs) root(r Root) (*os.Root, error) {
	if rt, ok := d.open[r.Path]; ok {
		return rt, nil
	}
	rt, err := os.OpenRoot(r.Path)
	if err != nil {
		return nil, err
	}
	d.open[r.Path] = rt
	return rt, nil
}

// parent returns the directory that holds the entry e, opened once, and
// e's name in it; for a directory root itself, the root and ".".
func (d *restoreDirs) parent(e restoreEntry) (*os.Root, string, error) {
	rt, err := d.root(e.root)
	if err != nil || e.rel == "." {
		return rt, ".", err
	}
	dir, name := path.Split(e.rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		return rt, name, nil
	}
	abs := path.Join(e.root.Path, dir)
	if sub, ok := d.open[abs]; ok {
		return sub, name, nil
	}
	sub, err := rt.OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	d.open[abs] = sub
	return sub, name, nil
}

// processUmask returns the process's umask, as /proc reports it when
// first asked (the executor never changes it), or 0o777 (every mode set
// explicitly) when it cannot be read.
var processUmask = sync.OnceValue(func() fs.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return fs.FileMode(m) & fs.ModePerm
			}
		}
	}
	return 0o777
})

// replace puts one entry of a delta archive in place inside its
// directory root, or writes a file root: what is there is replaced, but
// for a directory, which stays and loses the children that neither its
// kept list nor the archive (names) has; the kept children must be there
// as they were in the snapshot's sandbox. A pass entry must be a
// directory there. A regular file of the agent (uid agent) with no other
// links is rewritten in place.
func (d *restoreDirs) replace(e restoreEntry, names map[string]bool, agent int) error {
	if !e.root.Dir {
		return d.make(e, false)
	}
	abs := path.Join(e.root.Path, e.rel)
	if _, ok := d.made[path.Dir(abs)]; ok && e.rel != "." {
		// Nothing is in a directory the restore made but what it put
		// there, and each name is once in an archive.
		if e.delta == deltaPass {
			return errors.New("not a directory as in the snapshot")
		}
		return d.make(e, false)
	}
	dir, name, err := d.parent(e)
	if err != nil {
		return err
	}
	fi, err := dir.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fi = nil
	case err != nil:
		return err
	}
	if e.delta == deltaPass {
		if fi == nil || !fi.IsDir() {
			return errors.New("not a directory as in the snapshot")
		}
		return nil
	}
	if e.h.Typeflag != tar.TypeDir {
		if st, ok := sysStat(fi); ok && e.h.Typeflag == tar.TypeReg && fi.Mode().IsRegular() && st.Nlink == 1 && int(st.Uid) == agent {
			// Rewritten in place: its directory may be one the agent
			// cannot write to.
			return d.make(e, true)
		}
		if fi != nil {
			if err := dir.RemoveAll(name); err != nil {
				return err
			}
		}
		return d.make(e, false)
	}
	if fi != nil && !fi.IsDir() {
		if err := dir.RemoveAll(name); err != nil {
			return err
		}
		fi = nil
	}
	if fi == nil {
		return d.make(e, false)
	}
	if fi.Mode().Perm()&0o700 != 0o700 {
		// Writable until its mode is set at the end, if the agent's; if
		// not, what follows fails where the agent could not write.
		_ = dir.Chmod(name, fi.Mode().Perm()|0o700)
	}
	list, err := fs.ReadDir(dir.FS(), name)
	if err != nil {
		return err
	}
	kept := make(map[string]keptChild, len(e.keep))
	for _, k := range e.keep {
		kept[k.name] = k
	}
	for _, c := range list {
		if _, ok := kept[c.Name()]; !ok && !names[c.Name()] {
			if err := dir.RemoveAll(path.Join(name, c.Name())); err != nil {
				return err
			}
		}
	}
	for _, k := range e.keep {
		fi, err := dir.Lstat(path.Join(name, k.name))
		if err != nil {
			return fmt.Errorf("unchanged %s: %w", k.name, err)
		}
		same := fi.Mode().Type() == k.typ
		if same && !fi.IsDir() {
			same = fi.Size() == k.size && fi.ModTime().UnixNano() == k.mtime
		}
		if !same {
			return fmt.Errorf("unchanged %s differs from the snapshot's sandbox", k.name)
		}
	}
	return nil
}

// sysStat returns the status of fi, which may be nil.
func sysStat(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// parseKept parses a paxKeep record.
func parseKept(rec string) ([]keptChild, error) {
	var out []keptChild
	for _, item := range strings.Split(rec, "\x00") {
		if item == "" {
			continue
		}
		f := strings.SplitN(item, " ", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("kept child %q", item)
		}
		typ, err1 := strconv.ParseUint(f[0], 10, 32)
		size, err2 := strconv.ParseInt(f[1], 10, 64)
		mtime, err3 := strconv.ParseInt(f[2], 10, 64)
		name := f[3]
		if err := errors.Join(err1, err2, err3); err != nil || name == "." || name == ".." || strings.Contains(name, "/") {
			return nil, fmt.Errorf("kept child %q", item)
		}
		out = append(out, keptChild{name: name, typ: fs.FileMode(typ) & fs.ModeType, size: size, mtime: mtime})
	}
	return out, nil
}

// readArchive reads and checks every entry of an archive against roots,
// and tells whether it is a delta archive.
func readArchive(roots []Root, data []byte) ([]restoreEntry, bool, error) {
	bad := func(format string, args ...any) error {
		return &kindError{kindInvalidArchive, fmt.Sprintf(format, args...)}
	}
	br := bytes.NewReader(data)
	tr := tar.NewReader(br)
	var out []restoreEntry
	// seen are the names made so far, with whether each is a directory;
	// links are the symbolic links among them.
	seen := map[string]bool{}
	delta := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, delta, nil
		}
		if err != nil {
			return nil, false, bad("read archive: %v", err)
		}
		p := "/" + strings.TrimSuffix(h.Name, "/")
		if path.Clean(p) != p || strings.Contains(h.Name, "\x00") {
			return nil, false, bad("entry %q: not a clean path", h.Name)
		}
		e := restoreEntry{h: h, delta: h.PAXRecords[paxDelta]}
		if len(out) == 0 {
			delta = e.delta != ""
		}
		switch {
		case delta != (e.delta != ""):
			return nil, false, bad("entry %s: a delta archive's entry mixed with a whole archive's", p)
		case e.delta != "" && e.delta != deltaChanged && e.delta != deltaPass:
			return nil, false, bad("entry %s: delta %q", p, e.delta)
		case e.delta == deltaPass && h.Typeflag != tar.TypeDir:
			return nil, false, bad("entry %s: passes through a %q", p, h.Typeflag)
		}
		if rec, ok := h.PAXRecords[paxKeep]; ok {
			if e.delta != deltaChanged || h.Typeflag != tar.TypeDir {
				return nil, false, bad("entry %s: a kept list on what is not a changed directory", p)
			}
			if e.keep, err = parseKept(rec); err != nil {
				return nil, false, bad("entry %s: %v", p, err)
			}
		}
		found := false
		for _, r := range roots {
			if p == r.Path {
				e.root, e.rel, found = r, ".", true
				break
			}
			if r.Dir && strings.HasPrefix(p, r.Path+"/") {
				e.root, e.rel, found = r, strings.TrimPrefix(p, r.Path+"/"), true
				break
			}
		}
		if !found {
			return nil, false, bad("entry %s: outside the places the agent can write", p)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if !e.root.Dir {
				return nil, false, bad("entry %s: a directory where the agent can only write a file", p)
			}
		case tar.TypeReg:
			if e.root.Dir && e.rel == "." {
				return nil, false, bad("entry %s: a file in place of a directory", p)
			}
		case tar.TypeSymlink, tar.TypeLink:
			if e.rel == "." {
				return nil, false, bad("entry %s: a link in place of a root", p)
			}
			if h.Typeflag == tar.TypeLink {
				target := "/" + h.Linkname
				if isDir, ok := seen[target]; !ok || isDir || path.Clean(target) != target || !strings.HasPrefix(target, e.root.Path+"/") {
					return nil, false, bad("entry %s: a hard link to %s, not an earlier file of its directory", p, target)
				}
				h.Linkname = strings.TrimPrefix(target, e.root.Path+"/")
			}
		default:
			return nil, false, bad("entry %s: type %q is not restored", p, h.Typeflag)
		}
		if e.rel != "." {
			if _, dup := seen[p]; dup {
				return nil, false, bad("entry %s: twice in the archive", p)
			}
			parent := path.Dir(p)
			if isDir, ok := seen[parent]; parent != e.root.Path && (!ok || !isDir) {
				return nil, false, bad("entry %s: its directory is not an earlier directory of the archive", p)
			}
		}
		seen[p] = h.Typeflag == tar.TypeDir
		if h.Typeflag == tar.TypeReg {
			if h.Size < 0 || h.Size > int64(len(data)) {
				return nil, false, bad("entry %s: size %d", p, h.Size)
			}
			if e.data, err = fileData(tr, br, data, h); err != nil {
				return nil, false, bad("entry %s: %v", p, err)
			}
		}
		out = append(out, e)
	}
}

// fileData returns the content of regular file h, the entry tr (reading
// data through br) has just read. A plain file's content is the h.Size
// bytes that follow its header in the archive: they are returned in place,
// not copied (an archive is often one large file), and tr skips them. A
// sparse file (PAX "GNU.sparse." records) is stored as a map and its
// data, not as its content: tr expands it into a copy.
func fileData(tr *tar.Reader, br *bytes.Reader, data []byte, h *tar.Header) ([]byte, error) {
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			b := make([]byte, h.Size)
			_, err := io.ReadFull(tr, b)
			return b, err
		}
	}
	off := br.Size() - int64(br.Len())
	if h.Size > int64(len(data))-off {
		return nil, io.ErrUnexpectedEOF
	}
	return data[off : off+h.Size : off+h.Size], nil
}

// make makes one entry inside its directory root, or writes a file root;
// with inPlace, a regular file rewrites the one there. A directory is
// made writable by the agent until restore sets its mode at the end.
func (d *restoreDirs) make(e restoreEntry, inPlace bool) error {
	mode := fs.FileMode(e.h.Mode).Perm()
	if !e.root.Dir {
		// A file root: it exists, in a directory the agent cannot
		// write; only its content and mode can change.
		f, err := os.OpenFile(e.root.Path, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		return writeFile(f, e, true)
	}
	dir, name, err := d.parent(e)
	if err != nil {
		return err
	}
	switch e.h.Typeflag {
	case tar.TypeDir:
		if e.rel == "." {
			return nil
		}
		made := (mode | 0o700) &^ d.umask
		if err := dir.Mkdir(name, mode|0o700); err != nil {
			return err
		}
		d.made[path.Join(e.root.Path, e.rel)] = made
		return nil
	case tar.TypeSymlink:
		return dir.Symlink(e.h.Linkname, name)
	case tar.TypeLink:
		// The target is an earlier file of the same root (readArchive).
		rt, err := d.root(e.root)
		if err != nil {
			return err
		}
		return rt.Link(e.h.Linkname, e.rel)
	}
	var f *os.File
	if inPlace {
		f, err = dir.OpenFile(name, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	} else {
		// Made with its mode: a file made read-only is still open for
		// writing through the descriptor that made it.
		f, err = dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	}
	if err != nil {
		return err
	}
	return writeFile(f, e, inPlace || mode&d.umask != 0)
}

// writeFile writes e's content to f, sets its mode if chmod, then its
// modification time, and closes f.
func writeFile(f *os.File, e restoreEntry, chmod bool) error {
	_, err := f.Write(e.data)
	if err == nil && chmod {
		err = f.Chmod(fs.FileMode(e.h.Mode).Perm())
	}
	if err == nil {
		err = setModTime(f, e.h.ModTime)
	}
	return errors.Join(err, f.Close())
}

// setModTime sets the modification time of the open file f, leaving its
// access time (futimens).
func setModTime(f *os.File, t time.Time) error {
	ts := [2]syscall.Timespec{{Nsec: utimeOmit}, syscall.NsecToTimespec(t.UnixNano())}
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	err = c.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return &os.PathError{Op: "futimens", Path: f.Name(), Err: errno}
	}
	return nil
}

// utimeOmit is UTIME_OMIT: a time utimensat leaves as it is.
const utimeOmit = (1 << 30) - 2
