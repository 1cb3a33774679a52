package server

import (
	"cmp"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// The dashboard (Options.UI) is a read-only page under /ui/ with two data
// endpoints: /ui/api/state (JSON, one snapshot) and /ui/api/events
// (server-sent events, a full snapshot at most every uiEventPeriod when
// something changed). The step path only bumps atomic counters and a
// per-session record under a lock of its own; everything else is computed
// when a snapshot is asked for, so an open dashboard costs the steps
// almost nothing and a slow browser holds up only its own stream: every
// event is a whole state, so one it misses is simply replaced by the next.

//go:embed ui/index.html
var uiIndex []byte

const (
	// uiEpisodes is how many closed episodes the dashboard keeps.
	uiEpisodes = 200
	// uiEventPeriod is the shortest time between two events of a stream.
	uiEventPeriod = 250 * time.Millisecond
	// uiHeartbeat is the longest time a stream stays silent.
	uiHeartbeat = 15 * time.Second
	// uiWriteTimeout bounds one write to a browser.
	uiWriteTimeout = 5 * time.Second
	// uiCookie carries the token of a browser that opened /ui/?token=.
	uiCookie = "gymserver_ui_token"
	// uiMaxCommand is how much of a command the dashboard shows.
	uiMaxCommand = 200
)

// stepBounds are the upper bounds, in seconds, of the step-latency
// buckets of the dashboard: 100µs doubling to about 105 s, then +Inf.
var stepBounds = func() []float64 {
	b := make([]float64, 21)
	for i := range b {
		b[i] = 1e-4 * math.Pow(2, float64(i))
	}
	return b
}()

// liveStats is what the dashboard knows of one open session; the session
// holds it.
type liveStats struct {
	// mu guards the fields below.
	mu       sync.Mutex
	opened   time.Time
	steps    int
	lastStep time.Time
	lastCall gym.ToolCall
	lastDur  time.Duration
	done     bool
	reward   float64
}

// dashboard collects what the /ui/ pages show. A nil *dashboard records
// nothing: that is the server without --ui.
type dashboard struct {
	srv   *Server
	start time.Time
	// version changes whenever something shown changes; streams send a
	// new snapshot when it did.
	version   atomic.Uint64
	steps     atomic.Int64
	stepHist  [22]atomic.Int64 // by stepBounds, the last one +Inf
	stepNanos atomic.Int64

	// mu guards the fields below.
	mu         sync.Mutex
	recent     []uiEpisode // ring of the last uiEpisodes closed sessions
	next       int         // where the next one goes in recent
	rewardHist [10]int
	byEnv      map[string]*uiEnvTotals
}

// uiEnvTotals are the totals of the sessions of one environment that
// closed.
type uiEnvTotals struct {
	Closed    int     `json:"closed"`
	Scored    int     `json:"scored"`
	Masked    int     `json:"masked"`
	Successes int     `json:"successes"`
	RewardSum float64 `json:"reward_sum"`
}

func newDashboard(s *Server) *dashboard {
	return &dashboard{srv: s, start: time.Now(), byEnv: map[string]*uiEnvTotals{}}
}

// opened records a new session.
func (d *dashboard) opened(s *session) {
	if d == nil {
		return
	}
	s.live.mu.Lock()
	s.live.opened = time.Now()
	s.live.mu.Unlock()
	d.version.Add(1)
}

// stepped records a successful step of s that took took.
func (d *dashboard) stepped(s *session, res gym.StepResult, took time.Duration) {
	if d == nil {
		return
	}
	i, _ := slices.BinarySearch(stepBounds, took.Seconds())
	d.stepHist[i].Add(1)
	d.steps.Add(1)
	d.stepNanos.Add(int64(took))
	s.live.mu.Lock()
	s.live.steps++
	s.live.lastStep = time.Now()
	s.live.lastDur = took
	if n := len(res.ToolCalls); n > 0 {
		s.live.lastCall = res.ToolCalls[n-1]
	}
	if res.Done() {
		s.live.done, s.live.reward = true, res.Reward
	}
	s.live.mu.Unlock()
	d.version.Add(1)
}

// closed records the end of s with its close result.
func (d *dashboard) closed(s *session, r gym.Result, err error) {
	if d == nil {
		return
	}
	ep := uiEpisode{
		Session: s.id, Env: s.env, Task: r.TaskID, Steps: r.Steps, Actions: r.Actions,
		Reason: string(r.TerminationReason), AgentDone: r.AgentDone, End: r.EndTime,
	}
	if !r.StartTime.IsZero() && !r.EndTime.IsZero() {
		ep.AgentSeconds = r.EndTime.Sub(r.StartTime).Seconds()
	}
	if err != nil {
		ep.Error = err.Error()
	}
	ep.Mask = r.TerminationReason == gym.ReasonSandboxError
	if ev := r.Evaluation; ev != nil {
		reward := ev.Reward
		ep.Reward = &reward
		ep.Mask = ep.Mask || ev.Mask
		ep.TestsPassed, ep.TestsTotal = ev.Passed, ev.Total
		ep.EvalSeconds = ev.Duration.Seconds()
		ep.ErrorClass = string(ev.ErrorClass)
	}
	if ep.End.IsZero() {
		ep.End = time.Now()
	}
	d.mu.Lock()
	if len(d.recent) < uiEpisodes {
		d.recent = append(d.recent, ep)
	} else {
		d.recent[d.next] = ep
	}
	d.next = (d.next + 1) % uiEpisodes
	t := d.byEnv[s.env]
	if t == nil {
		t = &uiEnvTotals{}
		d.byEnv[s.env] = t
	}
	t.Closed++
	switch {
	case ep.Mask:
		t.Masked++
	case ep.Reward != nil:
		t.Scored++
		t.RewardSum += *ep.Reward
		if *ep.Reward >= 1 {
			t.Successes++
		}
		d.rewardHist[min(max(int(*ep.Reward*10), 0), 9)]++
	}
	d.mu.Unlock()
	d.version.Add(1)
}

// uiState is the JSON of /ui/api/state and of every event.
type uiState struct {
	Time          time.Time               `json:"time"`
	UptimeSeconds float64                 `json:"uptime_seconds"`
	Instance      string                  `json:"instance"`
	Version       string                  `json:"version"`
	Draining      bool                    `json:"draining"`
	Connections   []uiConn                `json:"connections"`
	Sessions      []uiSession             `json:"sessions"`
	Envs          []uiEnv                 `json:"envs"`
	Episodes      []uiEpisode             `json:"episodes"`
	Rewards       []int                   `json:"reward_histogram"`
	StepLatency   []uiBucket              `json:"step_latency"`
	Steps         int64                   `json:"steps"`
	MeanStepMS    float64                 `json:"mean_step_ms"`
	Snapshots     float64                 `json:"snapshots"`
	Containers    float64                 `json:"containers"`
	Errors        map[string]float64      `json:"errors"`
	Requests      map[string]float64      `json:"requests"`
	Totals        map[string]*uiEnvTotals `json:"totals"`
	// Engines is Options.Engines() when the server has several engines,
	// and EnginePools their warm pools by engine name.
	Engines     any                            `json:"engines,omitempty"`
	EnginePools map[string]*sandbox.PoolCounts `json:"engine_pools,omitempty"`
}

// uiConn is one WebSocket connection.
type uiConn struct {
	Remote   string `json:"remote"`
	Sessions int    `json:"sessions"`
	Inflight int64  `json:"inflight"`
}

// uiSession is one open session.
type uiSession struct {
	ID          string  `json:"id"`
	Env         string  `json:"env"`
	Conn        string  `json:"conn"`
	AgeSeconds  float64 `json:"age_seconds"`
	IdleSeconds float64 `json:"idle_seconds"`
	Steps       int     `json:"steps"`
	LastCommand string  `json:"last_command"`
	LastStepMS  float64 `json:"last_step_ms"`
	// State is "running", "stepping" (a request is queued or running),
	// "done" (the episode ended; the session is not closed yet) or
	// "closing".
	State  string   `json:"state"`
	Reward *float64 `json:"reward,omitempty"`
}

// uiEnv sums the open sessions of one environment.
type uiEnv struct {
	ID       string `json:"id"`
	Sessions int    `json:"sessions"`
	Snapshot bool   `json:"snapshot"`
	// Pool sums the environment's warm pools; nil until a reset asks
	// for one, and without a warm pool.
	Pool *sandbox.PoolCounts `json:"pool,omitempty"`
}

// uiEpisode is one closed session.
type uiEpisode struct {
	Session     string   `json:"session"`
	Env         string   `json:"env"`
	Task        string   `json:"task"`
	Steps       int      `json:"steps"`
	Actions     int      `json:"actions"`
	Reason      string   `json:"reason"`
	AgentDone   bool     `json:"agent_done"`
	Reward      *float64 `json:"reward"`
	Mask        bool     `json:"mask"`
	TestsPassed int      `json:"tests_passed"`
	TestsTotal  int      `json:"tests_total"`
	// AgentSeconds is the agent's part: from the reset to the end of the
	// episode (EndTime of gym.Result), the evaluation not included.
	AgentSeconds float64   `json:"agent_seconds"`
	EvalSeconds  float64   `json:"eval_seconds"`
	ErrorClass   string    `json:"error_class,omitempty"`
	Error        string    `json:"error,omitempty"`
	End          time.Time `json:"end"`
}

// uiBucket is one bucket of a histogram: the values up to LE seconds
// (+Inf for the last, written as 0 with Inf true).
type uiBucket struct {
	LE    float64 `json:"le"`
	Inf   bool    `json:"inf,omitempty"`
	Count int64   `json:"count"`
}

// state returns a snapshot of everything the dashboard shows. Locks are
// never nested: the server's, then each session's, then the dashboard's,
// one at a time.
func (d *dashboard) state() uiState {
	s := d.srv
	now := time.Now()
	st := uiState{
		Time: now, UptimeSeconds: now.Sub(d.start).Seconds(),
		Instance: s.opts.Instance, Version: s.opts.Version, Draining: s.draining.Load(),
		Connections: []uiConn{}, Sessions: []uiSession{}, Episodes: []uiEpisode{},
	}
	s.mu.Lock()
	sessions := slices.Collect(maps.Keys(s.sessions))
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()

	perConn := map[*conn]int{}
	perEnv := map[string]int{}
	for _, sess := range sessions {
		perConn[sess.conn]++
		perEnv[sess.env]++
		sess.mu.Lock()
		pending, closing, lastUsed := sess.pending, sess.closing, sess.lastUsed
		sess.mu.Unlock()
		l := &sess.live
		l.mu.Lock()
		u := uiSession{
			ID: sess.id, Env: sess.env, Conn: sess.conn.ws.RemoteAddr().String(),
			AgeSeconds: now.Sub(l.opened).Seconds(), IdleSeconds: now.Sub(lastUsed).Seconds(),
			Steps: l.steps, LastStepMS: float64(l.lastDur) / 1e6, LastCommand: describeCall(l.lastCall),
			State: "running",
		}
		if l.done {
			reward := l.reward
			u.State, u.Reward = "done", &reward
		}
		l.mu.Unlock()
		switch {
		case closing:
			u.State = "closing"
		case pending > 0 && u.State == "running":
			u.State = "stepping"
		}
		st.Sessions = append(st.Sessions, u)
	}
	slices.SortFunc(st.Sessions, func(a, b uiSession) int {
		return cmp.Or(cmp.Compare(a.Env, b.Env), cmp.Compare(b.AgeSeconds, a.AgeSeconds), cmp.Compare(a.ID, b.ID))
	})
	for _, c := range conns {
		st.Connections = append(st.Connections, uiConn{Remote: c.ws.RemoteAddr().String(), Sessions: perConn[c], Inflight: c.inflight.Load()})
	}
	slices.SortFunc(st.Connections, func(a, b uiConn) int { return cmp.Compare(a.Remote, b.Remote) })
	poolsByEnv, poolsByEngine := s.poolTotals()
	for _, spec := range s.opts.Registry.Specs() {
		_, fork := s.forkers[spec.ID]
		st.Envs = append(st.Envs, uiEnv{ID: spec.ID, Sessions: perEnv[spec.ID], Snapshot: fork, Pool: poolsByEnv[spec.ID]})
	}
	if s.opts.Engines != nil {
		st.Engines, st.EnginePools = s.opts.Engines(), poolsByEngine
	}

	st.Steps = d.steps.Load()
	if st.Steps > 0 {
		st.MeanStepMS = float64(d.stepNanos.Load()) / float64(st.Steps) / 1e6
	}
	for i := range d.stepHist {
		b := uiBucket{Count: d.stepHist[i].Load()}
		if i < len(stepBounds) {
			b.LE = stepBounds[i]
		} else {
			b.Inf = true
		}
		st.StepLatency = append(st.StepLatency, b)
	}

	d.mu.Lock()
	st.Rewards = slices.Clone(d.rewardHist[:])
	// Newest first.
	for i := range d.recent {
		st.Episodes = append(st.Episodes, d.recent[(d.next-1-i+2*len(d.recent))%len(d.recent)])
	}
	st.Totals = make(map[string]*uiEnvTotals, len(d.byEnv))
	for env, t := range d.byEnv {
		c := *t
		st.Totals[env] = &c
	}
	d.mu.Unlock()

	st.Errors, st.Requests = map[string]float64{}, map[string]float64{}
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		s.log.Debug("dashboard: gather metrics", "err", err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "gymserver_errors_total":
			labelled(mf, "code", st.Errors)
		case "gymserver_requests_total":
			labelled(mf, "op", st.Requests)
		case "gymserver_snapshots":
			st.Snapshots = gaugeOf(mf)
		case "gymserver_containers":
			st.Containers = gaugeOf(mf)
		}
	}
	return st
}

// labelled adds the counters of mf by the value of label to into.
func labelled(mf *dto.MetricFamily, label string, into map[string]float64) {
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				into[lp.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
}

func gaugeOf(mf *dto.MetricFamily) float64 {
	if ms := mf.GetMetric(); len(ms) > 0 {
		return ms[0].GetGauge().GetValue()
	}
	return 0
}

// describeCall is how the dashboard shows a tool call: its name and, for
// a command, the command (cut to uiMaxCommand bytes).
func describeCall(c gym.ToolCall) string {
	if c.Function.Name == "" {
		return ""
	}
	text := c.Function.Name + " " + c.Function.Arguments
	if c.Function.Name == gym.ToolExecuteCommand {
		var args struct {
			Command string `json:"command"`
		}
		if json.Unmarshal([]byte(c.Function.Arguments), &args) == nil && args.Command != "" {
			text = "$ " + args.Command
		}
	}
	if len(text) > uiMaxCommand {
		text = text[:uiMaxCommand] + "…"
	}
	return text
}

// routes mounts the dashboard under /ui/.
func (d *dashboard) routes(r chi.Router) {
	r.Get("/ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	r.Route("/ui/", func(r chi.Router) {
		r.Use(d.authenticate)
		r.Get("/", d.index)
		r.Get("/api/state", d.stateJSON)
		r.Get("/api/events", d.events)
	})
}

// authenticate lets through requests that carry the server's token: as a
// bearer token (scripts), or in the cookie that a first visit to
// /ui/?token=T sets (browsers, which cannot add a header to a link nor to
// an EventSource). The visit with ?token= is redirected at once to the
// same page without it, so the token does not stay in the address bar nor
// in the history.
func (d *dashboard) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := d.srv.opts.Token
		if want == "" {
			next.ServeHTTP(w, r)
			return
		}
		same := func(got string) bool { return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 }
		if q := r.URL.Query(); q.Has("token") {
			if !same(q.Get("token")) {
				d.srv.httpError(w, http.StatusUnauthorized, gym.Errorf(gym.ClassUnauthenticated, "wrong token"))
				return
			}
			http.SetCookie(w, &http.Cookie{
				Name: uiCookie, Value: want, Path: "/ui/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
			})
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if tok, ok := bearerToken(r.Header.Get("Authorization")); ok && same(tok) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(uiCookie); err == nil && same(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="gymserver"`)
		d.srv.httpError(w, http.StatusUnauthorized, gym.Errorf(gym.ClassUnauthenticated,
			"the dashboard needs the server's token: open /ui/?token=TOKEN once, or send Authorization: Bearer TOKEN"))
	})
}

func (d *dashboard) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page loads nothing from elsewhere.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
	w.Write(uiIndex)
}

func (d *dashboard) stateJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(d.state())
}

// events streams the state as server-sent events ("event: state") until
// the browser goes, a write takes longer than uiWriteTimeout, or the
// server drains. Each event is the whole state, sent at most every
// uiEventPeriod and only when something changed (or as a heartbeat), so
// nothing queues up for a slow browser.
func (d *dashboard) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	send := func() bool {
		b, err := json.Marshal(d.state())
		if err != nil {
			return false
		}
		rc.SetWriteDeadline(time.Now().Add(uiWriteTimeout))
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// retry: how long the browser waits before it reconnects.
	fmt.Fprint(w, "retry: 2000\n\n")
	sent, last := d.version.Load(), time.Now()
	if !send() {
		return
	}
	t := time.NewTicker(uiEventPeriod)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-d.srv.baseCtx.Done():
			return
		case now := <-t.C:
			v := d.version.Load()
			if v == sent && now.Sub(last) < uiHeartbeat {
				continue
			}
			sent, last = v, now
			if !send() {
				return
			}
		}
	}
}
