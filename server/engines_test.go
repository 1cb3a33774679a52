package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gymserver/gymserver/server"
)

// TestEnginesEndpointAndCollectors checks Options.Engines (/v1/engines,
// behind the token) and Options.Collectors (in /metrics); the real fleet
// behind them is tested by TestServeAndRolloutOverTwoEngines.
func TestEnginesEndpointAndCollectors(t *testing.T) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gymserver_engine_up", Help: "test"}, []string{"engine"})
	g.WithLabelValues("e1").Set(1)
	ts := startServer(t, server.Options{
		Token:      "tok",
		Engines:    func() any { return []map[string]any{{"name": "e1", "up": true}} },
		Collectors: []prometheus.Collector{g},
	}, nil)
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+ts.addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v1/engines", ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/engines without the token: %d, want 401", code)
	}
	if code, body := get("/v1/engines", "tok"); code != http.StatusOK || strings.TrimSpace(body) != `{"engines":[{"name":"e1","up":true}]}` {
		t.Errorf("/v1/engines: %d %s", code, body)
	}
	if _, body := get("/metrics", ""); !strings.Contains(body, `gymserver_engine_up{engine="e1"} 1`) {
		t.Errorf("/metrics lacks the collector's series")
	}
	plain := startServer(t, server.Options{}, nil)
	resp, err := http.Get("http://" + plain.addr + "/v1/engines")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/v1/engines on a server without engines: %d, want 404", resp.StatusCode)
	}
}
