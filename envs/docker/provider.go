package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"golang.org/x/sync/errgroup"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// executorPath is where the executor binary lives inside prepared images.
const executorPath = "/.gymserver/executor"

// sandboxUser is the user of the agent and of the tests.
const sandboxUser = "1000:1000"

// machineUser is the user of the container's init, its main process and
// the executor: the agent's processes cannot signal, trace or write to them.
const machineUser = "0:0"

// machineCaps are the only capabilities of the container's machinery: act
// as the agent (SETUID, SETGID), stop it (KILL), manage its files and the
// hidden tests whatever their owner (CHOWN, DAC_OVERRIDE, FOWNER), and give
// the executor's own threads the normal scheduling policy back after
// SCHED_IDLE (SYS_NICE; the kernel allows that move without it only to a
// process whose RLIMIT_NICE is 20, and the engine's is 0: see the
// executor's sysmon.go). The agent's processes have none (a non-root uid
// after exec, with no-new-privileges).
var machineCaps = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID", "SYS_NICE"}

// Defaults for Options and sandbox.Resources.
const (
	defaultMemory          = 1 << 30
	defaultCPUs            = 1.0
	defaultPIDs            = 256
	defaultDisk            = 4 << 30
	defaultLease           = 24 * time.Hour
	defaultConcurrentStart = 8
	removeTimeout          = 30 * time.Second
	// closeConcurrency bounds the sandboxes Close removes at once.
	closeConcurrency = 16
)

// Options configure a Provider.
type Options struct {
	// ExecutorBinary is the host path of a static binary that runs the
	// executor (see package executor). Required.
	ExecutorBinary string
	// ExecutorArgs are put before the executor's mode, e.g. {"__executor"}
	// when ExecutorBinary is the gymserver binary.
	ExecutorArgs []string
	// Owner identifies this provider in container labels; empty means
	// "<hostname>:<pid>:<random>", which lets another provider on the same
	// host tell that the owner is gone.
	Owner string
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Client is the Docker client; nil makes one from the environment.
	Client *client.Client
	// MaxConcurrentStarts bounds container starts in flight (default 8).
	MaxConcurrentStarts int
	// Lease is how long a container may live before any provider may reap
	// it (default 24h).
	Lease time.Duration
	// BuildBase, when set, is called for a base image that is neither
	// present nor pullable.
	BuildBase func(ctx context.Context, ref string) error
	// WarmPool is the number of started, idle sandboxes kept ready for
	// each distinct Spec, so that Create returns at once (0: none). The
	// pool for a Spec fills after its first Create.
	WarmPool int
	// CreatedPool is the number of containers created but not started
	// kept for each distinct Spec (0: none), so that a Create that the
	// warm pool does not serve only starts one: the engine's create (the
	// container's writable layer and its record) is done ahead, off the
	// caller's clock. Unlike the warm pool's, these hold no process and
	// no memory. They are removed on Close; if the provider dies they
	// stay, stopped, until the janitor or a Reap removes them.
	CreatedPool int
	// Reuse is the number of closed sandboxes kept, recycled, in all (0:
	// none), for later sessions of the same Spec. A sandbox whose session
	// closes is put back as it started (see executor.Client.Recycle: its
	// processes killed, the places the agent can write restored byte for
	// byte, the hidden tests removed) and serves a later Create, as a warm
	// pool's would, without the engine's stop, remove, create and start.
	// A sandbox that cannot be shown clean (a Priv exec ran in it, the
	// agent can write a mount recycling cannot put back, its places hold
	// more than 16 MiB, or the restore does not match) is removed as
	// usual. When Reuse recycled sandboxes wait already, the one that
	// waited longest is removed; one that waits a minute is removed. A
	// recycled container keeps the gymserver.session label of the first
	// session it served; labels cannot change.
	Reuse int
	// FloatCPUs leaves sandboxes free to run on any core of the engine's
	// host. By default each sandbox is pinned to ceil(CPUs) cores, those
	// serving the fewest sessions, which keeps the scheduler fair between
	// sandboxes when the host is busy (see cpus.go); an engine that
	// refuses a cpuset turns pinning off by itself.
	FloatCPUs bool
	// OrphanAfter is how long a container that prepares an image lives
	// without an attached executor (default 2 minutes; negative:
	// forever). A sandbox needs no such bound: its executor is its main
	// process and ends with its stream, so a sandbox whose provider died,
	// even by SIGKILL, stops at once and the engine removes it, without
	// waiting for another provider to reap it.
	OrphanAfter time.Duration
	// Janitor is the argv of a process New starts to remove this
	// provider's containers and snapshot images once the provider is
	// gone, even killed with SIGKILL: e.g. {"/path/to/gymserver",
	// "__janitor"}, which runs RunJanitor. New appends "--owner" and the
	// owner id, which must then be this provider's alone. Empty: no
	// janitor.
	Janitor []string
	// JanitorEnv is added to the janitor's environment, after
	// DOCKER_HOST: e.g. DOCKER_CERT_PATH and DOCKER_TLS_VERIFY for an
	// engine reached over TLS.
	JanitorEnv []string
	// ImageCacheMaxImages and ImageCacheMaxBytes cap the prepared and
	// build images on the host, in number and in CachedImage.Size: after
	// each build the least recently used go until both caps hold, except
	// those in use (see PruneCache). 0 means no cap.
	ImageCacheMaxImages int
	ImageCacheMaxBytes  int64
	// ImageCacheMinIdle keeps images used more recently than this from
	// the provider's pruning (default DefaultImageCacheMinIdle; negative:
	// none), so that it leaves alone what other processes just prepared.
	ImageCacheMinIdle time.Duration
	// ImageCacheLabels, as "key" or "key=value", narrow the provider's
	// pruning to images that carry all of them; tests that share an
	// engine use it to leave each other's images alone.
	ImageCacheLabels []string
	// SyncRemove makes Sandbox.Close remove the container before it
	// returns, as it did before removals ran in the background; for
	// comparisons.
	SyncRemove bool
	// KeepRootMode leaves the mode of a sandbox's "/" as its image has it.
	// By default the executor clears its group bits where that changes no
	// one's access, which spares a FUSE round trip per path lookup on a
	// fuse-overlayfs engine (see the executor's --close-root-group); for
	// comparisons.
	KeepRootMode bool
	// ImageExecutor runs each sandbox's executor from its image's copy,
	// read through the storage driver, instead of from the shared executor
	// volume (see executorBind); for comparisons.
	ImageExecutor bool
	// AttachStream has the client speak to each executor over the
	// container's attach stream only, through the engine and the
	// container's shim, as before executor sockets (see socket.go); for
	// comparisons.
	AttachStream bool
	// ZygoteImports is how many verifier zygotes may import pytest at once
	// on the engine (0: half the engine's CPUs, at least 1). A zygote's
	// low priority counts only inside its container: the engine shares
	// the CPU between containers, so 32 zygotes importing at once after a
	// group reset slow every other sandbox's steps. Started without
	// waiting, a zygote waits its turn (see Sandbox.StartZygote).
	ZygoteImports int
}

// Provider makes Docker sandboxes. It is safe for concurrent use.
type Provider struct {
	cli       *client.Client
	ownClient bool
	opts      Options
	owner     string
	log       *slog.Logger
	starts    chan struct{}
	execHash  string
	// cache holds what the provider knows of the image cache.
	cache imageCache

	// bgCtx ends when the provider closes; bg counts the goroutines
	// filling the warm pool.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	// pins assigns sandboxes their cores (see cpus.go).
	pins *cpuPins

	// mu guards the fields below.
	mu       sync.Mutex
	live     map[string]*Sandbox
	building map[string]chan struct{}
	closed   bool
	// pool holds ready sandboxes by poolKey; filling counts the starts in
	// flight for each key.
	pool    map[string][]*Sandbox
	filling map[string]int
	// recycling counts the recycles in flight for each key (see
	// Options.Reuse); unrecyclable are the images whose sandboxes could
	// not be recorded for a recycle (said once in the log).
	recycling    map[string]int
	unrecyclable map[string]bool
	// zygotePools are the pool keys whose sessions start verifier zygotes,
	// with the modules they preload: their pooled sandboxes start one as
	// they join the pool (see Sandbox.StartZygote).
	zygotePools map[string][]string
	// created holds containers created, not started, by poolKey (see
	// Options.CreatedPool); creating counts the creates in flight.
	created  map[string][]*Sandbox
	creating map[string]int
	// counts are the counters of each pool by poolKey (see PoolStats).
	counts map[string]*poolCount
	// snapshots are the images Commit made, removed on Close; dropped
	// are those DropImage could not remove yet because a sandbox uses them.
	snapshots map[string]bool
	dropped   map[string]bool
	// rm are the container removals that Sandbox.Close started.
	rm removal
	// roots are the places the agent can write, by image (see
	// Sandbox.Archive).
	roots map[string][]executor.Root
	// usr are the shared /usr volumes by base image id (see usrBinds).
	usr map[string]*usrShare
	// usrBase is the base image id each image ref shares /usr with (""
	// for none), as its gymserver.usr-base label says.
	usrBase map[string]string
	// exec is the shared executor volume (see executorBind), nil until
	// the first sandbox asks for it.
	exec *execShare
	// sockets are the executors' sockets (see socket.go).
	sockets execSockets
	// zygoteTurns holds a token for each verifier zygote importing now
	// (see Options.ZygoteImports).
	zygoteTurns chan struct{}
	// zygotesPending counts the zygotes queued for a turn or importing.
	zygotesPending atomic.Int64
	// quota is whether the storage driver takes a size per container.
	quota bool

	// janitor is the process started for Options.Janitor, or nil.
	janitor *janitor

	// bounds are the bounds on executor calls (see execGrace).
	bounds execBounds
}

// execBounds are the bounds on executor calls that tests shorten.
type execBounds struct {
	// grace is added to a command's timeout, and bounds a ping.
	grace time.Duration
	// alive is how often the executor is pinged while a command without
	// a timeout runs.
	alive time.Duration
	// reuseIdle is how long a recycled sandbox waits for a session before
	// it is removed (see Options.Reuse).
	reuseIdle time.Duration
}

var _ sandbox.Provider = (*Provider)(nil)

// New connects to the Docker Engine, reaps containers whose owner is gone
// or whose lease passed, removes the unused prepared images of other
// executor builds, and returns a provider.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if opts.ExecutorBinary == "" {
		return nil, errors.New("docker: no executor binary")
	}
	bin, err := os.ReadFile(opts.ExecutorBinary)
	if err != nil {
		return nil, fmt.Errorf("docker: executor binary: %w", err)
	}
	sum := sha256.Sum256(bin)
	p := &Provider{
		cli:          opts.Client,
		opts:         opts,
		owner:        opts.Owner,
		log:          opts.Logger,
		execHash:     hex.EncodeToString(sum[:]),
		live:         map[string]*Sandbox{},
		building:     map[string]chan struct{}{},
		pool:         map[string][]*Sandbox{},
		filling:      map[string]int{},
		recycling:    map[string]int{},
		unrecyclable: map[string]bool{},
		zygotePools:  map[string][]string{},
		created:      map[string][]*Sandbox{},
		creating:     map[string]int{},
		snapshots:    map[string]bool{},
		dropped:      map[string]bool{},
		bounds:       execBounds{grace: execGrace, alive: aliveEvery, reuseIdle: reuseIdle},
		roots:        map[string][]executor.Root{},
		usr:          map[string]*usrShare{},
		usrBase:      map[string]string{},
		rm:           removal{done: make(chan struct{}), workers: make(chan struct{}, removeWorkers), max: maxPendingRemovals},
	}
	p.bgCtx, p.bgCancel = context.WithCancel(context.Background())
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		p.owner = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	n := opts.MaxConcurrentStarts
	if n <= 0 {
		n = defaultConcurrentStart
	}
	p.starts = make(chan struct{}, n)
	if p.cli == nil {
		p.cli, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, gym.Classify(fmt.Errorf("docker: client: %w", err), gym.ClassSandbox)
		}
		p.ownClient = true
	}
	if _, err := p.cli.Ping(ctx); err != nil {
		p.closeClient()
		return nil, gym.Classify(fmt.Errorf("docker: engine not reachable: %w", err), gym.ClassSandbox)
	}
	imports := opts.ZygoteImports
	cores := 0
	if info, err := p.cli.Info(ctx); err == nil {
		p.quota = quotaDriver(info.Driver, info.DriverStatus)
		if imports <= 0 {
			imports = info.NCPU / 2
		}
		cores = info.NCPU
	}
	p.pins = newCPUPins(cores, opts.FloatCPUs)
	p.zygoteTurns = make(chan struct{}, max(imports, 1))
	openOwners.Store(p.owner, true)
	if err := p.Reap(ctx); err != nil {
		p.log.Warn("reaping orphaned containers failed", "err", err)
	}
	p.pruneStaleImages(ctx)
	p.openSockets()
	p.keepTouching()
	if err := p.startJanitor(); err != nil {
		p.closeSockets()
		p.closeClient()
		openOwners.Delete(p.owner)
		return nil, err
	}
	return p, nil
}

// ZygotesPending returns how many verifier zygotes started without
// waiting are queued for their turn or importing (see
// Options.ZygoteImports).
func (p *Provider) ZygotesPending() int { return int(p.zygotesPending.Load()) }

// Owner returns the provider's owner id, the value of its containers'
// gymserver.owner label.
func (p *Provider) Owner() string { return p.owner }

// Client returns the Docker client the provider uses.
func (p *Provider) Client() *client.Client { return p.cli }

func (p *Provider) closeClient() {
	if p.ownClient {
		p.cli.Close()
	}
}

// Reap removes containers and snapshot images labelled by a provider that
// is gone, and those whose lease has passed; see ReapOrphans. It never
// touches this provider's own, nor unlabelled containers.
func (p *Provider) Reap(ctx context.Context) error {
	_, err := ReapOrphans(ctx, p.cli, ReapOptions{Keep: p.owner, Logger: p.log})
	if err != nil {
		return gym.Classify(err, gym.ClassSandbox)
	}
	return nil
}

// RemoveOwned removes every container labelled with owner; containers
// already gone or being removed count as removed.
func RemoveOwned(ctx context.Context, cli *client.Client, owner string) error {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelOwner+"="+owner))})
	if err != nil {
		return fmt.Errorf("docker: list containers: %w", err)
	}
	var errs []error
	for _, c := range list {
		errs = append(errs, removeContainer(ctx, cli, c.ID))
	}
	return errors.Join(errs...)
}

// remove force-removes a container; a container already gone or being
// removed is fine (see removeContainer).
func (p *Provider) remove(ctx context.Context, id string) error {
	if err := removeContainer(ctx, p.cli, id); err != nil {
		return gym.Classify(err, gym.ClassSandbox)
	}
	return nil
}

// Close destroys every sandbox the provider still owns and releases the
// client. It is idempotent.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	// Stop filling the pool first, so no sandbox starts after the list
	// below is taken.
	p.bgCancel()
	p.bg.Wait()
	p.mu.Lock()
	p.pool = map[string][]*Sandbox{}
	p.created = map[string][]*Sandbox{}
	live := make([]*Sandbox, 0, len(p.live))
	for _, s := range p.live {
		live = append(live, s)
	}
	p.mu.Unlock()
	// The sandboxes (the pooled ones among them) go concurrently: each
	// removal is a round trip to the engine.
	errs := make([]error, len(live))
	var g errgroup.Group
	g.SetLimit(closeConcurrency)
	for i, s := range live {
		g.Go(func() error {
			errs[i] = s.Close(ctx)
			return nil
		})
	}
	g.Wait()
	// Removals started before, by the sessions' Close, end too.
	p.waitRemovals()
	// Anything labelled with our owner that was not tracked (a start that
	// failed half-way, a prepare container) goes too.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	errs = append(errs, RemoveOwned(rctx, p.cli, p.owner))
	// Snapshot images go once no container uses them.
	errs = append(errs, p.removeSnapshots(rctx, func(owner, _ string) bool { return owner == p.owner }))
	errs = append(errs, p.stopJanitor())
	errs = append(errs, p.closeSockets())
	p.closeClient()
	openOwners.Delete(p.owner)
	return errors.Join(errs...)
}

// labels returns the labels every container of this provider carries.
func (p *Provider) labels(extra map[string]string) map[string]string {
	lease := p.opts.Lease
	if lease <= 0 {
		lease = defaultLease
	}
	l := map[string]string{
		sandbox.LabelOwner: p.owner,
		sandbox.LabelLease: strconv.FormatInt(time.Now().Add(lease).Unix(), 10),
	}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// executorCmd returns the argv of the executor in the given mode.
func (p *Provider) executorCmd(mode ...string) []string {
	out := []string{executorPath}
	out = append(out, p.opts.ExecutorArgs...)
	return append(out, mode...)
}

func isNotFound(err error) bool { return errdefs.IsNotFound(err) }

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// drain discards r; used for streams whose content is not needed.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }
