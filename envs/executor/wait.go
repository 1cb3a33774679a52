package executor

import (
	"encoding/binary"
	"os"
	"syscall"
	"unsafe"
)

// The executor waits for its children and for requests through the Go
// runtime's poller rather than in blocking system calls. A goroutine
// blocked in a system call keeps its P (scheduler slot) busy, which keeps
// the runtime's monitor thread (sysmon) polling every 20 µs until it takes
// the P back; with hundreds of executors on two cores, each waking up for
// every step, those polls are a good part of the executor's CPU per step.
// A goroutine parked on the poller leaves the P idle, and sysmon sleeps.

// pidfdSlot returns where os/exec should store a new child's pidfd (see
// syscall.SysProcAttr.PidFD): -1 until the child is started, and -1 after
// if the kernel has no pidfds.
func pidfdSlot() *int {
	fd := -1
	return &fd
}

// closePidfd closes a pidfd os/exec may have stored for a command that
// failed to start (it is -1 when there is none).
func closePidfd(fd int) {
	if fd >= 0 {
		syscall.Close(fd)
	}
}

// Wait options and the id type of waitid(2) that package syscall lacks.
const (
	pPIDFD  = 3          // P_PIDFD
	wNoWait = 0x01000000 // WNOWAIT
)

// awaitExit returns once the process of pidfd has exited, leaving it for
// exec.Cmd.Wait to reap (which then does not block), and closes pidfd. It
// parks on the poller: a pidfd becomes readable when its process exits.
// With pidfd < 0, or if the poller cannot take it, it returns at once and
// Wait blocks as before.
func awaitExit(pidfd int) {
	if pidfd < 0 {
		return
	}
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		syscall.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool { return exited(int(fd)) })
}

// exited says whether the process of pidfd has exited, without reaping it
// (WNOWAIT) and without waiting (WNOHANG). When it cannot tell, it says
// yes, so that the caller goes on to Wait.
func exited(pidfd int) bool {
	// siginfo_t is 128 bytes; si_pid is at offset 16 on 64-bit Linux and
	// stays 0 while no child has changed state.
	var info [128]byte
	_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPIDFD, uintptr(pidfd), uintptr(unsafe.Pointer(&info[0])),
		syscall.WEXITED|syscall.WNOHANG|wNoWait, 0, 0)
	if e == syscall.EINTR {
		return false
	}
	if e != 0 {
		return true
	}
	return binary.NativeEndian.Uint32(info[16:]) != 0
}

// pollableStdin returns the executor's stdin as a file the runtime's
// poller reads (the request stream waits there, not in a blocking read),
// or os.Stdin when its descriptor cannot be polled (e.g. a regular file).
func pollableStdin() *os.File {
	if err := syscall.SetNonblock(0, true); err != nil {
		return os.Stdin
	}
	// NewFile sees the non-blocking flag and registers the descriptor
	// with the poller, or keeps it blocking if the poller refuses it.
	return os.NewFile(0, "/dev/stdin")
}
