package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/fleet"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
	"github.com/gymserver/gymserver/policy/rollout"
)

// TestServeAndRolloutOverTwoEngines runs `gymserver serve` and an
// in-process `gymserver rollout` over the host's engine and an engine the
// test starts, each of capacity 1: two episodes at once take one engine
// each and score 1, and /v1/engines and /metrics report each engine.
func TestServeAndRolloutOverTwoEngines(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := validateBinary(t)
	x := dockertest.StartEngine(t, "cli")
	main := os.Getenv("DOCKER_HOST")
	if main == "" {
		main = client.DefaultDockerHost
	}
	engines := []string{"--docker-host", main + ",capacity=1,name=main", "--docker-host", x.Host() + ",capacity=1,name=x"}

	url := startServe(t, bin, calculatorConfig, append(engines, "--engine-health-every", "200ms", "--ui")...)
	base := "http://" + strings.TrimSuffix(strings.TrimPrefix(url, "ws://"), "/v1/ws")
	var got struct{ Engines []fleet.EngineInfo }
	getJSON(t, base+"/v1/engines", &got)
	if len(got.Engines) != 2 || got.Engines[0].Name != "main" || got.Engines[1].Name != "x" ||
		!got.Engines[0].Up || !got.Engines[1].Up || got.Engines[1].Capacity != 1 {
		t.Fatalf("/v1/engines: %+v", got.Engines)
	}

	run := func(name string, flags ...string) []byte {
		t.Helper()
		out := filepath.Join(t.TempDir(), "results.json")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		args := append([]string{"rollout", calculatorConfig, "--policy", "oracle", "--output", out, "--quiet",
			"--episodes", "2", "--parallel", "2"}, flags...)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "OPENROUTER_API_KEY=", "OPENAI_API_KEY=")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		var recs []rollout.Record
		readFile(t, out, &recs)
		if len(recs) != 2 {
			t.Fatalf("%s: %d results, want 2", name, len(recs))
		}
		for _, r := range recs {
			if r.EpisodeResult.FinalScore != 1 {
				t.Fatalf("%s: result %+v, want score 1", name, r)
			}
		}
		return b
	}

	run("remote", "--server", url)
	getJSON(t, base+"/v1/engines", &got)
	for _, e := range got.Engines {
		if e.Placed != 1 || e.Sessions != 0 || !e.Up {
			t.Errorf("after two episodes at once: engine %+v, want 1 placed, 0 live", e)
		}
	}
	if got.Engines[1].Transfers != 1 {
		t.Errorf("engine x: %d image transfers, want 1 (the prepared image and its base, once)", got.Engines[1].Transfers)
	}
	// The dashboard shows the same engines.
	var ui struct{ Engines []fleet.EngineInfo }
	getJSON(t, base+"/ui/api/state", &ui)
	if len(ui.Engines) != 2 || ui.Engines[0] != got.Engines[0] || ui.Engines[1] != got.Engines[1] {
		t.Errorf("dashboard engines %+v, /v1/engines %+v", ui.Engines, got.Engines)
	}
	t.Run("page", func(t *testing.T) {
		b := startBrowser(t, chromium(t))
		b.open(base+"/ui/", `document.getElementById("status").textContent === "live"`)
		b.screenshot("dashboard-engines", "", 1400)
		rows := cells(t, b.dom(), "engines")
		if len(rows) != 2 {
			t.Fatalf("engines table %q, want main and x", rows)
		}
		for i, name := range []string{"main", "x"} {
			if r := rows[i]; r[0] != name || r[1] != "up" || r[2] != "0 / 1" || r[3] != "1" || r[4] != "0" ||
				r[5] != strconv.FormatInt(got.Engines[i].Transfers, 10) {
				t.Errorf("engines row %q, want %s up, 0 / 1 sessions, 1 placed, 0 downs, %d image transfers", r, name, got.Engines[i].Transfers)
			}
		}
	})
	metrics := get(t, base+"/metrics")
	for _, want := range []string{`gymserver_engine_up{engine="x"} 1`, `gymserver_engine_sandboxes_started_total{engine="main"} 1`,
		`gymserver_engine_sessions{engine="x"} 0`, `gymserver_engine_image_transfers_total{engine="x"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// In process, the same engines: x already has the images.
	out := run("in process", append(engines, "--log-level", "INFO")...)
	for _, want := range []string{"msg=\"docker engine\" name=main", "msg=\"docker engine\" name=x"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rollout log lacks %q:\n%s", want, out)
		}
	}

	killedServeLeavesNoContainers(t, bin, engines, map[string]*client.Client{"main": dockerClient(t), "x": x.Client()})
}

// killedServeLeavesNoContainers kills a `gymserver serve` over the engines
// with SIGKILL while it holds a session on each, and checks that each
// engine's janitor removes that engine's containers (the orphan timeout,
// 10 minutes here, is not what removes them).
func killedServeLeavesNoContainers(t *testing.T, bin string, engines []string, clis map[string]*client.Client) {
	var list []*client.Client
	for _, cli := range clis {
		list = append(list, cli)
	}
	cmd, waited, ownerPrefix, url := killableServe(t, bin, list, append([]string{"--config", calculatorConfig, "--addr", "127.0.0.1:0",
		"--orphan-after", "10m", "--log-level", "WARN"}, engines...)...)
	c, err := gymclient.Dial(t.Context(), url, gymclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		if _, _, err := c.Reset(t.Context(), "calculator_api", gym.ResetRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, cli := range clis {
		owners, err := ownersWithPrefix(t.Context(), cli, ownerPrefix)
		if err != nil || len(owners) != 1 {
			t.Fatalf("engine %s: owners %q of the server's containers (%v), want one", name, owners, err)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-waited
	killed := time.Now()
	waittest.Until(t, "each engine's janitor to remove the killed server's containers", 2*time.Minute, func() (bool, error) {
		for _, cli := range clis {
			owners, err := ownersWithPrefix(t.Context(), cli, ownerPrefix)
			if err != nil || len(owners) > 0 {
				return false, err
			}
		}
		return true, nil
	})
	t.Logf("both engines clean %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(get(t, url)), v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestEngineFlags checks the parsing of --docker-host and --engines.
func TestEngineFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "engines.json")
	if err := os.WriteFile(file, []byte(`[{"host": "tcp://10.0.0.2:2376", "capacity": 8, "tls": "/certs"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	var e engineFlags
	for _, h := range []string{"unix:///var/run/docker.sock", "unix:///run/b.sock,capacity=3,name=b"} {
		if err := e.hosts.Set(h); err != nil {
			t.Fatal(err)
		}
	}
	e.file = file
	eps, err := e.endpoints()
	if err != nil {
		t.Fatal(err)
	}
	want := []fleet.Endpoint{
		{Host: "unix:///var/run/docker.sock"},
		{Name: "b", Host: "unix:///run/b.sock", Capacity: 3},
		{Host: "tcp://10.0.0.2:2376", Capacity: 8, TLSDir: "/certs"},
	}
	if len(eps) != len(want) {
		t.Fatalf("endpoints %+v, want %+v", eps, want)
	}
	for i := range want {
		if eps[i] != want[i] {
			t.Errorf("endpoint %d: %+v, want %+v", i, eps[i], want[i])
		}
	}
	for _, bad := range []string{"ssh://me@host", "unix:///s,capacity=0", "unix:///s,capacity=x", "unix:///s,size=3",
		"unix:///s,tls=/c", "ftp://h", "unix:///s,name"} {
		if err := e.hosts.Set(bad); err == nil {
			t.Errorf("--docker-host %q accepted", bad)
		}
	}
	if code := runServe(t.Context(), []string{"--config", "x.json", "--addr", "127.0.0.1:0", "--engines", filepath.Join(dir, "missing.json")}, io.Discard, io.Discard); code != 2 {
		t.Errorf("serve with a missing engines file: exit %d, want 2", code)
	}
}
