package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
	"github.com/gymserver/gymserver/server"
)

// uiState is the part of /ui/api/state the tests read.
type uiState struct {
	Steps    int64 `json:"steps"`
	Sessions []struct {
		ID          string   `json:"id"`
		Env         string   `json:"env"`
		Conn        string   `json:"conn"`
		Steps       int      `json:"steps"`
		LastCommand string   `json:"last_command"`
		State       string   `json:"state"`
		Reward      *float64 `json:"reward"`
	} `json:"sessions"`
	Connections []struct {
		Sessions int `json:"sessions"`
	} `json:"connections"`
	Envs []struct {
		ID       string `json:"id"`
		Sessions int    `json:"sessions"`
	} `json:"envs"`
	Episodes []struct {
		Session     string   `json:"session"`
		Task        string   `json:"task"`
		Reward      *float64 `json:"reward"`
		Reason      string   `json:"reason"`
		Mask        bool     `json:"mask"`
		Steps       int      `json:"steps"`
		TestsPassed int      `json:"tests_passed"`
		TestsTotal  int      `json:"tests_total"`
	} `json:"episodes"`
	Rewards     []int `json:"reward_histogram"`
	StepLatency []struct {
		Count int64 `json:"count"`
	} `json:"step_latency"`
	Errors map[string]float64 `json:"errors"`
	Totals map[string]struct {
		Closed    int     `json:"closed"`
		Scored    int     `json:"scored"`
		RewardSum float64 `json:"reward_sum"`
	} `json:"totals"`
}

// getState reads /ui/api/state with the bearer token tok.
func getState(t *testing.T, ts *testServer, tok string) uiState {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+ts.addr+"/ui/api/state", nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("state: %s: %s", resp.Status, b)
	}
	var st uiState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestUIStateFollowsSessions(t *testing.T) {
	ts := startServer(t, server.Options{UI: true, Token: "tok"}, nil)
	c := dial(t, ts, gymclient.Options{Token: "tok"})
	ctx := t.Context()

	st := getState(t, ts, "tok")
	if len(st.Sessions) != 0 || len(st.Episodes) != 0 || st.Steps != 0 {
		t.Fatalf("fresh server: %+v", st)
	}
	s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{Task: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c1", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}); err != nil {
		t.Fatal(err)
	}
	st = getState(t, ts, "tok")
	if len(st.Sessions) != 1 || len(st.Connections) != 1 || st.Connections[0].Sessions != 1 {
		t.Fatalf("one session on one connection: %+v", st)
	}
	got := st.Sessions[0]
	if got.ID != s.ID() || got.Env != "mem" || got.Steps != 1 || got.LastCommand != "$ echo hi" || got.State != "running" || got.Conn == "" {
		t.Errorf("session: %+v", got)
	}
	if st.Steps != 1 || st.Envs[0].ID != "mem" || st.Envs[0].Sessions != 1 {
		t.Errorf("steps %d, envs %+v", st.Steps, st.Envs)
	}
	var n int64
	for _, b := range st.StepLatency {
		n += b.Count
	}
	if n != 1 {
		t.Errorf("step latency histogram holds %d steps, want 1", n)
	}

	// Solve the task: the session is done, then closed into an episode.
	if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c2", gym.ToolWriteFile, `{"filepath":"a.txt","content":"hello"}`)}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c3", gym.ToolMarkDone, `{}`)}})
	if err != nil || res.Reward != 1 {
		t.Fatalf("mark_done: reward %v, %v", res.Reward, err)
	}
	st = getState(t, ts, "tok")
	if got := st.Sessions[0]; got.State != "done" || got.Reward == nil || *got.Reward != 1 || got.Steps != 3 {
		t.Errorf("done session: %+v", got)
	}
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A second episode, closed unfinished: no reward.
	s2, _, err := c.Reset(ctx, "mem", gym.ResetRequest{Task: "two"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// An error response is counted by code.
	if _, err := s2.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c4", gym.ToolExecuteCommand, `{"command":"true"}`)}}); err == nil {
		t.Fatal("step on a closed session succeeded")
	}

	st = getState(t, ts, "tok")
	if len(st.Sessions) != 0 || len(st.Episodes) != 2 {
		t.Fatalf("after close: %d sessions, %d episodes", len(st.Sessions), len(st.Episodes))
	}
	// Newest first.
	e0, e1 := st.Episodes[0], st.Episodes[1]
	if e0.Session != s2.ID() || e0.Reward != nil || e0.Reason != string(gym.ReasonClosed) {
		t.Errorf("unfinished episode: %+v", e0)
	}
	if e1.Session != s.ID() || e1.Reward == nil || *e1.Reward != 1 || e1.Reason != string(gym.ReasonCompleted) || e1.Mask || e1.Steps != 3 || e1.TestsPassed != e1.TestsTotal || e1.TestsTotal == 0 {
		t.Errorf("solved episode: %+v", e1)
	}
	if st.Rewards[9] != 1 || sum(st.Rewards) != 1 {
		t.Errorf("reward histogram %v, want one episode in the last bin", st.Rewards)
	}
	if tot := st.Totals["mem"]; tot.Closed != 2 || tot.Scored != 1 || tot.RewardSum != 1 {
		t.Errorf("totals %+v", tot)
	}
	if st.Errors[string(gym.ClassEpisodeDone)] != 1 {
		t.Errorf("errors %v, want one %s", st.Errors, gym.ClassEpisodeDone)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func TestUIAuth(t *testing.T) {
	ts := startServer(t, server.Options{UI: true, Token: "s3cret"}, nil)
	base := "http://" + ts.addr
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, header http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/ui/", "/ui/api/state", "/ui/api/events"} {
		if r := get(path, nil); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %s", path, r.Status)
		}
		if r := get(path, http.Header{"Authorization": {"Bearer wrong"}}); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %s", path, r.Status)
		}
		if r := get(path, http.Header{"Cookie": {"gymserver_ui_token=wrong"}}); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong cookie: %s", path, r.Status)
		}
	}
	if r := get("/ui/?token=wrong", nil); r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
		t.Errorf("?token=wrong: %s, cookies %v", r.Status, r.Cookies())
	}
	r := get("/ui/?token=s3cret", nil)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/ui/" {
		t.Fatalf("?token=: %s, Location %q", r.Status, r.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range r.Cookies() {
		if c.Name == "gymserver_ui_token" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/ui/" {
		t.Fatalf("cookie %+v", cookie)
	}
	if r := get("/ui/api/state", http.Header{"Cookie": {cookie.String()}}); r.StatusCode != 200 {
		t.Errorf("state with the cookie: %s", r.Status)
	}
	if r := get("/ui/", http.Header{"Authorization": {"Bearer s3cret"}}); r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Errorf("page with the bearer token: %s %s", r.Status, r.Header.Get("Content-Type"))
	}
	// The dashboard's cookie opens nothing but the dashboard.
	if r := get("/v1/envs", http.Header{"Cookie": {cookie.String()}}); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("/v1/envs with the dashboard cookie: %s", r.Status)
	}
}

func TestUIOffByDefault(t *testing.T) {
	ts := startServer(t, server.Options{}, nil)
	for _, path := range []string{"/ui/", "/ui/api/state", "/ui/api/events"} {
		resp, err := http.Get("http://" + ts.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s without UI: %s, want 404", path, resp.Status)
		}
	}
}

// readEvent reads the next server-sent event's data line of type state.
func readEvent(t *testing.T, r *bufio.Reader) uiState {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "state":
			var st uiState
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &st); err != nil {
				t.Fatal(err)
			}
			return st
		}
	}
}

func TestUIEventsStreamChanges(t *testing.T) {
	ts := startServer(t, server.Options{UI: true}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ts.addr+"/ui/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if st := readEvent(t, r); st.Steps != 0 || len(st.Sessions) != 0 {
		t.Fatalf("first event: %+v", st)
	}
	c := dial(t, ts, gymclient.Options{})
	s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	// Events come until one shows all five steps; intermediate ones may
	// have been coalesced.
	for {
		st := readEvent(t, r)
		if st.Steps > 5 {
			t.Fatalf("%d steps, want at most 5", st.Steps)
		}
		if st.Steps == 5 {
			if len(st.Sessions) != 1 || st.Sessions[0].Steps != 5 {
				t.Fatalf("event: %+v", st)
			}
			break
		}
	}
}

// TestUIStalledBrowser opens an event stream that is never read and
// checks that steps go on, and that the server drains promptly: the
// stream does not hold up the shutdown.
func TestUIStalledBrowser(t *testing.T) {
	ts := startServer(t, server.Options{UI: true}, memEnv().SetMaxActions(100000))
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, "GET /ui/api/events HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Shrink what the stalled side takes in, so the server's writes block
	// soon.
	nc.(*net.TCPConn).SetReadBuffer(4096)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	s, _, err := c.Reset(ctx, "mem", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const steps = 3000
	for range steps {
		if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c", gym.ToolExecuteCommand, `{"command":"echo hi"}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d steps with a stalled event stream open in %s", steps, time.Since(start))
	if st := getState(t, ts, ""); st.Steps != steps {
		t.Errorf("state says %d steps, want %d", st.Steps, steps)
	}
	c.Close()
	done := make(chan error, 1)
	go func() { done <- ts.stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown held up by a stalled event stream")
	}
}

// uiPoolState is the part of /ui/api/state that shows the warm pools.
type uiPoolState struct {
	Envs []struct {
		ID   string `json:"id"`
		Pool *struct {
			Target   int   `json:"target"`
			Ready    int   `json:"ready"`
			Starting int   `json:"starting"`
			FromPool int64 `json:"from_pool"`
			Cold     int64 `json:"cold"`
		} `json:"pool"`
	} `json:"envs"`
}

// TestUIStateShowsWarmPool serves the calculator_api example on a real
// Docker provider with a warm pool of 2 and checks that the dashboard and
// /metrics follow the pool: cold first reset, the pool filling to 2, the
// next reset served from it.
func TestUIStateShowsWarmPool(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	p, _ := dockertest.NewWith(t, docker.Options{WarmPool: 2})
	cfg, err := config.Load(calculatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := envs.NewRegistry(t.Context(), cfg, envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Options{Registry: reg, UI: true, Token: "tok"}, nil)
	env := cfg.Environments[0].ID
	get := func() uiPoolState {
		t.Helper()
		var st uiPoolState
		req, _ := http.NewRequest("GET", "http://"+ts.addr+"/ui/api/state", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Envs) != 1 || st.Envs[0].ID != env {
			t.Fatalf("state: %+v, %v; want environment %s", st, err, env)
		}
		return st
	}
	pool := func() uiPoolState {
		t.Helper()
		st := get()
		if st.Envs[0].Pool == nil {
			t.Fatalf("state: %+v; want the pool of %s", st, env)
		}
		return st
	}
	if got := get().Envs[0].Pool; got != nil {
		t.Fatalf("pool before any reset: %+v, want none yet", got)
	}

	ctx := t.Context()
	c := dial(t, ts, gymclient.Options{Token: "tok"})
	s1, _, err := c.Reset(ctx, env, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close(context.WithoutCancel(ctx))
	waittest.For(t, "the warm pool to hold 2 ready sandboxes", 3*time.Minute, func() bool {
		return pool().Envs[0].Pool.Ready == 2
	})
	if got := *pool().Envs[0].Pool; got.Target != 2 || got.Cold != 1 || got.FromPool != 0 {
		t.Errorf("pool after a cold reset: %+v, want target 2, cold 1, from_pool 0", got)
	}

	s2, _, err := c.Reset(ctx, env, gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.WithoutCancel(ctx))
	got := *pool().Envs[0].Pool
	if got.FromPool != 1 || got.Cold != 1 || got.Ready+got.Starting > 2 {
		t.Errorf("pool after a pooled reset: %+v, want from_pool 1, cold 1", got)
	}
	// The session it got works.
	res, err := s2.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("c", gym.ToolExecuteCommand, `{"command":"echo pooled"}`)}})
	if err != nil || !strings.Contains(res.Observation.Text, "pooled") {
		t.Fatalf("step in the pooled session: %+v, %v", res, err)
	}

	resp, err := http.Get("http://" + ts.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`gymserver_pool_target{env="` + env + `"} 2`,
		`gymserver_pool_resets_total{env="` + env + `",source="pool"} 1`,
		`gymserver_pool_resets_total{env="` + env + `",source="cold"} 1`,
		`gymserver_pool_recycles_total{env="` + env + `",outcome="recycled"} 0`,
		"\ngymserver_containers_removing ",
		"\ngymserver_remove_errors_total 0\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	waittest.For(t, "the warm pool to refill to 2", 3*time.Minute, func() bool {
		return pool().Envs[0].Pool.Ready == 2
	})
}
