package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/client"
)

// DefaultCapacity is the capacity of an endpoint that gives none: the live
// sessions placement puts on the engine at most.
const DefaultCapacity = 64

// Endpoint is one Docker Engine of a fleet.
type Endpoint struct {
	// Name names the engine in logs, metrics and /v1/engines; default
	// "engine<i>" (its index, from 0).
	Name string `json:"name,omitempty"`
	// Host is the engine's address: unix:///path, tcp://host:port or
	// http(s)://host:port, as DOCKER_HOST takes it.
	Host string `json:"host"`
	// Capacity is the most live sessions placed on the engine (default
	// DefaultCapacity).
	Capacity int `json:"capacity,omitempty"`
	// TLSDir, for a tcp engine over TLS, holds ca.pem, cert.pem and
	// key.pem, as DOCKER_CERT_PATH does; the server's certificate is
	// verified.
	TLSDir string `json:"tls,omitempty"`
}

// ParseEndpoint parses the --docker-host form of an endpoint:
// "URL[,capacity=N][,name=NAME][,tls=DIR]".
func ParseEndpoint(s string) (Endpoint, error) {
	parts := strings.Split(s, ",")
	ep := Endpoint{Host: strings.TrimSpace(parts[0])}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Endpoint{}, fmt.Errorf("docker host %q: %q is not key=value", s, kv)
		}
		switch k {
		case "capacity":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Endpoint{}, fmt.Errorf("docker host %q: capacity must be a positive integer", s)
			}
			ep.Capacity = n
		case "name":
			ep.Name = v
		case "tls":
			ep.TLSDir = v
		default:
			return Endpoint{}, fmt.Errorf("docker host %q: unknown option %q (want capacity, name or tls)", s, k)
		}
	}
	return ep, ep.check()
}

// LoadEndpoints reads a JSON file holding a list of endpoints, e.g.
// [{"host": "unix:///var/run/docker.sock", "capacity": 32}].
func LoadEndpoints(path string) ([]Endpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("engines file: %w", err)
	}
	var eps []Endpoint
	if err := json.Unmarshal(b, &eps); err != nil {
		return nil, fmt.Errorf("engines file %s: %w", path, err)
	}
	for i := range eps {
		if err := eps[i].check(); err != nil {
			return nil, fmt.Errorf("engines file %s: %w", path, err)
		}
	}
	return eps, nil
}

// check refuses endpoints the Docker client cannot reach.
func (ep Endpoint) check() error {
	u, err := url.Parse(ep.Host)
	if err != nil || ep.Host == "" {
		return fmt.Errorf("docker host %q: not a URL", ep.Host)
	}
	switch u.Scheme {
	case "unix", "tcp", "http", "https":
	case "ssh":
		return fmt.Errorf("docker host %q: ssh is not supported; forward the engine's socket (ssh -L) and give its unix or tcp address", ep.Host)
	default:
		return fmt.Errorf("docker host %q: scheme %q not supported (unix, tcp, http, https)", ep.Host, u.Scheme)
	}
	if ep.Capacity < 0 {
		return fmt.Errorf("docker host %q: negative capacity", ep.Host)
	}
	if ep.TLSDir != "" && u.Scheme == "unix" {
		return fmt.Errorf("docker host %q: tls is for tcp engines", ep.Host)
	}
	return nil
}

// Client checks the endpoint and returns a client of its engine (with
// its TLS certificates); the caller closes it.
func (ep Endpoint) Client() (*client.Client, error) {
	if err := ep.check(); err != nil {
		return nil, err
	}
	opts := []client.Opt{client.WithHost(ep.Host), client.WithAPIVersionNegotiation()}
	if ep.TLSDir != "" {
		opts = append(opts, client.WithTLSClientConfig(
			filepath.Join(ep.TLSDir, "ca.pem"), filepath.Join(ep.TLSDir, "cert.pem"), filepath.Join(ep.TLSDir, "key.pem")))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker host %s: %w", ep.Host, err)
	}
	return cli, nil
}

// janitorEnv is what the engine's janitor needs besides DOCKER_HOST.
func (ep Endpoint) janitorEnv() []string {
	if ep.TLSDir == "" {
		return nil
	}
	return []string{"DOCKER_CERT_PATH=" + ep.TLSDir, "DOCKER_TLS_VERIFY=1"}
}

// errNoEngine is wrapped when no engine can take a session.
var errNoEngine = errors.New("no engine can take a session")
