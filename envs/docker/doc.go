// Package docker is the Docker Engine backend of the sandbox interface.
//
// Every sandbox is one hardened container (non-root, no network, memory,
// CPU and pids limits, no-new-privileges, all capabilities dropped) whose
// main process idles, with one long-lived executor attached over a docker
// exec stream that runs the commands and file operations. Containers are
// labelled with the owning provider's id and a lease, and a provider reaps
// containers of dead owners when it starts.
package docker
