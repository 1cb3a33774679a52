package executor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// isolatedHosts is the /etc/hosts of a sandbox without a network: the
// entries Docker writes for a container of network mode "none".
const isolatedHosts = "127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"ff00::0\tip6-mcastprefix\n" +
	"ff02::1\tip6-allnodes\n" +
	"ff02::2\tip6-allrouters\n"

// setUpNoNetwork prepares a sandbox whose engine was told to leave its
// network alone (Docker's Config.NetworkDisabled): the runtime gives the
// container a network namespace of its own with only loopback, and the
// engine writes no /etc/hosts. It checks, from the interfaces procNetDev
// (the text of /proc/net/dev) lists, that loopback is the only one, so an
// engine that ran the container in a shared namespace is refused rather
// than served; then it writes hosts (/etc/hosts) so that "localhost"
// resolves as with network mode "none".
func setUpNoNetwork(procNetDev []byte, hosts string) error {
	ifaces, err := netInterfaces(procNetDev)
	if err != nil {
		return err
	}
	for _, name := range ifaces {
		if name != "lo" {
			return fmt.Errorf("the sandbox should have no network, but it has the interface %q (interfaces %v)", name, ifaces)
		}
	}
	// A file of the image is replaced, not written through: a link there
	// must not send the write elsewhere. One the engine mounted (an engine
	// that gave the container mode "none"'s set-up after all) is kept.
	if err := os.Remove(hosts); errors.Is(err, syscall.EBUSY) {
		return nil
	} else if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("replace %s: %w", hosts, err)
	}
	f, err := os.OpenFile(hosts, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", hosts, err)
	}
	// Every process reads it, whatever the executor's umask.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", hosts, err)
	}
	if _, err := f.WriteString(isolatedHosts); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", hosts, err)
	}
	return f.Close()
}

// netInterfaces returns the interface names of a /proc/net/dev text: two
// header lines, then one "name: counters" line per interface.
func netInterfaces(procNetDev []byte) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(procNetDev))
	for n := 0; sc.Scan(); n++ {
		if n < 2 {
			continue
		}
		name, _, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			return nil, fmt.Errorf("/proc/net/dev: line %q has no interface name", sc.Text())
		}
		out = append(out, strings.TrimSpace(name))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/net/dev lists no interface")
	}
	return out, sc.Err()
}
