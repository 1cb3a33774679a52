package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// Labels of the images gymserver makes. Every one carries labelKind; a
// prepared image also carries labelPrepared and labelExecutor, a Dockerfile
// build labelBuild, a snapshot labelSnapshot. Images inherit the labels of
// the image and container they were committed from, so labelKind, set on
// each commit, is what tells them apart.
const (
	// labelKind is KindPrepared, KindBuild or KindSnapshot.
	labelKind = "gymserver.kind"
	// labelExecutor is the SHA-256 of the executor binary in a prepared
	// image.
	labelExecutor = "gymserver.executor"
	// labelBuild marks images built from a Dockerfile with their build key.
	labelBuild = "gymserver.build"
)

// Kinds of cache image, as in CachedImage.Kind and the gymserver.kind label.
const (
	KindPrepared = "prepared"
	KindBuild    = "build"
	KindSnapshot = "snapshot"
)

// Reasons an image is a candidate for removal, as in Removed.Reason;
// ReasonAll (see reap.go) is one too.
const (
	ReasonStaleExecutor = "stale executor"
	ReasonDangling      = "dangling"
	ReasonOverCap       = "over cap"
)

// DefaultImageCacheMinIdle is the default of Options.ImageCacheMinIdle: a
// provider never removes an image used this recently.
const DefaultImageCacheMinIdle = 30 * time.Minute

// touchInterval is how often a provider marks the images it holds as used,
// well inside DefaultImageCacheMinIdle, so that other processes' pruning
// leaves them alone.
const touchInterval = DefaultImageCacheMinIdle / 3

// CachedImage is an image gymserver made: a prepared image, a Dockerfile
// build or a snapshot.
type CachedImage struct {
	// Ref is the image's first tag; empty for a dangling image.
	Ref string `json:"ref"`
	// Refs are all its tags.
	Refs []string `json:"refs,omitempty"`
	// ID is the engine's image id.
	ID string `json:"id"`
	// Kind is KindPrepared, KindBuild or KindSnapshot.
	Kind string `json:"kind"`
	// Size is what the image adds to its parent image (the base image, for
	// a prepared image): about what removing it frees.
	Size int64 `json:"size"`
	// VirtualSize counts the parent's layers too, as `docker images` does.
	VirtualSize int64 `json:"virtual_size"`
	// Created is when the image was made.
	Created gym.Time `json:"created"`
	// LastUsed is the later of when the image was last tagged (made, or
	// found in the cache by Prepare, which re-tags it) and when the newest
	// container still using it was created.
	LastUsed gym.Time `json:"last_used"`
	// Executor is the hash of the executor binary in a prepared image.
	Executor string `json:"executor,omitempty"`
	// Owner is the provider that made a snapshot.
	Owner string `json:"owner,omitempty"`
	// InUse is whether a container, running or stopped, uses the image.
	InUse bool `json:"in_use"`
	// UsedBy are the short ids of those containers.
	UsedBy []string `json:"used_by,omitempty"`
	// Children are the ids of the images whose parent this image is (a
	// prepared image built on a Dockerfile build, a snapshot of a prepared
	// image); removing it would free nothing while they exist.
	Children []string `json:"children,omitempty"`
}

// kindOf tells the kind of a gymserver image from its labels, or "" for
// other images. Images made before labelKind existed have none; then the
// most specific marker wins, since a snapshot inherits labelPrepared and
// a prepared image labelBuild.
func kindOf(labels map[string]string) string {
	switch k := labels[labelKind]; k {
	case KindPrepared, KindBuild, KindSnapshot:
		return k
	}
	switch {
	case labels[labelSnapshot] != "":
		return KindSnapshot
	case labels[labelPrepared] != "":
		return KindPrepared
	case labels[labelBuild] != "":
		return KindBuild
	}
	return ""
}

// ListCache returns every gymserver cache image (prepared, build and
// snapshot) that carries all of labels ("key" or "key=value"), most
// recently used first, with the containers that use each.
func ListCache(ctx context.Context, cli *client.Client, labels ...string) ([]CachedImage, error) {
	all, err := cli.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("docker: list images: %w", err)
	}
	containers, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("docker: list containers: %w", err)
	}
	users := map[string][]string{}
	newest := map[string]time.Time{}
	for _, c := range containers {
		users[c.ImageID] = append(users[c.ImageID], shortID(c.ID))
		if t := time.Unix(c.Created, 0); t.After(newest[c.ImageID]) {
			newest[c.ImageID] = t
		}
	}
	sizes := map[string]int64{}
	children := map[string][]string{}
	for _, img := range all {
		sizes[img.ID] = img.Size
		if img.ParentID != "" {
			children[img.ParentID] = append(children[img.ParentID], img.ID)
		}
	}
	var out []CachedImage
	for _, img := range all {
		kind := kindOf(img.Labels)
		if kind == "" || !hasLabels(img.Labels, labels) {
			continue
		}
		c := CachedImage{
			ID:          img.ID,
			Refs:        realTags(img.RepoTags),
			Kind:        kind,
			Size:        img.Size,
			VirtualSize: img.Size,
			Created:     gym.TimeOf(time.Unix(img.Created, 0)),
			UsedBy:      users[img.ID],
			Children:    children[img.ID],
		}
		if len(c.Refs) > 0 {
			c.Ref = c.Refs[0]
		}
		if kind == KindPrepared {
			c.Executor = img.Labels[labelExecutor]
		}
		if kind == KindSnapshot {
			c.Owner = img.Labels[sandbox.LabelOwner]
		}
		c.InUse = len(c.UsedBy) > 0
		if img.ParentID != "" {
			parent, ok := sizes[img.ParentID]
			if !ok {
				if info, err := cli.ImageInspect(ctx, img.ParentID); err == nil {
					parent, ok = info.Size, true
				}
			}
			if ok && parent <= img.Size {
				c.Size = img.Size - parent
			}
		}
		// The engine keeps when an image was last tagged; Prepare re-tags
		// the images it finds in the cache, so this is the LRU clock.
		info, err := cli.ImageInspect(ctx, img.ID)
		switch {
		case isNotFound(err):
			continue // removed meanwhile
		case err != nil:
			return nil, fmt.Errorf("docker: inspect image %s: %w", shortID(img.ID), err)
		}
		c.LastUsed = gym.TimeOf(info.Metadata.LastTagTime)
		if c.LastUsed.IsZero() {
			c.LastUsed = c.Created
		}
		if t := newest[img.ID]; t.After(c.LastUsed.Time) {
			c.LastUsed = gym.TimeOf(t)
		}
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastUsed.After(out[j].LastUsed.Time) })
	return out, nil
}

// realTags drops the "<none>:<none>" tag the engine reports for dangling
// images.
func realTags(tags []string) []string {
	var out []string
	for _, t := range tags {
		if t != "<none>:<none>" {
			out = append(out, t)
		}
	}
	return out
}

// hasLabels reports whether have carries every one of want ("key" or
// "key=value").
func hasLabels(have map[string]string, want []string) bool {
	f := filters.NewArgs()
	for _, w := range want {
		f.Add("label", w)
	}
	return f.MatchKVList("label", have)
}

// PruneOptions configure PruneCache. An image becomes a candidate for
// removal by All, Dangling, StaleExecutor or the caps; a candidate is
// kept, and reported with the reason, when a container uses it, Keep
// holds it, a remaining image is built on it, or it was used within
// MinIdle.
type PruneOptions struct {
	// All makes every cache image a candidate, snapshots included.
	All bool
	// Dangling makes cache images that lost their tag candidates.
	Dangling bool
	// StaleExecutor, when set, makes candidates of the prepared images
	// whose executor label differs from it (or that have none: they
	// predate the label, hence come from an older build).
	StaleExecutor string
	// MaxImages and MaxBytes cap the prepared and build images (not
	// snapshots, which their provider removes): the least recently used
	// go first until both caps hold. 0 means no cap. Images that must stay
	// count towards the caps, so the caps may stay exceeded.
	MaxImages int
	MaxBytes  int64
	// MinIdle keeps every image used (see CachedImage.LastUsed) more
	// recently than this long ago. A provider marks the images it holds
	// as used every few minutes, so a MinIdle of several minutes keeps
	// what other live servers hold.
	MinIdle time.Duration
	// Keep, when set, keeps the images for which it returns true, e.g.
	// those a process holds.
	Keep func(CachedImage) bool
	// Labels, as "key" or "key=value", narrow pruning to images that
	// carry all of them.
	Labels []string
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	// Logger receives a record per removal; nil discards them.
	Logger *slog.Logger
}

// Removed is an image PruneCache removed (or would remove, with
// PruneOptions.DryRun), or one it kept although it was a candidate.
type Removed struct {
	CachedImage
	// Reason is why the image is a candidate: ReasonAll, ReasonDangling,
	// ReasonStaleExecutor or ReasonOverCap.
	Reason string `json:"reason"`
	// Kept, when set, says why the image stays, e.g. "in use by container
	// 0123456789ab"; empty means it was removed.
	Kept string `json:"kept,omitempty"`
}

// PruneCache removes gymserver cache images as opts ask and returns what it
// removed and what it kept although asked to remove it. It never removes
// an image a container uses, running or stopped: that is checked when the
// images are listed and again by the engine, which refuses to remove such
// an image. An image already gone counts as removed.
func PruneCache(ctx context.Context, cli *client.Client, opts PruneOptions) ([]Removed, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	list, err := ListCache(ctx, cli, opts.Labels...)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	// gone marks the images removed in this run; children of an image
	// count only while they remain.
	gone := map[string]bool{}
	keepReason := func(img CachedImage) string {
		switch {
		case img.InUse:
			return "in use by container " + img.UsedBy[0]
		case opts.Keep != nil && opts.Keep(img):
			return "held by this process"
		}
		for _, c := range img.Children {
			if !gone[c] {
				return "parent of image " + shortID(trimDigest(c))
			}
		}
		if idle := now.Sub(img.LastUsed.Time); opts.MinIdle > 0 && idle < opts.MinIdle {
			return fmt.Sprintf("used %s ago", idle.Round(time.Second))
		}
		return ""
	}
	var out []Removed
	var errs []error
	// at is where an image is reported in out; failed are the images the
	// engine did not remove.
	at := map[string]int{}
	failed := map[string]bool{}
	// try removes img unless something keeps it, and reports the outcome
	// (again, if it was kept before); it returns whether img went.
	try := func(img CachedImage, reason string) bool {
		kept := keepReason(img)
		if i, ok := at[img.ID]; ok && kept != "" {
			out[i].Kept = kept
			return false
		}
		if kept == "" && !opts.DryRun {
			var err error
			if kept, err = removeCached(ctx, cli, img); err != nil {
				errs = append(errs, err)
				kept = "removal failed"
			}
			failed[img.ID] = kept != ""
		}
		if i, ok := at[img.ID]; ok {
			out[i].Kept = kept
		} else {
			at[img.ID] = len(out)
			out = append(out, Removed{CachedImage: img, Reason: reason, Kept: kept})
		}
		if kept != "" {
			log.Debug("kept cached image", "image", displayRef(img), "reason", reason, "kept", kept)
			return false
		}
		gone[img.ID] = true
		if !opts.DryRun {
			log.Info("removed cached image", "image", displayRef(img), "kind", img.Kind, "reason", reason, "size", img.Size)
		}
		return true
	}

	// Children before parents (a child is always newer), so that a parent
	// whose children all go can go too.
	byCreated := append([]CachedImage(nil), list...)
	sort.SliceStable(byCreated, func(i, j int) bool { return byCreated[i].Created.After(byCreated[j].Created.Time) })
	for _, img := range byCreated {
		switch {
		case opts.All:
			try(img, ReasonAll)
		case opts.Dangling && img.Ref == "":
			try(img, ReasonDangling)
		case opts.StaleExecutor != "" && img.Kind == KindPrepared && img.Executor != opts.StaleExecutor:
			try(img, ReasonStaleExecutor)
		}
	}

	if opts.MaxImages <= 0 && opts.MaxBytes <= 0 {
		return out, errors.Join(errs...)
	}
	// The caps: least recently used first (list is most recent first).
	var capped []CachedImage
	var count int
	var size int64
	for i := len(list) - 1; i >= 0; i-- {
		if img := list[i]; img.Kind != KindSnapshot && !gone[img.ID] {
			capped = append(capped, img)
			count++
			size += img.Size
		}
	}
	over := func() bool {
		return (opts.MaxImages > 0 && count > opts.MaxImages) || (opts.MaxBytes > 0 && size > opts.MaxBytes)
	}
	// Removing an image may free its parent, passed over before: walk
	// again while that happens.
	for progress := true; progress; {
		progress = false
		for _, img := range capped {
			if !over() {
				break
			}
			if gone[img.ID] || failed[img.ID] {
				continue
			}
			if try(img, ReasonOverCap) {
				count--
				size -= img.Size
				progress = true
			}
		}
	}
	return out, errors.Join(errs...)
}

// removeCached removes every tag of img, or img itself when it has none,
// without force: the engine refuses to remove an image a container uses,
// which closes the race with a container created since the listing. It
// returns why the image stays if the engine refused.
func removeCached(ctx context.Context, cli *client.Client, img CachedImage) (kept string, err error) {
	refs := img.Refs
	if len(refs) == 0 {
		refs = []string{img.ID}
	}
	for _, ref := range refs {
		_, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
		switch {
		case err == nil || isNotFound(err):
		case errdefs.IsConflict(err):
			return "the engine refused: " + err.Error(), nil
		default:
			return "", fmt.Errorf("docker: remove image %s: %w", ref, err)
		}
	}
	return "", nil
}

// displayRef names an image for people: its tag, or its short id.
func displayRef(img CachedImage) string {
	if img.Ref != "" {
		return img.Ref
	}
	return "<none>@" + shortID(trimDigest(img.ID))
}

// trimDigest drops the "sha256:" of an image id.
func trimDigest(id string) string {
	if len(id) > 7 && id[:7] == "sha256:" {
		return id[7:]
	}
	return id
}

// ExecutorHash returns the hex SHA-256 of the executor binary at path, the
// value of the gymserver.executor label of the images a provider with that
// binary prepares.
func ExecutorHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// imageCache is what a provider knows of the image cache: the prepared
// images it handed out. Environments keep the reference Prepare returned
// and start sandboxes from it for as long as they live, so each of these
// stays in use until the provider closes.
type imageCache struct {
	// mu guards the fields below.
	mu   sync.Mutex
	held map[string]bool
}

// hold records that the provider handed out ref.
func (c *imageCache) hold(ref string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = map[string]bool{}
	}
	c.held[ref] = true
}

// heldRefs returns the references the provider handed out.
func (c *imageCache) heldRefs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.held))
	for ref := range c.held {
		out = append(out, ref)
	}
	return out
}

// holds reports whether ref is an image the provider uses: one Prepare
// returned, a snapshot, or a dropped snapshot still in use.
func (p *Provider) holds(ref string) bool {
	p.cache.mu.Lock()
	held := p.cache.held[ref]
	p.cache.mu.Unlock()
	if held {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshots[ref] || p.dropped[ref]
}

// keepImage is the PruneOptions.Keep of the provider's own pruning.
func (p *Provider) keepImage(img CachedImage) bool {
	for _, ref := range img.Refs {
		if p.holds(ref) {
			return true
		}
	}
	return false
}

// cacheMinIdle is Options.ImageCacheMinIdle with its default.
func (p *Provider) cacheMinIdle() time.Duration {
	switch d := p.opts.ImageCacheMinIdle; {
	case d == 0:
		return DefaultImageCacheMinIdle
	case d < 0:
		return 0
	default:
		return d
	}
}

// pruneOptions returns the options of the provider's own pruning.
func (p *Provider) pruneOptions() PruneOptions {
	return PruneOptions{
		MinIdle: p.cacheMinIdle(),
		Keep:    p.keepImage,
		Labels:  p.opts.ImageCacheLabels,
		Logger:  p.log,
	}
}

// pruneStaleImages removes the prepared images of other executor builds
// that nothing uses; New calls it, since every rebuild of the executor
// makes a new set of prepared images.
func (p *Provider) pruneStaleImages(ctx context.Context) {
	opts := p.pruneOptions()
	opts.StaleExecutor = p.execHash
	removed, err := PruneCache(ctx, p.cli, opts)
	if err != nil {
		p.log.Warn("removing prepared images of older executors failed", "err", err)
	}
	var n int
	var bytes int64
	for _, r := range removed {
		if r.Kept == "" {
			n++
			bytes += r.Size
		}
	}
	if n > 0 {
		p.log.Info("removed prepared images of older executors", "images", n, "bytes", bytes)
	}
	vols, err := PruneUsrVolumes(ctx, p.cli, VolumeMinAge)
	if err != nil {
		p.log.Warn("removing shared /usr volumes of removed images failed", "err", err)
	}
	if len(vols) > 0 {
		p.log.Info("removed shared /usr volumes of removed images", "volumes", vols)
	}
	vols, err = PruneExecutorVolumes(ctx, p.cli, p.execHash, VolumeMinAge)
	if err != nil {
		p.log.Warn("removing executor volumes of older executors failed", "err", err)
	}
	if len(vols) > 0 {
		p.log.Info("removed executor volumes of older executors", "volumes", vols)
	}
}

// enforceCacheCap removes the least recently used cache images beyond
// Options.ImageCacheMaxImages and ImageCacheMaxBytes, never those the
// provider uses; Prepare calls it after each build.
func (p *Provider) enforceCacheCap(ctx context.Context) {
	if p.opts.ImageCacheMaxImages <= 0 && p.opts.ImageCacheMaxBytes <= 0 {
		return
	}
	opts := p.pruneOptions()
	opts.MaxImages = p.opts.ImageCacheMaxImages
	opts.MaxBytes = p.opts.ImageCacheMaxBytes
	if _, err := PruneCache(ctx, p.cli, opts); err != nil {
		p.log.Warn("enforcing the image cache cap failed", "err", err)
	}
}

// touchImage marks ref as used now by tagging it again with its own name;
// the engine records the time as the image's LastTagTime.
func (p *Provider) touchImage(ctx context.Context, ref string) error {
	return p.cli.ImageTag(ctx, ref, ref)
}

// keepTouching marks the images the provider holds as used every
// touchInterval until the provider closes, so that other processes'
// pruning (PruneOptions.MinIdle) leaves them alone while no sandbox runs
// from them. New starts it; Close waits for it.
func (p *Provider) keepTouching() {
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		tick := time.NewTicker(touchInterval)
		defer tick.Stop()
		for {
			select {
			case <-p.bgCtx.Done():
				return
			case <-tick.C:
			}
			for _, ref := range p.cache.heldRefs() {
				ctx, cancel := context.WithTimeout(p.bgCtx, removeTimeout)
				if err := p.touchImage(ctx, ref); err != nil && p.bgCtx.Err() == nil {
					p.log.Debug("marking a held image as used", "image", ref, "err", err)
				}
				cancel()
			}
		}
	}()
}
