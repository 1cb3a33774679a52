// Package docker is the Docker Engine backend of the sandbox interface.
//
// Every sandbox is one hardened container (non-root, no network, memory,
// CPU and pids limits, no-new-privileges, all capabilities dropped) whose
// main process is one long-lived executor that runs the commands and file
// operations, spoken to over the container's attached stdin and stdout.
// When that stream ends the executor ends, and the container with it, and
// the engine auto-removes it, so a provider killed outright leaves no
// running sandbox behind. A container that prepares an image, driven by
// docker execs, idles instead and ends once no executor has been attached
// for Options.OrphanAfter. Containers and snapshot images
// are labelled with the owning provider's id and a lease; a provider reaps
// those of dead owners when it starts, and ReapOrphans (`gymserver reap`)
// does so on demand. Prepared images are a cache shared by every provider
// on the host, with an LRU clock kept by the engine (see ListCache and
// PruneCache); a provider removes those of other executor builds when it
// starts, and keeps the cache within Options.ImageCacheMaxImages and
// ImageCacheMaxBytes.
package docker
