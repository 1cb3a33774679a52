package harbor

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// The field set, names and defaults of task.toml follow Harbor's
// src/harbor/models/task/config.py as of github.com/LegoX/harbor commit
// 73fd120e731217b38f31667932ea26a28cdd4fff. Harbor ignores unknown keys;
// we reject them, so that a misspelt key is not silently a default.

// Harbor's defaults.
const (
	// DefaultVerifierTimeout bounds one run of tests/test.sh.
	DefaultVerifierTimeout = 600 * time.Second
	// DefaultBuildTimeout bounds building the task's image.
	DefaultBuildTimeout = 600 * time.Second
	// DefaultCPUs is the CPU limit of the sandbox.
	DefaultCPUs = 1
	// DefaultMemoryMB is the memory limit of the sandbox in MiB.
	DefaultMemoryMB = 2048
	// DefaultStorageMB is the disk limit of the sandbox in MiB.
	DefaultStorageMB = 10240
)

// Network names returned by Config.Network: the Docker network the sandbox
// joins.
const (
	// NetworkNone is no network at all.
	NetworkNone = "none"
	// NetworkPublic is Docker's default bridge network, with internet access.
	NetworkPublic = "bridge"
)

// Harbor's network modes.
const (
	ModePublic    = "public"
	ModeNoNetwork = "no-network"
	ModeAllowlist = "allowlist"
)

// Config is a task.toml. Zero values of optional fields mean "unset";
// ParseConfig fills Harbor's defaults in.
type Config struct {
	// SchemaVersion is the task format's version ("1.1" when unset).
	SchemaVersion string `toml:"schema_version"`
	// Version is the old name of SchemaVersion; ParseConfig moves it there
	// when SchemaVersion is unset.
	Version string `toml:"version"`
	// Task identifies the task as a package; nil when [task] is absent.
	Task *PackageInfo `toml:"task"`
	// Metadata is a free table (difficulty, category, tags, ...).
	Metadata    map[string]any    `toml:"metadata"`
	Verifier    VerifierConfig    `toml:"verifier"`
	Agent       AgentConfig       `toml:"agent"`
	Environment EnvironmentConfig `toml:"environment"`
	Solution    SolutionConfig    `toml:"solution"`
	// Source says where the task came from (an adapter, a benchmark).
	Source string `toml:"source"`
}

// PackageInfo is the [task] table.
type PackageInfo struct {
	// Name is "org/name".
	Name        string   `toml:"name"`
	Description string   `toml:"description"`
	Authors     []Author `toml:"authors"`
	Keywords    []string `toml:"keywords"`
}

// Author is one entry of [task] authors.
type Author struct {
	Name  string `toml:"name"`
	Email string `toml:"email"`
}

// VerifierConfig is the [verifier] table.
type VerifierConfig struct {
	// TimeoutSec bounds the test run (default 600).
	TimeoutSec float64 `toml:"timeout_sec"`
	// Env is set for tests/test.sh; values may hold ${VAR} templates that
	// Harbor resolves from the host.
	Env map[string]string `toml:"env"`
	// User runs the tests; empty is the image's default user.
	User        User   `toml:"user"`
	NetworkMode string `toml:"network_mode"`
	// AllowedHosts, when set, implies network_mode "allowlist".
	AllowedHosts []string `toml:"allowed_hosts"`
}

// AgentConfig is the [agent] table.
type AgentConfig struct {
	// TimeoutSec bounds the agent's work; nil is no limit of the task's own.
	TimeoutSec   *float64 `toml:"timeout_sec"`
	User         User     `toml:"user"`
	NetworkMode  string   `toml:"network_mode"`
	AllowedHosts []string `toml:"allowed_hosts"`
}

// EnvironmentConfig is the [environment] table.
type EnvironmentConfig struct {
	// BuildTimeoutSec bounds the image build (default 600).
	BuildTimeoutSec float64 `toml:"build_timeout_sec"`
	// DockerImage is a prebuilt image to use instead of environment/Dockerfile.
	DockerImage string `toml:"docker_image"`
	// CPUs (default 1), MemoryMB (default 2048) and StorageMB (default
	// 10240) are the sandbox's limits.
	CPUs      int      `toml:"cpus"`
	MemoryMB  int      `toml:"memory_mb"`
	StorageMB int      `toml:"storage_mb"`
	GPUs      int      `toml:"gpus"`
	GPUTypes  []string `toml:"gpu_types"`
	// AllowInternet is nil when unset. Harbor's default is true; ours is
	// no network (see Config.Network).
	AllowInternet *bool             `toml:"allow_internet"`
	NetworkMode   string            `toml:"network_mode"`
	AllowedHosts  []string          `toml:"allowed_hosts"`
	MCPServers    []MCPServer       `toml:"mcp_servers"`
	Env           map[string]string `toml:"env"`
	SkillsDir     string            `toml:"skills_dir"`
	Healthcheck   *Healthcheck      `toml:"healthcheck"`
	// Memory and Storage are the deprecated forms of MemoryMB and
	// StorageMB ("1G", "512M"); ParseConfig converts them and clears them.
	Memory  string `toml:"memory"`
	Storage string `toml:"storage"`
}

// MCPServer is one entry of [environment] mcp_servers.
type MCPServer struct {
	Name string `toml:"name"`
	// Transport is "sse" (default), "streamable-http" or "stdio".
	Transport string   `toml:"transport"`
	URL       string   `toml:"url"`
	Command   string   `toml:"command"`
	Args      []string `toml:"args"`
}

// Healthcheck is the [environment.healthcheck] table.
type Healthcheck struct {
	Command          string  `toml:"command"`
	IntervalSec      float64 `toml:"interval_sec"`
	TimeoutSec       float64 `toml:"timeout_sec"`
	StartPeriodSec   float64 `toml:"start_period_sec"`
	StartIntervalSec float64 `toml:"start_interval_sec"`
	Retries          int     `toml:"retries"`
}

// SolutionConfig is the [solution] table.
type SolutionConfig struct {
	// Env is set for solution/solve.sh.
	Env map[string]string `toml:"env"`
}

// User is a user name or a numeric uid, as task.toml allows either; a uid
// is kept in decimal. Empty means the image's default user.
type User string

// UnmarshalTOML accepts a string or an integer.
func (u *User) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case string:
		*u = User(x)
	case int64:
		if x < 0 {
			return fmt.Errorf("user: uid %d is negative", x)
		}
		*u = User(strconv.FormatInt(x, 10))
	default:
		return fmt.Errorf("user: must be a string or an integer, not %T", v)
	}
	return nil
}

// defaultConfig is a Config with Harbor's defaults; decoding overwrites
// what the file sets.
func defaultConfig() Config {
	return Config{Environment: EnvironmentConfig{
		BuildTimeoutSec: DefaultBuildTimeout.Seconds(),
		CPUs:            DefaultCPUs,
		MemoryMB:        DefaultMemoryMB,
		StorageMB:       DefaultStorageMB,
	}, Verifier: VerifierConfig{TimeoutSec: DefaultVerifierTimeout.Seconds()}}
}

// ParseConfig decodes and checks the task.toml in data; file names it in
// errors. It returns every problem at once, joined, and warnings for the
// fields it parses but gymserver does not honour.
func ParseConfig(data []byte, file string) (Config, []string, error) {
	c := defaultConfig()
	md, err := toml.Decode(string(data), &c)
	if err != nil {
		return Config{}, nil, fmt.Errorf("%s: %w", file, err)
	}
	var errs []error
	for _, k := range md.Undecoded() {
		// A free table's nested tables show up as undecoded.
		if len(k) > 0 && k[0] == "metadata" {
			continue
		}
		errs = append(errs, fmt.Errorf("%s: unknown key %q", file, k.String()))
	}
	var warns []string
	c.check(
		func(key, format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s: %s: %s", file, key, fmt.Sprintf(format, a...)))
		},
		func(key, format string, a ...any) {
			warns = append(warns, fmt.Sprintf("%s: %s: %s", file, key, fmt.Sprintf(format, a...)))
		})
	if len(errs) > 0 {
		return Config{}, nil, errors.Join(errs...)
	}
	return c, warns, nil
}

// namePattern is Harbor's "org/name" package name.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]*/[A-Za-z0-9_-][A-Za-z0-9_.-]*$`)

// maxSeconds is the longest duration a time.Duration holds, in seconds.
const maxSeconds = float64(math.MaxInt64 / int64(time.Second))

// check validates c, normalises it in place (deprecated fields, implied
// network modes) and reports problems to fail and unhonoured fields to
// warn.
func (c *Config) check(fail, warn func(key, format string, a ...any)) {
	if c.SchemaVersion == "" {
		c.SchemaVersion = c.Version
	}
	if c.SchemaVersion == "" {
		c.SchemaVersion = "1.1"
	}
	c.Version = ""
	if t := c.Task; t != nil {
		if !namePattern.MatchString(t.Name) || strings.Contains(t.Name, "..") {
			fail("task.name", "must be \"org/name\" (letters, digits, '-', '_', '.'), got %q", t.Name)
		}
		for i, a := range t.Authors {
			if a.Name == "" {
				fail(fmt.Sprintf("task.authors[%d].name", i), "is required")
			}
		}
	}
	positive := func(key string, v float64) {
		if !(v > 0) {
			fail(key, "must be a positive number of seconds, got %v", v)
		} else if v > maxSeconds {
			fail(key, "%v seconds is too long", v)
		}
	}
	positive("verifier.timeout_sec", c.Verifier.TimeoutSec)
	if c.Agent.TimeoutSec != nil {
		positive("agent.timeout_sec", *c.Agent.TimeoutSec)
	}
	e := &c.Environment
	positive("environment.build_timeout_sec", e.BuildTimeoutSec)
	if e.Memory != "" {
		warn("environment.memory", "is deprecated; use memory_mb")
		if mb, err := sizeMB(e.Memory); err != nil {
			fail("environment.memory", "%v", err)
		} else {
			e.MemoryMB = mb
		}
		e.Memory = ""
	}
	if e.Storage != "" {
		warn("environment.storage", "is deprecated; use storage_mb")
		if mb, err := sizeMB(e.Storage); err != nil {
			fail("environment.storage", "%v", err)
		} else {
			e.StorageMB = mb
		}
		e.Storage = ""
	}
	if e.CPUs < 1 {
		fail("environment.cpus", "must be at least 1, got %d", e.CPUs)
	}
	if e.MemoryMB < 1 {
		fail("environment.memory_mb", "must be positive, got %d", e.MemoryMB)
	}
	if e.StorageMB < 1 {
		fail("environment.storage_mb", "must be positive, got %d", e.StorageMB)
	}
	if e.GPUs < 0 {
		fail("environment.gpus", "must not be negative, got %d", e.GPUs)
	}
	if e.GPUs > 0 {
		warn("environment.gpus", "GPUs are not supported; the sandbox has none")
	}
	if len(e.GPUTypes) > 0 {
		warn("environment.gpu_types", "GPUs are not supported; ignored")
	}
	e.NetworkMode, e.AllowedHosts = networkPolicy("environment", e.NetworkMode, e.AllowedHosts, fail)
	if e.NetworkMode == ModeAllowlist {
		warn("environment.network_mode", "allowlist networking is not supported; the sandbox gets no network")
	}
	c.Agent.NetworkMode, c.Agent.AllowedHosts = networkPolicy("agent", c.Agent.NetworkMode, c.Agent.AllowedHosts, fail)
	c.Verifier.NetworkMode, c.Verifier.AllowedHosts = networkPolicy("verifier", c.Verifier.NetworkMode, c.Verifier.AllowedHosts, fail)
	if c.Agent.NetworkMode != "" {
		warn("agent.network_mode", "per-phase network policies are not supported; the environment's network applies throughout")
	}
	if c.Verifier.NetworkMode != "" {
		warn("verifier.network_mode", "per-phase network policies are not supported; the environment's network applies throughout")
	}
	if c.Agent.User != "" {
		warn("agent.user", "not honoured: the agent runs as the sandbox's non-root user")
	}
	if c.Verifier.User != "" {
		warn("verifier.user", "not honoured: the tests run as the sandbox's non-root user")
	}
	for i, m := range e.MCPServers {
		key := fmt.Sprintf("environment.mcp_servers[%d]", i)
		if m.Name == "" {
			fail(key+".name", "is required")
		}
		if m.Transport == "" {
			e.MCPServers[i].Transport = "sse"
		}
		switch e.MCPServers[i].Transport {
		case "sse", "streamable-http":
			if m.URL == "" {
				fail(key+".url", "is required for transport %q", e.MCPServers[i].Transport)
			}
		case "stdio":
			if m.Command == "" {
				fail(key+".command", "is required for transport \"stdio\"")
			}
		default:
			fail(key+".transport", "must be \"sse\", \"streamable-http\" or \"stdio\", got %q", m.Transport)
		}
	}
	if len(e.MCPServers) > 0 {
		warn("environment.mcp_servers", "MCP servers are not supported; ignored")
	}
	if e.SkillsDir != "" {
		warn("environment.skills_dir", "skills are not supported; ignored")
	}
	if h := e.Healthcheck; h != nil {
		if h.Command == "" {
			fail("environment.healthcheck.command", "is required")
		}
		warn("environment.healthcheck", "health checks are not supported; the agent starts at once")
	}
}

// networkPolicy checks a section's network_mode and allowed_hosts the way
// Harbor does: hosts imply "allowlist" and are only valid with it; hosts
// are lower-cased host names or IPv4 addresses, without duplicates.
func networkPolicy(section, mode string, hosts []string, fail func(key, format string, a ...any)) (string, []string) {
	switch mode {
	case "", ModePublic, ModeNoNetwork, ModeAllowlist:
	default:
		fail(section+".network_mode", "must be %q, %q or %q, got %q", ModePublic, ModeNoNetwork, ModeAllowlist, mode)
	}
	if len(hosts) == 0 {
		return mode, hosts
	}
	var norm []string
	seen := map[string]bool{}
	for _, h := range hosts {
		v := strings.TrimRight(strings.ToLower(strings.TrimSpace(h)), ".")
		if v == "" {
			continue
		}
		if strings.ContainsAny(v, "/:") {
			fail(section+".allowed_hosts", "entries must be host names or IPv4 addresses, not URLs, CIDRs, ports or paths: %q", h)
			continue
		}
		if !seen[v] {
			seen[v] = true
			norm = append(norm, v)
		}
	}
	if mode == "" {
		mode = ModeAllowlist
	}
	if mode != ModeAllowlist {
		fail(section+".allowed_hosts", "is only valid with network_mode %q", ModeAllowlist)
	}
	return mode, norm
}

// sizeMB converts a deprecated size ("1G", "512M", "2048K") to MiB as
// Harbor does, truncating.
func sizeMB(s string) (int, error) {
	v := strings.ToUpper(strings.TrimSpace(s))
	mult := 0.0
	switch {
	case strings.HasSuffix(v, "G"):
		mult = 1024
	case strings.HasSuffix(v, "M"):
		mult = 1
	case strings.HasSuffix(v, "K"):
		mult = 1.0 / 1024
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v[:max(len(v)-1, 0)]), 64)
	if mult == 0 || err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("invalid size %q, want a number and G, M or K such as \"1G\" or \"512M\"", s)
	}
	return int(f * mult), nil
}

// Network returns the Docker network for the sandbox: NetworkPublic when
// the task explicitly asks for internet (network_mode = "public", or
// allow_internet = true without a network_mode), else NetworkNone.
//
// Harbor's default is allow_internet = true; ours is no network, because a
// sandbox for RL is closed unless its task says otherwise. An allowlist is
// not supported and also gives no network.
func (c Config) Network() string {
	e := c.Environment
	switch {
	case e.NetworkMode == ModePublic:
		return NetworkPublic
	case e.NetworkMode == "" && e.AllowInternet != nil && *e.AllowInternet:
		return NetworkPublic
	}
	return NetworkNone
}

// MemoryBytes returns the memory limit (default 2048 MiB).
func (c Config) MemoryBytes() int64 {
	return int64(orDefault(c.Environment.MemoryMB, DefaultMemoryMB)) << 20
}

// DiskBytes returns the disk limit (default 10240 MiB).
func (c Config) DiskBytes() int64 {
	return int64(orDefault(c.Environment.StorageMB, DefaultStorageMB)) << 20
}

// CPUs returns the CPU limit (default 1).
func (c Config) CPUs() float64 { return float64(orDefault(c.Environment.CPUs, DefaultCPUs)) }

// AgentTimeout returns the task's limit on the agent's work, or 0 when the
// task sets none (Harbor then applies no limit; the caller's own applies).
func (c Config) AgentTimeout() time.Duration {
	if c.Agent.TimeoutSec == nil {
		return 0
	}
	return seconds(*c.Agent.TimeoutSec, 0)
}

// VerifierTimeout returns the limit on one test run (default 600 s).
func (c Config) VerifierTimeout() time.Duration {
	return seconds(c.Verifier.TimeoutSec, DefaultVerifierTimeout)
}

// BuildTimeout returns the limit on building the image (default 600 s).
func (c Config) BuildTimeout() time.Duration {
	return seconds(c.Environment.BuildTimeoutSec, DefaultBuildTimeout)
}

// seconds converts s to a duration; def stands for an unset (zero or
// negative) value, so that a zero Config gives Harbor's defaults too.
func seconds(s float64, def time.Duration) time.Duration {
	if !(s > 0) {
		return def
	}
	return time.Duration(s * float64(time.Second))
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}
