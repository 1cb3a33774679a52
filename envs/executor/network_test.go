package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// procNetDev returns a /proc/net/dev text listing ifaces.
func procNetDev(ifaces ...string) []byte {
	var b strings.Builder
	b.WriteString("Inter-|   Receive                                                |  Transmit\n")
	b.WriteString(" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n")
	for _, name := range ifaces {
		b.WriteString("  " + name + ":       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n")
	}
	return []byte(b.String())
}

// TestSetUpNoNetwork checks the executor's --no-network set-up: with only
// loopback it writes mode "none"'s hosts file, replacing a link of the
// image rather than writing through it; with any other interface it
// refuses and writes nothing; a text it cannot read is refused.
func TestSetUpNoNetwork(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, hosts); err != nil {
		t.Fatal(err)
	}
	if err := setUpNoNetwork(procNetDev("lo"), hosts); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(hosts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(hosts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got), "127.0.0.1\tlocalhost\n::1\tlocalhost") || st.Mode() != 0o644 {
		t.Errorf("hosts %q mode %v: want the localhost entries, a plain file of mode 644", got, st.Mode())
	}
	if kept, _ := os.ReadFile(target); string(kept) != "keep\n" {
		t.Errorf("the link's target was written: %q", kept)
	}

	other := filepath.Join(dir, "other-hosts")
	err = setUpNoNetwork(procNetDev("lo", "eth0"), other)
	if err == nil || !strings.Contains(err.Error(), `"eth0"`) {
		t.Errorf("with eth0: %v, want a refusal naming it", err)
	}
	if _, serr := os.Stat(other); !os.IsNotExist(serr) {
		t.Errorf("a refused set-up wrote %s", other)
	}
	for _, bad := range [][]byte{nil, []byte("header\nheader\nno colon here\n")} {
		if err := setUpNoNetwork(bad, other); err == nil {
			t.Errorf("/proc/net/dev %q accepted", bad)
		}
	}
}
