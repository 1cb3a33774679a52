package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// Reasons a container or snapshot image is reaped, as in Reaped.Reason.
const (
	ReasonOwnerGone    = "owner gone"
	ReasonLeaseExpired = "lease expired"
	ReasonAll          = "all"
)

// ReapOptions configure ReapOrphans.
type ReapOptions struct {
	// Keep is an owner whose containers and images are never reaped,
	// typically the caller's own provider.
	Keep string
	// All reaps every container and snapshot image labelled by gymserver,
	// whatever its owner and lease, including those of running servers.
	All bool
	// DryRun reports what would be reaped and removes nothing.
	DryRun bool
	// Labels, as "key" or "key=value", narrow the reaping to containers
	// and images that carry all of them.
	Labels []string
	// Logger receives a record per removal; nil discards them.
	Logger *slog.Logger
}

// Reaped is a container or snapshot image that ReapOrphans removed, or
// would remove with ReapOptions.DryRun.
type Reaped struct {
	// Kind is "container" or "image".
	Kind string `json:"kind"`
	// ID is the engine's id of the container or image.
	ID string `json:"id"`
	// Ref is the image's first tag; empty for containers.
	Ref string `json:"ref,omitempty"`
	// Owner is the gymserver.owner label.
	Owner string `json:"owner"`
	// Reason is one of ReasonOwnerGone, ReasonLeaseExpired and ReasonAll.
	Reason string `json:"reason"`
}

// ReapOrphans removes the containers, then the snapshot images, labelled
// by a provider that is gone (see Options.Owner) or whose lease has passed,
// or with ReapOptions.All every one of them. It never touches unlabelled
// containers nor prepared images, which are a cache shared by all
// providers. It returns what it removed, and the errors of the removals
// that failed; a container or image already gone counts as removed.
// It needs no executor binary, unlike New.
func ReapOrphans(ctx context.Context, cli *client.Client, opts ReapOptions) ([]Reaped, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := time.Now()
	var out []Reaped
	var errs []error
	containers, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: labelFilter(sandbox.LabelOwner, opts.Labels)})
	if err != nil {
		return nil, fmt.Errorf("docker: list containers: %w", err)
	}
	for _, c := range containers {
		owner := c.Labels[sandbox.LabelOwner]
		reason := reapReason(opts, owner, c.Labels[sandbox.LabelLease], now)
		if reason == "" {
			continue
		}
		if !opts.DryRun {
			log.Info("reaping orphaned container", "container", shortID(c.ID), "owner", owner, "reason", reason)
			if err := removeContainer(ctx, cli, c.ID); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		out = append(out, Reaped{Kind: "container", ID: c.ID, Owner: owner, Reason: reason})
	}
	images, err := listSnapshots(ctx, cli, opts.Labels...)
	if err != nil {
		return out, errors.Join(append(errs, err)...)
	}
	for _, img := range images {
		owner := img.Labels[sandbox.LabelOwner]
		reason := reapReason(opts, owner, img.Labels[sandbox.LabelLease], now)
		if reason == "" {
			continue
		}
		r := Reaped{Kind: "image", ID: img.ID, Owner: owner, Reason: reason}
		if len(img.RepoTags) > 0 {
			r.Ref = img.RepoTags[0]
		}
		if !opts.DryRun {
			log.Info("reaping orphaned snapshot image", "image", r.Ref, "owner", owner, "reason", reason)
			if err := removeImage(ctx, cli, img.ID); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// openOwners holds the owners of this process's providers that are not
// closed: a second provider on the same engine must not take the first
// one's containers for an earlier process's.
var openOwners sync.Map

// reapReason says why a container or image with the given owner and lease
// labels is to be reaped, or "" if it is not.
func reapReason(opts ReapOptions, owner, leaseLabel string, now time.Time) string {
	switch {
	case opts.Keep != "" && owner == opts.Keep:
		return ""
	case opts.All:
		return ReasonAll
	case ownerGone(owner):
		return ReasonOwnerGone
	}
	if lease, _ := strconv.ParseInt(leaseLabel, 10, 64); lease > 0 && lease < now.Unix() {
		return ReasonLeaseExpired
	}
	return ""
}

// ownerGone reports whether the provider that wrote owner has ended: it ran
// on this host under a pid that is gone or now belongs to someone else.
// Owners of other hosts, and owners not in the "<host>:<pid>:<random>"
// form, are never gone; their leases bound them.
func ownerGone(owner string) bool {
	parts := strings.Split(owner, ":")
	if len(parts) != 3 {
		return false
	}
	host, _ := os.Hostname()
	if parts[0] != host {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	if pid == os.Getpid() {
		// A provider of this process, or an earlier process with our pid.
		_, open := openOwners.Load(owner)
		return !open
	}
	return processGone(pid)
}

// processGone reports whether no process of this host has pid.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// removeWaitPoll is how often removeContainer looks whether a removal the
// engine runs already has finished.
const removeWaitPoll = 100 * time.Millisecond

// removeContainer force-removes a container. A container already gone is
// fine, and so is one the engine is removing already (a 409 conflict, e.g.
// an auto-removed container whose main process exited): then it waits,
// within removeTimeout, until the container is gone, so that callers that
// list containers next do not see it.
func removeContainer(ctx context.Context, cli *client.Client, id string) error {
	err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil || isNotFound(err):
		return nil
	case !errdefs.IsConflict(err):
		return fmt.Errorf("docker: remove container %s: %w", shortID(id), err)
	}
	ctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	tick := time.NewTicker(removeWaitPoll)
	defer tick.Stop()
	for {
		if _, ierr := cli.ContainerInspect(ctx, id); isNotFound(ierr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("docker: remove container %s: still there after the engine began removing it: %w", shortID(id), err)
		case <-tick.C:
		}
	}
}

// labelFilter selects what carries the label key and every one of labels.
func labelFilter(key string, labels []string) filters.Args {
	f := filters.NewArgs(filters.Arg("label", key))
	for _, l := range labels {
		f.Add("label", l)
	}
	return f
}

// listSnapshots lists the images Commit made, of every provider, that carry
// every one of labels.
func listSnapshots(ctx context.Context, cli *client.Client, labels ...string) ([]image.Summary, error) {
	list, err := cli.ImageList(ctx, image.ListOptions{Filters: labelFilter(labelSnapshot, labels)})
	if err != nil {
		return nil, fmt.Errorf("docker: list snapshot images: %w", err)
	}
	return list, nil
}

// removeImage removes an image by reference or id, in use or not; an image
// already gone is fine.
func removeImage(ctx context.Context, cli *client.Client, ref string) error {
	_, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("docker: remove image %s: %w", ref, err)
	}
	return nil
}
