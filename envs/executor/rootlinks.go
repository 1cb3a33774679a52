package executor

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Programs named through a link of "/". In an image with a merged /usr,
// /bin, /sbin, /lib and /lib64 are symbolic links into /usr, and a step's
// `/bin/sh -c LINE` (or a line such as `/bin/echo hi`) makes the kernel
// read the link /bin at every start. On a FUSE root (Docker's
// fuse-overlayfs storage driver) each read of a link is a round trip to the
// daemon: fuse-overlayfs does not ask the kernel to keep links, and a
// sandbox's /usr/bin comes from a volume (shared /usr), so the link is the
// only part of the walk that goes through FUSE. The executor reads "/"'s
// links once and starts a program named /bin/sh by the path the link leads
// to, /usr/bin/sh: the file the kernel would have found, one round trip
// fewer (about 0.05 ms of CPU per step at 8 sessions, 0.15 ms at 128, on
// session 25's machine).
//
// It is the same file only while the link stays as it was read, so:
//   - the links are read only when "/" belongs to root and neither its
//     group nor others may write it, and only for an executor whose
//     commands run as the agent: no command of the agent can replace an
//     entry of "/";
//   - a request that runs with the machinery's rights and could change "/"
//     (a Priv exec or write, or a remove or install of an entry of "/")
//     drops them for the executor's life;
//   - the argv[0] the program sees stays as written, and a program that is
//     not an ELF binary is started by the path as written: the kernel hands
//     a script's interpreter the path it was started by, which the script
//     sees as $0.
//
// The one difference a program can see is the auxiliary vector's
// AT_EXECFN, which holds the path the kernel was given.

// rootLinks is what the executor knows of "/"'s links: nil when it does
// not use them.
type rootLinks struct {
	m atomic.Pointer[map[string]string]
}

// readRootLinks returns the symbolic links of root that may stand for the
// path they lead to, by name ("bin" -> "/usr/bin"), or nil when root is not
// a directory of root's that only root may write. A link is kept when its
// target is a clean path without "..": the kernel then walks "/" + target
// for it, whatever the target holds.
func readRootLinks(root string) map[string]string {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	links := map[string]string{}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		t, err := os.Readlink(filepath.Join(root, e.Name()))
		if err != nil || t == "" || filepath.Clean(t) != t || t == "." || t == "/" || strings.Contains("/"+t+"/", "/../") {
			continue
		}
		links[e.Name()] = "/" + strings.TrimPrefix(t, "/")
	}
	if len(links) == 0 {
		return nil
	}
	return links
}

// use sets the links to m (nil: none).
func (l *rootLinks) use(m map[string]string) {
	if m == nil {
		l.m.Store(nil)
		return
	}
	l.m.Store(&m)
}

// drop forgets the links: something with root's rights may have changed
// "/".
func (l *rootLinks) drop() { l.m.Store(nil) }

// touched drops the links when the machinery removes or replaces p, an
// entry of "/".
func (l *rootLinks) touched(p string) {
	if filepath.Dir(filepath.Clean(p)) == "/" {
		l.drop()
	}
}

// resolve returns p with a first component that is a known link replaced
// by the path it leads to ("/bin/sh" -> "/usr/bin/sh"), or p itself. The
// rest of p is kept as written.
func (l *rootLinks) resolve(p string) string {
	m := l.m.Load()
	if m == nil || !strings.HasPrefix(p, "/") {
		return p
	}
	name, rest, ok := strings.Cut(p[1:], "/")
	if !ok || rest == "" {
		return p
	}
	if t, ok := (*m)[name]; ok {
		return t + "/" + rest
	}
	return p
}

// execPath is the path to start the program p by: resolve(p) when that
// is another path to a regular ELF file, else p.
func (l *rootLinks) execPath(p string) string {
	q := l.resolve(p)
	if q == p || !isELF(q) {
		return p
	}
	return q
}

// isELF reports whether p is a regular file that starts as an ELF binary
// does. It neither blocks (a FIFO) nor follows a link at the end of p any
// differently than exec would.
func isELF(p string) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	var magic [4]byte
	n, err := unix.Pread(fd, magic[:], 0)
	return err == nil && n == 4 && string(magic[:]) == "\x7fELF"
}
