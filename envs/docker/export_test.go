package docker

import "github.com/gymserver/gymserver/envs/sandbox"

// CutStream closes the executor stream of sb, a sandbox of this package,
// and nothing else: the container stays, as when the provider's process is
// killed.
func CutStream(sb sandbox.Sandbox) {
	sb.(*Sandbox).conn.Close()
}

// WithImageCacheLabels returns opts with the provider's own image pruning
// narrowed to images carrying all of labels, so that a test's provider
// leaves alone the images of tests running beside it.
func WithImageCacheLabels(opts Options, labels ...string) Options {
	opts.imageCacheLabels = labels
	return opts
}
