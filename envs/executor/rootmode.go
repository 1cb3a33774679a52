package executor

import (
	"fmt"
	"syscall"
)

// closeRootGroup clears the group permission bits of dir (the sandbox's
// "/") where that changes no process's access, and reports whether it did.
// It does so only when dir is a directory owned by root, its group bits
// equal its other bits, and agent (the only identity besides root that
// runs in the sandbox; no-new-privileges keeps its processes from gaining
// a group) is not in dir's group: root keeps the owner's bits, and
// everyone else had the other bits already.
//
// The reason is speed on a FUSE root (Docker's fuse-overlayfs storage
// driver with POSIX ACLs on): for a process that is not the owner of a
// directory with group bits, the kernel checks the directory's ACL, and it
// does not keep "/"'s between checks, so every absolute path a non-root
// process looks up cost a round trip to the FUSE daemon (≈ 2,100 of the
// ≈ 2,600 FUSE requests of a calculator_api pytest run). With no group
// bits the kernel skips the ACL.
func closeRootGroup(dir string, agent *Cred) (bool, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", dir, err)
	}
	perm := st.Mode & 0o7777
	group, other := perm>>3&7, perm&7
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Uid != 0 || group == 0 || group != other ||
		agent == nil || int(st.Gid) == agent.GID {
		return false, nil
	}
	if err := syscall.Chmod(dir, perm&^0o070); err != nil {
		return false, fmt.Errorf("chmod %s: %w", dir, err)
	}
	return true, nil
}
