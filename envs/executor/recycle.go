package executor

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A recycled sandbox serves a second episode in the same container. Before
// it does, everything the first episode could leave behind must be gone:
//
//   - processes: the agent's (every process of its uid), the persistent
//     shell, and anything else but init, the executor and the verifier
//     zygote. The zygote stays: it is root's, imported only files that
//     only root can change (see trustedFile), and what it forked was the
//     agent's and is killed;
//   - files: the agent can write only inside its places (Root): those
//     are put back, byte for byte, as they were when the sandbox started
//     (the pristine archive), and the archive taken again afterwards must
//     equal it. Outside them only root writes: the files an install op
//     put in place and the directories it made are removed, and a sandbox
//     where root did anything else on the session's behalf (a Priv exec
//     or write, a remove outside the agent's places) is not recycled;
//   - memory the kernel keeps without a process: System V shared memory,
//     message queues and semaphores, POSIX message queues (/dev/mqueue)
//     and /dev/shm, which are checked empty afterwards;
//   - mounts: a sandbox with another mount the agent can write is not
//     recycled.

// maxPristine caps the pristine archive the executor keeps in memory (it
// counts against the sandbox's memory limit).
const maxPristine = 16 << 20

// pristine is what the agent's places held when the sandbox started.
type pristine struct {
	roots []Root
	data  []byte
	// dirTimes are the modification times of the directory roots.
	dirTimes map[string]time.Time
}

// kernelPlaces are mounts the agent can write whose content the kernel
// keeps without a process: recycle empties them.
var kernelPlaces = []string{"/dev/shm", "/dev/mqueue"}

// recycleWait bounds how long a recycle waits for the commands in flight
// to end once their processes are killed.
const recycleWait = 5 * time.Second

// takePristine records the agent's places (roots, or those the executor
// finds when roots is empty) and what they hold, for later recycles. It
// must run before any agent command. It fails, and the sandbox cannot be
// recycled, when the places hold more than maxPristine bytes or what an
// archive cannot carry, or when the agent can write another mount.
func (s *server) takePristine(roots []Root) (int64, error) {
	if s.opts.Agent == nil {
		return 0, &kindError{kindInvalid, "pristine: the executor has no agent identity"}
	}
	if len(roots) == 0 {
		var err error
		if roots, err = s.roots(); err != nil {
			return 0, err
		}
	}
	if err := s.checkMounts(); err != nil {
		return 0, err
	}
	var data []byte
	err := asAgent(s.opts.Agent, func() (err error) {
		data, err = s.archive(roots, maxPristine, 0)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pristine: %w", err)
	}
	pr := &pristine{roots: roots, data: data, dirTimes: map[string]time.Time{}}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		p := "/" + strings.TrimSuffix(h.Name, "/")
		if h.Typeflag == tar.TypeDir && slices.Contains(roots, Root{Path: p, Dir: true}) {
			pr.dirTimes[p] = h.ModTime
		}
	}
	s.mu.Lock()
	s.pristine = pr
	s.mu.Unlock()
	return int64(len(data)), nil
}

// checkMounts fails when the agent can write a mount other than "/" and
// the kernel's places, or when it can write one that is not a directory
// root: recycle could not put it back.
func (s *server) checkMounts() error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("pristine: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		point := unescapeMount(fields[4])
		if point == "/" || slices.Contains(kernelPlaces, point) || slices.Contains(strings.Split(fields[5], ","), "ro") ||
			point == "/proc" || strings.HasPrefix(point, "/proc/") || point == "/sys" || strings.HasPrefix(point, "/sys/") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Lstat(point, &st) != nil {
			continue
		}
		if point == "/dev/pts" && st.Mode&0o002 == 0 {
			// Its nodes come and go with the terminals of processes.
			continue
		}
		if agentWritable(&st, s.opts.Agent) {
			return &kindError{kindNotRecyclable, fmt.Sprintf("pristine: the agent can write the mount %s", point)}
		}
	}
	return sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// taint records why the sandbox can no longer be recycled (the first
// reason is kept).
func (s *server) taint(format string, args ...any) {
	s.mu.Lock()
	if s.tainted == "" {
		s.tainted = fmt.Sprintf(format, args...)
	}
	s.mu.Unlock()
}

// outsidePlaces reports whether p lies outside the agent's places of the
// pristine state (true when there is none: then nothing is recycled).
func (s *server) outsidePlaces(p string) bool {
	s.mu.Lock()
	pr := s.pristine
	s.mu.Unlock()
	if pr == nil {
		return true
	}
	for _, r := range pr.roots {
		if p == r.Path || (r.Dir && strings.HasPrefix(p, r.Path+"/")) {
			return false
		}
	}
	return true
}

// recycle puts the sandbox back as it started (see the comment at the top
// of this file), or fails and says why: then the sandbox must go.
func (s *server) recycle() error {
	s.mu.Lock()
	pr, tainted := s.pristine, s.tainted
	s.mu.Unlock()
	switch {
	case pr == nil:
		return &kindError{kindNotRecyclable, "recycle: no pristine state was taken"}
	case tainted != "":
		return &kindError{kindNotRecyclable, "recycle: " + tainted}
	}
	if err := s.stopAll(); err != nil {
		return err
	}
	if err := clearSysVIPC(s.opts.Agent); err != nil {
		return err
	}
	for _, p := range kernelPlaces {
		if err := emptyDir(p); err != nil {
			return fmt.Errorf("recycle: %w", err)
		}
	}
	if err := s.removeInstalled(); err != nil {
		return err
	}
	// The agent's places: emptied with root's rights (the agent may have
	// made what it left unreadable), then filled as at the start.
	for _, r := range pr.roots {
		if !r.Dir {
			continue
		}
		if err := emptyDir(r.Path); err != nil {
			return fmt.Errorf("recycle: %w", err)
		}
	}
	if err := asAgent(s.opts.Agent, func() error { return s.restore(pr.roots, pr.data) }); err != nil {
		return fmt.Errorf("recycle: restore: %w", err)
	}
	// The agent cannot set the times of a directory it does not own
	// (/tmp): root does.
	for p, t := range pr.dirTimes {
		if err := os.Chtimes(p, t, t); err != nil {
			return fmt.Errorf("recycle: %w", err)
		}
	}
	var again []byte
	err := asAgent(s.opts.Agent, func() (err error) {
		again, err = s.archive(pr.roots, maxPristine, 0)
		return err
	})
	if err != nil {
		return fmt.Errorf("recycle: check: %w", err)
	}
	if !bytes.Equal(again, pr.data) {
		return &kindError{kindNotRecyclable, "recycle: the agent's places differ from the pristine state after the restore: " + tarDifference(pr.data, again)}
	}
	s.mu.Lock()
	s.groups = map[int]bool{}
	s.held = map[uint64][]byte{}
	s.mu.Unlock()
	return nil
}

// tarDifference names the first entry where two tar archives differ.
func tarDifference(a, b []byte) string {
	ra, rb := tar.NewReader(bytes.NewReader(a)), tar.NewReader(bytes.NewReader(b))
	for {
		ha, ea := ra.Next()
		hb, eb := rb.Next()
		switch {
		case ea != nil || eb != nil:
			if ea == io.EOF && eb == io.EOF {
				return "the same entries, other bytes"
			}
			return fmt.Sprintf("entries end differently (%v, %v; next %s)", ea, eb, entryName(ha, hb))
		case ha.Name != hb.Name:
			return fmt.Sprintf("entry %s where %s was", hb.Name, ha.Name)
		case ha.Mode != hb.Mode || ha.Uid != hb.Uid || ha.Gid != hb.Gid || ha.Size != hb.Size || ha.Typeflag != hb.Typeflag || ha.Linkname != hb.Linkname:
			return fmt.Sprintf("%s: mode %o uid %d size %d, was mode %o uid %d size %d", ha.Name, hb.Mode, hb.Uid, hb.Size, ha.Mode, ha.Uid, ha.Size)
		case !ha.ModTime.Equal(hb.ModTime):
			return fmt.Sprintf("%s: modified %s, was %s", ha.Name, hb.ModTime, ha.ModTime)
		}
		da, _ := io.ReadAll(ra)
		db, _ := io.ReadAll(rb)
		if !bytes.Equal(da, db) {
			return ha.Name + ": other content"
		}
		if !maps.Equal(ha.PAXRecords, hb.PAXRecords) {
			return ha.Name + ": other records"
		}
	}
}

// entryName is the name of whichever header is not nil.
func entryName(a, b *tar.Header) string {
	if a != nil {
		return a.Name
	}
	if b != nil {
		return b.Name
	}
	return "none"
}

// stopAll ends every process but init, the executor and the zygote, and
// waits for the executor's other requests to end.
func (s *server) stopAll() error {
	if err := s.killAll(); err != nil {
		return fmt.Errorf("recycle: %w", err)
	}
	s.shellTurn <- struct{}{}
	if s.sh != nil {
		s.sh.stop()
		s.sh = nil
	}
	<-s.shellTurn
	s.mu.Lock()
	zpid := 0
	if s.zygote != nil {
		zpid = s.zygote.pid
	}
	s.mu.Unlock()
	deadline := time.Now().Add(recycleWait)
	for {
		others := otherProcs(os.Getpid(), zpid)
		s.mu.Lock()
		busy := len(s.running)
		s.mu.Unlock()
		if len(others) == 0 && busy == 0 && s.inFlight.Load() == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return &kindError{kindNotRecyclable, fmt.Sprintf("recycle: %d processes (pids %v) and %d requests outlive the kill", len(others), others, s.inFlight.Load()-1)}
		}
		for _, pid := range others {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// otherProcs lists the live processes but init, the executor (self) and
// the zygote (zygote, 0 for none).
func otherProcs(self, zygote int) []int {
	var out []int
	for _, p := range listProcs() {
		if p.pid != 1 && p.pid != self && p.pid != zygote && p.state != 'Z' && p.state != 'X' {
			out = append(out, p.pid)
		}
	}
	return out
}

// The System V IPC objects the kernel lists, and the syscall that removes
// each kind.
var sysvKinds = []struct {
	list string
	ctl  uintptr
}{
	{"/proc/sysvipc/shm", syscall.SYS_SHMCTL},
	{"/proc/sysvipc/msg", syscall.SYS_MSGCTL},
	{"/proc/sysvipc/sem", syscall.SYS_SEMCTL},
}

// ipcRMID is the IPC_RMID command of shmctl, msgctl and semctl.
const ipcRMID = 0

// clearSysVIPC removes every System V IPC object of the sandbox, from a
// thread with the agent's uid (the creator of every object an episode can
// make may remove it; the executor has no CAP_SYS_ADMIN), and fails if any
// is left.
func clearSysVIPC(a *Cred) error {
	ids, err := sysvIDs()
	if err != nil || len(ids) == 0 {
		return err
	}
	// The creator of every object an episode can make is the agent.
	err = asAgentUID(a, func() error {
		for k, list := range ids {
			for _, id := range list {
				// semctl takes a semaphore number before the command.
				if sysvKinds[k].ctl == syscall.SYS_SEMCTL {
					syscall.Syscall6(sysvKinds[k].ctl, uintptr(id), 0, ipcRMID, 0, 0, 0)
				} else {
					syscall.Syscall(sysvKinds[k].ctl, uintptr(id), ipcRMID, 0)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recycle: %w", err)
	}
	left, err := sysvIDs()
	if err != nil {
		return err
	}
	if n := len(left[0]) + len(left[1]) + len(left[2]); n > 0 {
		return &kindError{kindNotRecyclable, fmt.Sprintf("recycle: %d System V IPC objects outlive their removal", n)}
	}
	return nil
}

// sysvIDs lists the ids of each kind of System V IPC object (see
// sysvKinds); nil when there is none.
func sysvIDs() (map[int][]int, error) {
	var out map[int][]int
	for k, kind := range sysvKinds {
		b, err := os.ReadFile(kind.list)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("recycle: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, line := range lines[1:] { // a header first
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			id, err := strconv.Atoi(f[1]) // key id ...
			if err != nil {
				return nil, fmt.Errorf("recycle: %s: %q", kind.list, line)
			}
			if out == nil {
				out = map[int][]int{}
			}
			out[k] = append(out[k], id)
		}
	}
	return out, nil
}

// emptyDir removes everything inside dir with the executor's rights, and
// checks that nothing is left. A missing dir is empty.
func emptyDir(dir string) error {
	list, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range list {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if list, err = os.ReadDir(dir); err != nil || len(list) > 0 {
		return fmt.Errorf("empty %s: %d entries left (%v)", dir, len(list), err)
	}
	return nil
}

// noteRemove taints the sandbox when a remove with root's rights is about
// to delete p outside the agent's places, unless an install op put p
// there; it drops "/"'s links when p is an entry of "/" (rootLinks).
func (s *server) noteRemove(p string) {
	s.links.touched(p)
	if !s.outsidePlaces(p) || s.ours(p) {
		return
	}
	if _, err := os.Lstat(p); err == nil {
		s.taint("%s, outside the agent's places, was removed", p)
	}
}

// ours reports whether p is a file an install op put outside the agent's
// places, or lies in a directory it made there.
func (s *server) ours(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.installed, p) {
		return true
	}
	for _, d := range s.madeDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// noteInstall records, before an install op writes the file p, what it
// will add outside the agent's places: p, and the first of its parent
// directories that does not exist yet.
func (s *server) noteInstall(p string) {
	if !s.outsidePlaces(p) {
		return
	}
	s.noteMade(filepath.Dir(p))
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.installed, p) {
		s.installed = append(s.installed, p)
	}
}

// noteMade records, before the directory dir is made with its parents,
// the first of them that does not exist yet, when it lies outside the
// agent's places.
func (s *server) noteMade(dir string) {
	if !s.outsidePlaces(dir) {
		return
	}
	missing := ""
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = d
	}
	if missing != "" {
		s.mu.Lock()
		s.madeDirs = append(s.madeDirs, missing)
		s.mu.Unlock()
	}
}

// removeInstalled removes what install and mkdir ops put outside the
// agent's places: the files, then the directories they made (inside those places, the
// restore replaces everything).
func (s *server) removeInstalled() error {
	s.mu.Lock()
	files, dirs := s.installed, s.madeDirs
	s.installed, s.madeDirs = nil, nil
	s.mu.Unlock()
	for _, p := range files {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("recycle: remove %s: %w", p, err)
		}
	}
	for _, d := range slices.Backward(dirs) {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("recycle: remove %s: %w", d, err)
		}
	}
	return nil
}
