package envs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// servicePoll is how often the evaluator looks for a service's port.
const servicePoll = 50 * time.Millisecond

// startServices starts the environment's services (config.Service) for one
// unit_tests command and waits until each one's port is listened on, its
// process has exited, or its startup_timeout has passed. The services run
// as the agent's uid, never with the machinery's rights: they are the
// agent's code. A service that does not come up is the agent's doing: it
// is reported in the returned notes, which head the command's output, and
// the tests run anyway (and fail). An error is a failure of the sandbox or
// the end of ctx.
func (t *task) startServices(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	if len(t.cfg.Services) == 0 {
		return "", nil
	}
	pids := make([]int, len(t.cfg.Services))
	starts := make([]time.Time, len(t.cfg.Services))
	for i, s := range t.cfg.Services {
		starts[i] = time.Now()
		r, err := sb.Exec(ctx, sandbox.ExecRequest{
			Argv:       []string{"/bin/sh", "-c", s.Command},
			Dir:        t.cfg.WorkingDirectory,
			Background: true,
		})
		if err != nil {
			return "", fmt.Errorf("start service %s: %w", s.Name, err)
		}
		pids[i] = r.PID
	}
	var notes strings.Builder
	for i, s := range t.cfg.Services {
		if s.Port == 0 {
			fmt.Fprintf(&notes, "service %s: started (%s)\n", s.Name, s.Command)
			continue
		}
		state, err := waitListening(ctx, sb, s.Port, pids[i], starts[i].Add(s.StartupTimeout))
		if err != nil {
			return "", fmt.Errorf("service %s: %w", s.Name, err)
		}
		waited := time.Since(starts[i]).Round(10 * time.Millisecond)
		switch state {
		case serviceListening:
			fmt.Fprintf(&notes, "service %s: listening on port %d after %s (%s)\n", s.Name, s.Port, waited, s.Command)
		case serviceExited:
			fmt.Fprintf(&notes, "service %s: exited after %s without listening on port %d (%s)\n", s.Name, waited, s.Port, s.Command)
		default:
			fmt.Fprintf(&notes, "service %s: nothing listened on port %d within %s (startup_timeout; %s)\n", s.Name, s.Port, s.StartupTimeout, s.Command)
		}
		t.log.Info("evaluation service", "service", s.Name, "port", s.Port, "state", state.String(), "waited", waited)
	}
	return notes.String(), nil
}

// serviceState is how a wait for a service's port ended.
type serviceState int

const (
	serviceTimedOut serviceState = iota
	serviceListening
	serviceExited
)

func (s serviceState) String() string {
	switch s {
	case serviceListening:
		return "listening"
	case serviceExited:
		return "exited"
	}
	return "timed_out"
}

// waitListening polls the sandbox's TCP tables until a socket listens on
// port, until the process pid is gone, or until deadline. It reads
// /proc/net/tcp and /proc/net/tcp6 with the agent's rights, so it needs
// nothing from the image. The tables are the kernel's, so only a process
// that really listens counts; no process of the agent's survives from the
// episode to pretend to.
func waitListening(ctx context.Context, sb sandbox.Sandbox, port, pid int, deadline time.Time) (serviceState, error) {
	tick := time.NewTicker(servicePoll)
	defer tick.Stop()
	for {
		listening, err := portListening(ctx, sb, port)
		if err != nil {
			return 0, err
		}
		if listening {
			return serviceListening, nil
		}
		if pid > 0 {
			_, err := sb.ReadFile(ctx, "/proc/"+strconv.Itoa(pid)+"/stat", 4096)
			if sandbox.IsNotExist(err) {
				// It may have bound the port just before it exited.
				if listening, err := portListening(ctx, sb, port); err != nil || listening {
					return serviceListening, err
				}
				return serviceExited, nil
			}
		}
		if !time.Now().Before(deadline) {
			return serviceTimedOut, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
}

// portListening reports whether a TCP socket (IPv4 or IPv6) listens on
// port in the sandbox. A table that does not exist (no IPv6) is empty.
func portListening(ctx context.Context, sb sandbox.Sandbox, port int) (bool, error) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := sb.ReadFile(ctx, table, 16<<20)
		switch {
		case sandbox.IsNotExist(err):
			continue
		case err != nil && !errors.Is(err, sandbox.ErrTooLarge):
			return false, fmt.Errorf("read %s: %w", table, err)
		}
		if listensOn(data, port) {
			return true, nil
		}
	}
	return false, nil
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// listensOn reports whether a /proc/net/tcp table (a header line, then
// "sl local_address rem_address st ...", addresses as HEXIP:HEXPORT) has a
// socket in the LISTEN state on port.
func listensOn(table []byte, port int) bool {
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			return true
		}
	}
	return false
}
