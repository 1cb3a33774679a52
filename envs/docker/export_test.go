package docker

import "github.com/gymserver/gymserver/envs/sandbox"

// CutStream closes the executor stream of sb, a sandbox of this package,
// and nothing else: the container stays, as when the provider's process is
// killed.
func CutStream(sb sandbox.Sandbox) {
	sb.(*Sandbox).conn.Close()
}
