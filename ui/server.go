// Package ui is the server of `clusterlab ui`: a local web view of a scenario's cluster
// in which a packet's way is drawn node by node and hook by hook.
//
// It serves the page (plain HTML, CSS and JavaScript embedded in the binary: no CDN, no
// build step) and a JSON API for the one scenario it was given, and nothing else: no
// file is read after the scenario was loaded. The API:
//
//	GET /api/cluster    the cluster (scenario.ClusterView): nodes, pods with labels and
//	                    IPs, Services with every address and the pods backing them,
//	                    external hosts, the scenario's steps and the modes of this build;
//	                    after_step=N: as it is after the first N steps
//	GET /api/trace      trace one packet: from, to (required), port, proto, mode,
//	                    all_branches, reply, after_step; format json (default: the same
//	                    structure as `clusterlab trace SCENARIO -o json`), text (its text
//	                    output), svg (the vertical picture of trace --svg) or page (all
//	                    three: {trace, text, svg})
//	GET /api/timeline   the scenario's steps run one after another (mode): a
//	                    scenario.StepState a step, with the endpoints and conntrack
//	                    entries after it
//	GET /api/flows      Server-Sent Events: the scenario's steps run (mode), their
//	                    connect steps with real sockets (via netstack), while live
//	                    flows (netsim's TraceFlows) are traced; an event a step and a
//	                    flow (the first 80 packets of each step), then "done"
//
// A bad query is answered 400 with {"error": "FIELD: what is wrong", "field": FIELD}.
package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/clusterlab/clusterlab/scenario"
)

//go:embed assets
var assets embed.FS

// Server serves one scenario.
type Server struct {
	// AnyHost serves requests whatever host they name. Otherwise only requests to a
	// loopback address or localhost are served (403 for others): a web page elsewhere
	// cannot reach a loopback server through a DNS name of its own that it points at
	// 127.0.0.1 (DNS rebinding). `clusterlab ui --allow-remote` sets it.
	AnyHost bool

	s    *scenario.Scenario
	view *scenario.ClusterView
	// traces bounds the traces built at once (each builds the cluster afresh).
	traces chan struct{}

	mu        sync.Mutex
	timelines map[string]*timeline          // by mode
	views     map[int]*scenario.ClusterView // after N steps
}

type timeline struct {
	once   sync.Once
	states []scenario.StepState
	err    error
}

// New builds the scenario's cluster once, to describe it, and returns its server.
func New(s *scenario.Scenario) (*Server, error) {
	ss, err := scenario.Open(s, "")
	if err != nil {
		return nil, err
	}
	defer ss.Close()
	return &Server{s: s, view: ss.View(), traces: make(chan struct{}, 2), timelines: map[string]*timeline{}, views: map[int]*scenario.ClusterView{}}, nil
}

// View is the cluster the server shows.
func (srv *Server) View() *scenario.ClusterView { return srv.view }

// Handler returns the server's HTTP handler.
func (srv *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServer(http.FS(static))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := assets.ReadFile("assets/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b)
	})
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", files))
	mux.HandleFunc("GET /api/cluster", srv.cluster)
	mux.HandleFunc("GET /api/trace", srv.trace)
	mux.HandleFunc("GET /api/timeline", srv.timeline)
	mux.HandleFunc("GET /api/flows", srv.flows)
	return srv.headers(mux)
}

// loopbackHost says whether a request's Host names this machine: localhost or a
// loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// headers refuses requests to other hosts (see AnyHost) and keeps the page to its own
// origin's assets.
func (srv *Server) headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !srv.AnyHost && !loopbackHost(r.Host) {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf("host %q: this server answers requests to localhost or a loopback address only (clusterlab ui --allow-remote serves others)", r.Host)})
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// queryError is a bad query: the field it names and what is wrong.
type queryError struct{ field, msg string }

func (e *queryError) Error() string { return e.field + ": " + e.msg }

func badQuery(field, format string, args ...any) error {
	return &queryError{field, fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var qe *queryError
	if errors.As(err, &qe) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": qe.Error(), "field": qe.field})
		return
	}
	writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
}

func (srv *Server) cluster(w http.ResponseWriter, r *http.Request) {
	if err := onlyParams(r, "after_step"); err != nil {
		writeError(w, err)
		return
	}
	n := 0
	if s := r.URL.Query().Get("after_step"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 0 || n > len(srv.view.Steps) {
			writeError(w, badQuery("after_step", "%q: want 0-%d (the scenario has %d steps)", s, len(srv.view.Steps), len(srv.view.Steps)))
			return
		}
	}
	v, err := srv.ViewAfter(r.Context(), n)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// ViewAfter is the cluster after the scenario's first n steps (under its own mode).
func (srv *Server) ViewAfter(ctx context.Context, n int) (*scenario.ClusterView, error) {
	if n == 0 {
		return srv.view, nil
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if v := srv.views[n]; v != nil {
		return v, nil
	}
	ss, err := scenario.Open(srv.s, "")
	if err != nil {
		return nil, err
	}
	defer ss.Close()
	for i := 0; i < n; i++ {
		if _, err := ss.Step(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
	}
	v := ss.View()
	srv.views[n] = v
	return v, nil
}

// onlyParams refuses a query with a parameter not in allowed.
func onlyParams(r *http.Request, allowed ...string) error {
	for k := range r.URL.Query() {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return badQuery(k, "unknown query parameter: this takes none")
			}
			return badQuery(k, "unknown query parameter: want %s", strings.Join(allowed, ", "))
		}
	}
	return nil
}

var traceParams = []string{"from", "to", "port", "proto", "mode", "all_branches", "reply", "after_step", "format"}

// TraceQuery is a parsed /api/trace query.
type TraceQuery struct {
	Opts   scenario.TraceOptions
	Format string
}

// ParseTraceQuery checks a /api/trace query against the loaded scenario.
func (srv *Server) ParseTraceQuery(r *http.Request) (TraceQuery, error) {
	var q TraceQuery
	if err := onlyParams(r, traceParams...); err != nil {
		return q, err
	}
	v := r.URL.Query()
	for k, vs := range v {
		if len(vs) > 1 {
			return q, badQuery(k, "given %d times", len(vs))
		}
	}
	q.Opts.From, q.Opts.To = strings.TrimSpace(v.Get("from")), strings.TrimSpace(v.Get("to"))
	if q.Opts.From == "" {
		return q, badQuery("from", "required: pod:NS/NAME, node:NAME or external:NAME")
	}
	if q.Opts.To == "" {
		return q, badQuery("to", "required: NAME[:PORT], IP[:PORT], service:NS/NAME:PORT, nodeport:NS/NAME[:PORT]@NODE, pod:NS/NAME:PORT, ...")
	}
	if s := v.Get("port"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return q, badQuery("port", "%q: want a port in 1-65535", s)
		}
		q.Opts.Port = p
	}
	q.Opts.Proto = strings.ToLower(v.Get("proto"))
	if q.Opts.Proto != "" && q.Opts.Proto != "tcp" && q.Opts.Proto != "udp" && q.Opts.Proto != "sctp" {
		return q, badQuery("proto", "%q: want tcp, udp or sctp", v.Get("proto"))
	}
	q.Opts.Mode = v.Get("mode")
	if q.Opts.Mode != "" && !slices.Contains(srv.view.Modes, q.Opts.Mode) {
		return q, badQuery("mode", "%q: this build has %s", q.Opts.Mode, strings.Join(srv.view.Modes, ", "))
	}
	var err error
	if q.Opts.AllBranches, err = boolParam(v.Get("all_branches"), "all_branches"); err != nil {
		return q, err
	}
	if q.Opts.Reply, err = boolParam(v.Get("reply"), "reply"); err != nil {
		return q, err
	}
	if s := v.Get("after_step"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > len(srv.view.Steps) {
			return q, badQuery("after_step", "%q: want 0-%d (the scenario has %d steps)", s, len(srv.view.Steps), len(srv.view.Steps))
		}
		q.Opts.AfterStep = n
	}
	q.Format = v.Get("format")
	switch q.Format {
	case "":
		q.Format = "json"
	case "json", "text", "svg", "page":
	default:
		return q, badQuery("format", "%q: want json, text, svg or page", q.Format)
	}
	return q, nil
}

func boolParam(s, field string) (bool, error) {
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badQuery(field, "%q: want true or false", s)
	}
	return b, nil
}

// Trace traces the packet a query names.
func (srv *Server) Trace(ctx context.Context, opts scenario.TraceOptions) (*scenario.TraceResult, error) {
	select {
	case srv.traces <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-srv.traces }()
	res, err := scenario.Trace(ctx, srv.s, opts)
	var se *scenario.Error
	if errors.As(err, &se) && se.Field != "" {
		// The CLI's flag names (--from, --to, ...) are the query's fields here.
		f := strings.ReplaceAll(strings.TrimPrefix(se.Field, "--"), "-", "_")
		return nil, badQuery(f, "%s", se.Msg)
	}
	return res, err
}

func (srv *Server) trace(w http.ResponseWriter, r *http.Request) {
	q, err := srv.ParseTraceQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := srv.Trace(r.Context(), q.Opts)
	if err != nil {
		writeError(w, err)
		return
	}
	switch q.Format {
	case "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		res.WriteText(w)
	case "svg":
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Write(res.VerticalSVG())
	case "page":
		var text strings.Builder
		res.WriteText(&text)
		writeJSON(w, http.StatusOK, struct {
			Trace *scenario.TraceResult `json:"trace"`
			Text  string                `json:"text"`
			SVG   string                `json:"svg"`
		}{res, text.String(), string(res.VerticalSVG())})
	default:
		b, err := res.JSON()
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}
}

func (srv *Server) modeParam(r *http.Request) (string, error) {
	if err := onlyParams(r, "mode"); err != nil {
		return "", err
	}
	m := r.URL.Query().Get("mode")
	if m != "" && !slices.Contains(srv.view.Modes, m) {
		return "", badQuery("mode", "%q: this build has %s", m, strings.Join(srv.view.Modes, ", "))
	}
	if m == "" {
		m = srv.view.Mode
	}
	return m, nil
}

// Timeline runs the scenario's steps under mode once and keeps the states.
func (srv *Server) Timeline(ctx context.Context, mode string) ([]scenario.StepState, error) {
	srv.mu.Lock()
	tl := srv.timelines[mode]
	if tl == nil {
		tl = &timeline{}
		srv.timelines[mode] = tl
	}
	srv.mu.Unlock()
	tl.once.Do(func() {
		ss, err := scenario.Open(srv.s, mode)
		if err != nil {
			tl.err = err
			return
		}
		defer ss.Close()
		for !ss.Done() {
			st, err := ss.Step(context.WithoutCancel(ctx))
			if err != nil {
				tl.err = err
				return
			}
			tl.states = append(tl.states, st)
		}
	})
	return tl.states, tl.err
}

func (srv *Server) timeline(w http.ResponseWriter, r *http.Request) {
	mode, err := srv.modeParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	states, err := srv.Timeline(r.Context(), mode)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Mode  string               `json:"mode"`
		Steps []scenario.StepState `json:"steps"`
	}{mode, states})
}
