// Package sandbox defines the isolated machine an episode runs in: the
// Sandbox and Provider interfaces that the Docker backend implements and that
// the environment layer consumes.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"time"
)

// Sandbox is one isolated machine (a container) for one episode.
//
// Two identities act in a sandbox: the agent (the sandbox user), as whom
// Exec, WriteFile, ReadFile and ListDir run, and the sandbox's machinery,
// which the agent can neither signal, trace nor write to, and which
// performs KillAll, Remove and CopyIn.
//
// All methods are safe for concurrent use. Methods block until done or until
// ctx is cancelled. Infrastructure failures (the container died, the daemon
// is gone, the executor stopped answering) wrap gym.ErrSandbox; problems the
// caller caused wrap the sentinels below. Close is idempotent and tolerates a
// half-created sandbox; after Close every other method fails with
// gym.ErrSandbox.
type Sandbox interface {
	// ID is the sandbox's id (the container id for Docker).
	ID() string
	// SessionID is the id of the session the sandbox serves, which the
	// environment names its session with. The provider mints it
	// (NewSessionID) when it starts the sandbox, and a Docker sandbox
	// carries it as its gymserver.session label.
	SessionID() string
	// Exec runs one command. A non-zero exit, a timeout or an out-of-memory
	// kill is reported in ExecResult, not as an error.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	// WriteFile writes data to path (absolute, or relative to the sandbox's
	// working directory), creating parent directories, as the sandbox user.
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	// ReadFile reads at most maxBytes of path. A missing file wraps
	// ErrNotExist, a directory ErrIsDir; a longer file wraps ErrTooLarge and
	// returns the first maxBytes bytes.
	ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error)
	// ListDir lists a directory.
	ListDir(ctx context.Context, path string) ([]DirEntry, error)
	// Remove deletes path recursively with the machinery's rights, whoever
	// owns what is there; a missing path is not an error.
	Remove(ctx context.Context, path string) error
	// KillAll kills every process of the sandbox user, background ones
	// included and however they were started, until none is left; the
	// sandbox's own machinery survives. It runs before evaluation.
	KillAll(ctx context.Context) error
	// CopyIn installs files owned by root and read-only to the sandbox user,
	// replacing what is at their paths. It is how hidden tests arrive: the
	// agent cannot change them, nor rename them or the directories they
	// are in (a directory of the agent's that holds one gets the sticky
	// bit), and its processes must be killed first.
	CopyIn(ctx context.Context, files []File) error
	// Close destroys the sandbox: every other method fails after it. A
	// backend may release the sandbox's resources (the container) in
	// the background after Close returns; the provider's Close waits
	// for them.
	Close(ctx context.Context) error
}

// NewSessionID returns a new session id: "s-" and 24 random hex digits.
//
// Session ids have one owner: the provider that starts a sandbox mints its
// session's id with NewSessionID, and the environment takes it from
// Sandbox.SessionID; nothing else mints them. It is the provider's because
// a warm pool starts sandboxes, labelled with their session's id, before
// the sessions exist, and a container's labels cannot change later.
func NewSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return "s-" + hex.EncodeToString(b[:])
}

// Committer is implemented by sandboxes whose files can be saved as an
// image that Provider.Create starts new sandboxes from. Running processes
// are not saved.
type Committer interface {
	// Commit saves the sandbox's files and returns the image reference.
	Commit(ctx context.Context) (string, error)
}

// Archiver is implemented by sandboxes that can save what the agent can
// change as an archive, and put it back into another sandbox: cheaper than
// Commit when little changed. What the agent can change is every file and
// directory of the sandbox's file system it can write (its working
// directory, /tmp, its home, files it owns elsewhere); nothing else can
// differ between two sandboxes of the same Spec while an episode runs.
// Running processes are not saved, nor mounts outside the image's file
// system (/dev/shm).
type Archiver interface {
	// Archive takes the agent-writable files and directories as an
	// archive of at most maxBytes; it may hold only what differs from a
	// fresh sandbox of the same Spec (and what was deleted), which
	// Restore puts back. It is read with the agent's rights,
	// while the agent's processes may run. Archive returns once the
	// archive is taken (later changes are not in it); its bytes may take
	// longer to reach the caller, through Capture.Fetch. When the state
	// cannot be carried (larger than maxBytes; something there the agent
	// does not own or cannot read; a device, FIFO or socket) the error
	// wraps ErrNotArchivable and says why; callers then fall back to
	// Commit.
	Archive(ctx context.Context, maxBytes int64) (Capture, error)
	// Restore replaces the agent-writable files and directories of a
	// sandbox that no agent has used, started from the same Spec as the
	// archived one, with the archive's. It writes with the agent's rights
	// only, so whatever an archive holds, the sandbox ends up with nothing
	// the agent could not have written itself; an archive naming paths
	// outside the agent-writable ones, or anything but directories,
	// regular files and links, wraps ErrInvalidArchive and changes nothing.
	Restore(ctx context.Context, archive []byte) error
}

// Capture is an archive taken by Archiver.Archive.
type Capture struct {
	// Size is the archive's size in bytes.
	Size int64
	// Fetch returns the archive. It may be called once, before the
	// sandbox closes; until then the sandbox holds the archive.
	Fetch func(ctx context.Context) ([]byte, error)
}

// DirMaker is a Sandbox that makes a directory with the machinery's rights,
// for the agent or for root, as a recycled sandbox can undo (see
// docker.Options.Reuse): what an Exec with Priv makes cannot be told
// apart from anything else root did, so a sandbox where one ran is never
// recycled.
type DirMaker interface {
	// MakeDir makes the absolute path, and the missing directories above
	// it (mode 0755, root's), mode 0755 and owned by the sandbox user
	// when forAgent, else by root.
	MakeDir(ctx context.Context, path string, forAgent bool) error
}

// ErrNotArchivable is wrapped by Archive when the sandbox's state cannot
// be carried by an archive.
var ErrNotArchivable = errors.New("not archivable")

// ErrInvalidArchive is wrapped by Restore for an archive it refuses.
var ErrInvalidArchive = errors.New("invalid archive")

// ImageDropper is implemented by providers that can delete the images
// Commit made. Sandboxes already started from an image keep running.
type ImageDropper interface {
	DropImage(ctx context.Context, ref string) error
}

// Provider makes sandboxes. It is safe for concurrent use.
type Provider interface {
	// Prepare builds (or finds in its cache) the image for spec and returns
	// its reference. Preparing the same spec twice reuses the first result.
	Prepare(ctx context.Context, spec ImageSpec) (string, error)
	// Create starts a sandbox from a prepared image.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Close releases the provider and destroys the sandboxes it still
	// owns; it returns once the resources of every sandbox closed before
	// are released.
	Close(ctx context.Context) error
}

// ImageSpec says how to prepare an image: a base image, files and commands
// that run once, the result cached by a hash of all of it.
type ImageSpec struct {
	// BaseImage is the image to start from, e.g. "python:3.11-slim".
	BaseImage string
	// WorkDir is created and owned by the sandbox user.
	WorkDir string
	// Files are copied in before InitCommands run, owned by the sandbox user.
	Files []File
	// InitCommands run in order with /bin/sh -c, as the sandbox user, in
	// WorkDir with Env. Any failure fails Prepare.
	InitCommands []string
	Env          map[string]string
	// Timeout bounds each init command; 0 means 10 minutes.
	Timeout time.Duration
	// OwnWorkDir gives WorkDir and everything already in it to the
	// sandbox user, for base images whose working directory is root's
	// (Harbor tasks' images).
	OwnWorkDir bool
}

// Builder is a Provider that builds images from a Dockerfile.
type Builder interface {
	// Build returns the image built from spec, building it once per
	// content of its context.
	Build(ctx context.Context, spec BuildSpec) (string, error)
}

// BuildSpec says how to build an image.
type BuildSpec struct {
	// ContextDir is the host folder sent as the build context.
	ContextDir string
	// Dockerfile is relative to ContextDir; "" means "Dockerfile".
	Dockerfile string
	// Name names what is built (a task id) in errors and labels.
	Name string
	// Timeout bounds the build; 0 means 10 minutes.
	Timeout time.Duration
}

// ImageInspector is a Provider that reads an image's settings.
type ImageInspector interface {
	// ImageWorkDir returns the image's working directory ("" if unset).
	ImageWorkDir(ctx context.Context, ref string) (string, error)
}

// Spec says how to start a sandbox.
type Spec struct {
	// Image is a reference returned by Provider.Prepare.
	Image   string
	WorkDir string
	Env     map[string]string
	// Labels are added to the container's labels (keys like
	// "gymserver.task"); the provider sets "gymserver.session" itself (see
	// NewSessionID).
	Labels    map[string]string
	Resources Resources
	// Network is "none" (the default) or a Docker network name.
	Network string
	// Files are the task's starter files, in place before Create returns
	// and owned by the sandbox user, as are the folders made for them
	// inside WorkDir. They do not make a sandbox different for pooling: a
	// pooled sandbox of the same Spec gets them when it is handed out.
	Files []File
	// ShareUsr asks for /usr/bin and /usr/lib to be read, read-only, from
	// volumes on the engine's disk that hold the base image's copy, shared
	// by the sandboxes of every image prepared from it, rather than through
	// the storage driver. A provider that cannot (the image's build changed
	// them, or its base lets a non-root user write there) ignores it.
	ShareUsr bool
}

// Resources are the limits of a sandbox; zero values mean the defaults.
type Resources struct {
	// MemoryBytes is the memory limit (default 1 GiB), swap included.
	MemoryBytes int64
	// CPUs is the CPU quota in cores (default 1).
	CPUs float64
	// PIDs limits the number of processes (default 256).
	PIDs int64
	// DiskBytes limits what the sandbox may write (default 4 GiB): its
	// whole writable layer where the storage driver supports a quota,
	// otherwise the size of each file (RLIMIT_FSIZE).
	DiskBytes int64
}

// File is a file to place in a sandbox.
type File struct {
	// Path is absolute inside the sandbox.
	Path string
	Data []byte
	Mode fs.FileMode
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name  string      `json:"name"`
	IsDir bool        `json:"is_dir"`
	Size  int64       `json:"size"`
	Mode  fs.FileMode `json:"mode"`
}

// ExecRequest is one command to run.
type ExecRequest struct {
	// Argv is the program and its arguments; no shell is involved unless
	// Argv names one (e.g. {"/bin/sh", "-c", cmd}).
	Argv []string
	// Dir is the working directory; empty means the sandbox's WorkDir.
	Dir string
	// Env is added to the sandbox's environment, "KEY=VALUE" each.
	Env []string
	// Timeout kills the command and all its children when it passes;
	// 0 means no timeout (only ctx bounds the call).
	Timeout time.Duration
	// MaxOutput caps what is kept of each of stdout and stderr: the first
	// and last halves are kept and the middle dropped. 0 means 64 KiB.
	MaxOutput int
	// Background starts the command and returns at once with its PID. Its
	// output is discarded; it is killed by KillAll.
	Background bool
	// Shell runs Argv[0], a shell command line, in the sandbox's
	// persistent shell instead of a new process: one long-lived shell per
	// sandbox, as the agent, keeps what commands change in it (working
	// directory, exported variables, functions) for the next. Dir, when
	// set, is changed to first (and stays); Timeout kills every process
	// below the shell, and a shell that does not then come back, or that
	// exits, is replaced by a fresh one on the next command (its state is
	// lost). Stdin is /dev/null; Background, Report, Priv, Stdin and Env
	// are not allowed with it (gym.ErrInvalidArgument).
	Shell bool
	// Stdin is fed to the command.
	Stdin []byte
	// Report gives the command a pipe on file descriptor 3 (/dev/fd/3)
	// for a report, e.g. a test runner's JUnit XML; it comes back in
	// ExecResult.Report. When the command exits, every process of the
	// sandbox user is killed (as by KillAll) and then the pipe is read to
	// its end, so the report holds everything written to it by anyone,
	// in order, and nothing can be added after the result is returned.
	Report bool
	// ReportMax caps the report kept (0 means 16 MiB).
	ReportMax int64
	// Priv runs the command with the sandbox machinery's own rights (root
	// in a Docker sandbox) instead of the agent's. Only the evaluator sets
	// it, for a verifier that must run as root; never for the agent.
	Priv bool
	// Zygote lets a plain pytest command (`/bin/sh -c "pytest ARGS"` or
	// `python3 -m pytest ARGS`, nothing the shell would interpret) run as
	// a fork of the sandbox's verifier zygote (see ZygoteStarter) instead
	// of a new process, when one is ready: same identity, environment,
	// directory, descriptors, limits, timeout and kill as otherwise, less
	// start-up time. Anything else runs as usual; ExecResult says which.
	Zygote bool
}

// ExecResult is what a command did.
type ExecResult struct {
	// ExitCode is the exit status, or -1 when killed by a signal.
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// StdoutDropped and StderrDropped count bytes cut from the middle.
	StdoutDropped int64
	StderrDropped int64
	// TimedOut is true when the command was killed for its timeout.
	TimedOut bool
	// Signal names the signal that ended the command, if any.
	Signal string
	// OOMKilled is true when the sandbox's memory limit killed a process
	// while the command ran.
	OOMKilled bool
	// PID is the process id of a background command.
	PID      int
	Duration time.Duration
	// Report is what was written to the report pipe (see
	// ExecRequest.Report); ReportDropped counts the bytes past ReportMax.
	Report        []byte
	ReportDropped int64
	// ViaZygote says the command ran as a fork of the verifier zygote;
	// ZygoteMiss says why a command that allowed it did not (empty when
	// it did or did not ask), and ZygoteWait is how long it waited for the
	// zygote to be ready.
	ViaZygote  bool
	ZygoteMiss string
	ZygoteWait time.Duration
}

// ZygoteStarter is implemented by sandboxes that can keep a verifier
// zygote: a process of the sandbox's machinery (never the agent's) that
// imports the test runner (pytest) ahead of evaluation, at a low CPU
// priority, and forks the test command's process when ExecRequest.Zygote
// allows it. StartZygote starts it unless it runs already, passes it the
// modules to preload, and returns at once, or with opts.Wait once it is
// ready or has failed (or ctx ends). A sandbox whose image has no usable
// pytest reports that in the status, not as an error; errors are the
// sandbox's (gym.ErrSandbox).
type ZygoteStarter interface {
	StartZygote(ctx context.Context, opts ZygoteOptions) (ZygoteStatus, error)
}

// ZygoteOptions says how StartZygote starts a verifier zygote.
type ZygoteOptions struct {
	// Wait makes StartZygote return once the zygote is ready or failed.
	Wait bool
	// Preload names the modules the hidden tests import. The zygote
	// imports those it allows (standard library modules whose import
	// costs a test run time; see zygote.py in package executor) ahead of
	// the tests; the others are left to the test run. A zygote that runs
	// already gets the names too.
	Preload []string
}

// ZygoteStatus describes a sandbox's verifier zygote.
type ZygoteStatus struct {
	// Ready says the zygote has imported pytest and takes commands.
	Ready bool
	// Error says why it is not usable, if it is not.
	Error string
	// ReadyIn is how long it took to be ready.
	ReadyIn time.Duration
	// RSS is its resident memory in bytes.
	RSS int64
	// PytestVersion is the version of pytest it imported.
	PytestVersion string
}

// Errors for problems the caller caused. They wrap the fs errors so
// errors.Is(err, fs.ErrNotExist) also works.
var (
	ErrNotExist = &pathError{"no such file or directory", fs.ErrNotExist}
	ErrIsDir    = &pathError{"is a directory", nil}
	ErrNotDir   = &pathError{"not a directory", nil}
	ErrTooLarge = &pathError{"file too large", nil}
)

// ErrAgentCrash is wrapped by a sandbox failure that the agent caused:
// the sandbox died because its processes exhausted it (e.g. its memory).
// The error's class stays gym.ErrSandbox; the environment scores such an
// episode 0 instead of masking it.
var ErrAgentCrash = errors.New("the agent's processes brought the sandbox down")

type pathError struct {
	msg   string
	inner error
}

func (e *pathError) Error() string { return e.msg }
func (e *pathError) Unwrap() error { return e.inner }

// Labels used on every container gymserver makes.
const (
	LabelOwner   = "gymserver.owner"
	LabelSession = "gymserver.session"
	LabelTask    = "gymserver.task"
	// LabelLease holds the Unix time after which the container may be
	// reaped by any gymserver even if its owner looks alive.
	LabelLease = "gymserver.lease"
)

// IsNotExist reports whether err says a path does not exist.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
