package docker_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// netProbe is run by python3 in a sandbox: it prints the interfaces, the
// network namespace, whether "localhost" resolves to 127.0.0.1 and a
// loopback connection works, and whether a TCP connection to the host's
// listener at sys.argv[1] (host:port) succeeds.
const netProbe = `
import os, socket, sys, threading
print("ifaces", ",".join(sorted(os.listdir("/sys/class/net"))))
print("netns", os.readlink("/proc/self/ns/net"))
print("localhost", socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4][0])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
threading.Thread(target=lambda: srv.accept()[0].sendall(b"lo-ok"), daemon=True).start()
print("loopback", socket.create_connection(srv.getsockname(), timeout=5).recv(5).decode())
host, port = sys.argv[1].rsplit(":", 1)
try:
    socket.create_connection((host, int(port)), timeout=3).close()
    print("host reached")
except OSError as e:
    print("host unreachable", e.errno)
`

// probeNetwork runs netProbe in sb against target and returns its lines by
// their first word.
func probeNetwork(t *testing.T, sb sandbox.Sandbox, target string) map[string]string {
	t.Helper()
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", netProbe, target}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("probe exit %d: %s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(r.Stdout)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		out[k] = v
	}
	return out
}

// TestSandboxNetwork checks a sandbox without a network (the default),
// whose container the engine creates with its network disabled: it has
// only loopback, which works, "localhost" resolves, its network namespace
// is neither the host's nor another sandbox's, and it cannot reach a
// listener on the host's bridge address, which a sandbox on the engine's
// "bridge" network (the twin, which shows the probe can see a network)
// reaches. The agent cannot rewrite /etc/hosts.
func TestSandboxNetwork(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	gateway := bridgeAddress(t, cli)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := fmt.Sprintf("%s:%d", gateway, ln.Addr().(*net.TCPAddr).Port)
	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}

	a := baseSandbox(t, p, sandbox.Spec{})
	b := baseSandbox(t, p, sandbox.Spec{})
	info, err := cli.ContainerInspect(ctx, a.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !info.Config.NetworkDisabled || info.HostConfig.NetworkMode != "none" {
		t.Errorf("network disabled %v, mode %q: want the engine's network set-up skipped in mode none",
			info.Config.NetworkDisabled, info.HostConfig.NetworkMode)
	}
	pa, pb := probeNetwork(t, a, target), probeNetwork(t, b, target)
	if pa["ifaces"] != "lo" || pa["localhost"] != "127.0.0.1" || pa["loopback"] != "lo-ok" ||
		!strings.HasPrefix(pa["host"], "unreachable") {
		t.Errorf("a sandbox without a network: %v", pa)
	}
	if pa["netns"] == "" || pa["netns"] == hostNS || pa["netns"] == pb["netns"] {
		t.Errorf("network namespaces: sandbox a %q, sandbox b %q, host %q: want one of its own each", pa["netns"], pb["netns"], hostNS)
	}
	r, err := a.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "stat -c '%u %a' /etc/hosts; echo '6.6.6.6 localhost' > /etc/hosts"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Stdout) != "0 644\n" || r.ExitCode == 0 {
		t.Errorf("/etc/hosts: owner and mode %q, the agent's write exit %d: want root's 644, the write refused", r.Stdout, r.ExitCode)
	}

	// The twin: on the engine's bridge network the same probe reaches the
	// host.
	c := baseSandbox(t, p, sandbox.Spec{Network: "bridge"})
	info, err = cli.ContainerInspect(ctx, c.ID())
	if err != nil {
		t.Fatal(err)
	}
	pc := probeNetwork(t, c, target)
	if info.Config.NetworkDisabled || pc["host"] != "reached" || !strings.Contains(pc["ifaces"], "eth0") || pc["localhost"] != "127.0.0.1" {
		t.Errorf("a sandbox on the bridge network: network disabled %v, probe %v", info.Config.NetworkDisabled, pc)
	}
}

// bridgeAddress returns the host's address on the engine's "bridge"
// network: the host address inside the network's subnet.
func bridgeAddress(t *testing.T, cli *client.Client) net.IP {
	t.Helper()
	bridge, err := cli.NetworkInspect(t.Context(), "bridge", network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range bridge.IPAM.Config {
		_, subnet, err := net.ParseCIDR(c.Subnet)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && subnet.Contains(ip.IP) {
				return ip.IP
			}
		}
	}
	t.Fatalf("no host address in the bridge network's subnets %+v", bridge.IPAM.Config)
	return nil
}

// TestNoNetworkRefused runs the executor of a prepared image with
// --no-network in a container that has a network (the engine's bridge),
// as an engine that ignored NetworkDisabled would: it must refuse to
// serve, name the interface, and leave the engine's /etc/hosts alone.
func TestNoNetworkRefused(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: image, User: "0:0",
		Cmd:    []string{"/bin/sh", "-c", "/.gymserver/executor serve --no-network </dev/null; echo exit=$?; cat /etc/hosts"},
		Labels: map[string]string{sandbox.LabelOwner: p.Owner()}},
		&container.HostConfig{NetworkMode: "bridge"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	runToExit(t, cli, c.ID)
	logs, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if _, err := stdcopy.StdCopy(&out, &errOut, logs); err != nil {
		t.Fatal(err)
	}
	// The engine's hosts file of a bridge container names the container.
	if !strings.Contains(out.String(), "exit=1") || !strings.Contains(errOut.String(), `interface "eth0"`) ||
		!strings.Contains(out.String(), c.ID[:12]) {
		t.Errorf("executor --no-network on the bridge network: stdout %q, stderr %q: want a refusal naming eth0, the engine's /etc/hosts kept",
			out.String(), errOut.String())
	}
}

// TestExecutorStartFailureSaid checks that a sandbox whose executor ends
// before it answers (here, given a mode it does not know) fails to start
// with an error that quotes the executor's last message, and leaves no
// container.
func TestExecutorStartFailureSaid(t *testing.T) {
	prep, _ := newProvider(t)
	ctx := t.Context()
	image, err := prep.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	p, cli := dockertest.NewWith(t, docker.Options{ExecutorArgs: []string{"no-such-mode"}})
	sb, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace"})
	if err == nil {
		sb.Close(context.Background())
		t.Fatal("a sandbox whose executor cannot start was made")
	}
	if gym.ClassOf(err) != gym.ClassSandbox || !strings.Contains(err.Error(), `its last message: "executor: unknown mode \"no-such-mode\""`) {
		t.Errorf("error %v (class %v): want a sandbox error quoting the executor's last message", err, gym.ClassOf(err))
	}
	// The container is removed in the background.
	waittest.Until(t, "the container removed", 30*time.Second, func() (bool, error) {
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelOwner+"="+p.Owner()))})
		return len(list) == 0, err
	})
}
