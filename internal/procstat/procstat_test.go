package procstat

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestCPU checks CPU against this process's own rusage, that it counts
// finer than /proc/PID/stat's hundredths of a second, and that a process
// that is gone reads 0.
func TestCPU(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// burn spends d of CPU, however long that takes on a busy machine.
	burn := func(d time.Duration) {
		for end := rusage() + d; rusage() < end; {
		}
	}
	fine := false
	for range 3 {
		burn(20 * time.Millisecond)
		before := CPU(os.Getpid())
		self := rusage()
		after := CPU(os.Getpid())
		if self < before-time.Millisecond || self > after+time.Millisecond {
			t.Errorf("CPU %s .. %s, rusage %s: they disagree", before, after, self)
		}
		if before < 20*time.Millisecond {
			t.Errorf("CPU %s after burning 20 ms of CPU", before)
		}
		if before%(10*time.Millisecond) != 0 {
			fine = true
		}
	}
	if !fine {
		t.Error("CPU counted in whole hundredths of a second three times out of three: the fine clock was not read")
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if c := CPU(cmd.Process.Pid); c != 0 {
		t.Errorf("CPU of a process that is gone: %s, want 0", c)
	}
}

// TestFaults checks that touching fresh pages counts as this process's
// faults, and that a process that is gone reads 0.
func TestFaults(t *testing.T) {
	const pages = 256
	mem, err := syscall.Mmap(-1, 0, pages*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	before := Faults(os.Getpid())
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	if got := Faults(os.Getpid()) - before; got < pages {
		t.Errorf("%d faults after touching %d fresh pages", got, pages)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if n := Faults(cmd.Process.Pid); n != 0 {
		t.Errorf("a process that is gone: %d faults", n)
	}
}
