package ui

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/clusterlab/clusterlab/scenario"
)

var (
	demoOnce sync.Once
	demoSrv  *Server
	demoErr  error
)

// demoServer is the server of the demo's scenario, built once for the package's tests.
func demoServer(t testing.TB) *Server {
	demoOnce.Do(func() {
		s, err := scenario.DemoScenario()
		if err != nil {
			demoErr = err
			return
		}
		demoSrv, demoErr = New(s)
	})
	if demoErr != nil {
		t.Fatal(demoErr)
	}
	return demoSrv
}

func get(t *testing.T, h http.Handler, url string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8080"+url, nil))
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()
}

// TestAPICluster: the cluster's JSON has the demo's nodes, pods with labels and IPs,
// and my-service with its ClusterIP and the three pods behind it.
func TestAPICluster(t *testing.T) {
	h := demoServer(t).Handler()
	code, ct, body := get(t, h, "/api/cluster")
	if code != 200 || ct != "application/json" {
		t.Fatalf("%d %s: %s", code, ct, body)
	}
	var v scenario.ClusterView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Nodes) != 3 || len(v.Modes) == 0 || v.Mode != "iptables" || len(v.Steps) != 9 {
		t.Errorf("nodes %d, modes %v, mode %s, steps %d", len(v.Nodes), v.Modes, v.Mode, len(v.Steps))
	}
	found := false
	for _, s := range v.Services {
		if s.Name == "my-service" {
			found = true
			if s.ClusterIP == "" || len(s.Backends) != 3 || !strings.HasPrefix(s.Backends[0], "default/my-app-") {
				t.Errorf("my-service: %+v", s)
			}
		}
	}
	if !found {
		t.Error("no my-service")
	}
	// After the NodePort step, the Service has its node port.
	code, _, body = get(t, h, "/api/cluster?after_step=8")
	if code != 200 || !strings.Contains(body, `"node_port": 30007`) || !strings.Contains(body, `"after_step": 8`) {
		t.Errorf("after step 8: %d %.300s", code, body)
	}
}

// TestAPITrace: a trace through the API is the CLI's structure: the client's packet
// to the VIP is DNATed to a backend on node-a's nat/KUBE-SEP chain; the text and the
// picture say the same; every branch gives three backends, a third each.
func TestAPITrace(t *testing.T) {
	h := demoServer(t).Handler()
	code, _, body := get(t, h, "/api/trace?from=pod:default/client&to=service:default/my-service:80")
	if code != 200 {
		t.Fatalf("%d: %s", code, body)
	}
	var res scenario.TraceResult
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 1 || res.Outcomes[0].Result != "delivered" || !strings.HasPrefix(res.Outcomes[0].Pod, "default/my-app-") || res.Mode != "iptables" {
		t.Fatalf("outcomes %+v", res.Outcomes)
	}
	dnat := false
	for _, s := range res.Outcomes[0].Trace.Steps {
		dnat = dnat || s.Kind == "rule" && s.Node == "node-a" && strings.HasPrefix(s.Chain, "KUBE-SEP-") && strings.HasPrefix(s.Verdict, "DNAT")
	}
	if !dnat {
		t.Error("no DNAT rule of a KUBE-SEP chain on node-a in the trace")
	}
	// The same packet through the scenario package, as the CLI traces it.
	s, _ := scenario.DemoScenario()
	cli, err := scenario.Trace(context.Background(), s, scenario.TraceOptions{From: "pod:default/client", To: "service:default/my-service:80"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := cli.JSON()
	if string(want) != body {
		t.Error("the API's JSON differs from the CLI's for the same packet")
	}

	code, ct, text := get(t, h, "/api/trace?from=pod:default/client&to=service:default/my-service:80&format=text")
	if code != 200 || !strings.HasPrefix(ct, "text/plain") || !strings.Contains(text, "DNAT to 10.244.") {
		t.Errorf("text: %d %s\n%.300s", code, ct, text)
	}
	code, ct, svg := get(t, h, "/api/trace?from=pod:default/client&to=my-service&all_branches=true&reply=1&format=svg")
	if code != 200 || ct != "image/svg+xml" || strings.Count(svg, `class="end ok"`) != 4 || strings.Count(svg, ", probability 0.3333") != 3 {
		t.Errorf("svg: %d %s, %d ends", code, ct, strings.Count(svg, `class="end ok"`))
	}
	code, _, page := get(t, h, "/api/trace?from=external:laptop&to=service:default/my-service:80&mode=ipvs&format=page")
	var p struct {
		Trace scenario.TraceResult `json:"trace"`
		Text  string               `json:"text"`
		SVG   string               `json:"svg"`
	}
	if err := json.Unmarshal([]byte(page), &p); code != 200 || err != nil || p.Trace.Mode != "ipvs" || p.Text == "" || !strings.HasPrefix(p.SVG, "<svg") {
		t.Errorf("page: %d %v %s", code, err, page)
	}
}

// TestAPIBadQueries: a bad query is a 400 whose message names the field.
func TestAPIBadQueries(t *testing.T) {
	h := demoServer(t).Handler()
	for _, c := range []struct{ url, field, want string }{
		{"/api/trace?to=my-service", "from", "required"},
		{"/api/trace?from=pod:default/client", "to", "required"},
		{"/api/trace?from=pod:default/client&to=my-service&port=0", "port", "1-65535"},
		{"/api/trace?from=pod:default/client&to=my-service&port=x", "port", "1-65535"},
		{"/api/trace?from=pod:default/client&to=my-service&proto=icmp", "proto", "tcp, udp or sctp"},
		{"/api/trace?from=pod:default/client&to=my-service&mode=ebpf", "mode", "this build has iptables"},
		{"/api/trace?from=pod:default/client&to=my-service&all_branches=maybe", "all_branches", "true or false"},
		{"/api/trace?from=pod:default/client&to=my-service&reply=2", "reply", "true or false"},
		{"/api/trace?from=pod:default/client&to=my-service&after_step=10", "after_step", "0-9"},
		{"/api/trace?from=pod:default/client&to=my-service&format=png", "format", "json, text, svg or page"},
		{"/api/trace?from=pod:default/client&to=my-service&file=/etc/passwd", "file", "unknown query parameter"},
		{"/api/trace?from=pod:default/client&from=pod:default/x&to=my-service", "from", "given 2 times"},
		{"/api/trace?from=pods:default/client&to=my-service", "from", ""},
		{"/api/trace?from=node:node-a&to=my-service", "to", "only pods resolve cluster names"},
		{"/api/cluster?x=1", "x", "unknown query parameter: want after_step"},
		{"/api/cluster?after_step=99", "after_step", "0-9"},
		{"/api/timeline?mode=ebpf", "mode", "this build has"},
		{"/api/flows?mode=nope", "mode", "this build has"},
	} {
		code, _, body := get(t, h, c.url)
		var e struct{ Error, Field string }
		if err := json.Unmarshal([]byte(body), &e); code != 400 || err != nil || e.Field != c.field || !strings.HasPrefix(e.Error, c.field+": ") || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %s (%q)", c.url, code, body, c.field, c.want)
		}
	}
	// A query that parses but names what the cluster lacks is refused the same way,
	// naming the field (the scenario's trace says which).
	for _, c := range []struct{ url, field, want string }{
		{"/api/trace?from=pod:default/nobody&to=service:default/my-service:80", "from", "no running pod default/nobody"},
		{"/api/trace?from=pod:default/client&to=service:default/nosuch:80", "to", "no service default/nosuch"},
	} {
		code, _, body := get(t, h, c.url)
		var e struct{ Error, Field string }
		if err := json.Unmarshal([]byte(body), &e); code != 400 || err != nil || e.Field != c.field || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %s (%q)", c.url, code, body, c.field, c.want)
		}
	}
}

// TestServesOnlyItsOwn: the embedded page and assets, nothing else (no file system, no
// path tricks), and not with other methods.
func TestServesOnlyItsOwn(t *testing.T) {
	h := demoServer(t).Handler()
	code, ct, body := get(t, h, "/")
	if code != 200 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(body, `src="/assets/app.js"`) {
		t.Errorf("/: %d %s", code, ct)
	}
	for _, a := range []string{"/assets/app.js", "/assets/style.css"} {
		if code, _, _ := get(t, h, a); code != 200 {
			t.Errorf("%s: %d", a, code)
		}
	}
	for _, u := range []string{"/assets/../server.go", "/server.go", "/etc/passwd", "/assets/%2e%2e/server.go", "/api/nothing", "/demo.yaml"} {
		if code, _, body := get(t, h, u); code == 200 {
			t.Errorf("%s served: %.100s", u, body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "http://localhost:8080/api/cluster", strings.NewReader("{}")))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/cluster: %d", rec.Code)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("no CSP: %q", csp)
	}
}

// TestOnlyLoopbackHosts: a request naming another host (a DNS name a web page pointed at
// 127.0.0.1) is refused unless AnyHost; loopback addresses and localhost are served.
func TestOnlyLoopbackHosts(t *testing.T) {
	h := demoServer(t).Handler()
	for host, want := range map[string]int{"127.0.0.1:8080": 200, "localhost": 200, "LOCALHOST:1": 200, "[::1]:8080": 200, "127.1.2.3": 200,
		"evil.example:8080": 403, "10.0.0.1:8080": 403, "": 403, "localhost.evil.example": 403} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/api/cluster", nil)
		r.Host = host
		h.ServeHTTP(rec, r)
		if rec.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rec.Code, want)
		}
	}
	s, _ := scenario.DemoScenario()
	srv := &Server{AnyHost: true, s: s, view: demoServer(t).View()}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/api/cluster", nil)
	r.Host = "cluster-lab.example:8080"
	srv.Handler().ServeHTTP(rec, r)
	if rec.Code != 200 {
		t.Errorf("AnyHost: %d", rec.Code)
	}
}

// TestAPITimelineAndFlows (in a file before browser_test.go: it must run before the
// browser starts, whose client goroutines would keep netsim.Quiesce waiting): the timeline has a state per step (the endpoints step sees
// 4 endpoints); the flow stream sends each step and the live packets it made, then done.
func TestAPITimelineAndFlows(t *testing.T) {
	srv := demoServer(t)
	h := srv.Handler()
	code, _, body := get(t, h, "/api/timeline")
	var tl struct {
		Mode  string               `json:"mode"`
		Steps []scenario.StepState `json:"steps"`
	}
	if err := json.Unmarshal([]byte(body), &tl); code != 200 || err != nil || len(tl.Steps) != 9 {
		t.Fatalf("%d %v %.200s", code, err, body)
	}
	if st := tl.Steps[6]; st.Result.Status != "ok" || len(st.Endpoints["default/my-service"]) != 4 {
		t.Errorf("step 7: %+v", st.Result)
	}
	// In the IPVS mode each state has the nodes' IPVS connection tables.
	code, _, body = get(t, h, "/api/timeline?mode=ipvs")
	if err := json.Unmarshal([]byte(body), &tl); code != 200 || err != nil || tl.Mode != "ipvs" || tl.Steps[0].IPVSTotal["node-a"] < 90 {
		t.Errorf("ipvs timeline: %d %v, node-a's IPVS entries %d", code, err, tl.Steps[0].IPVSTotal["node-a"])
	} else {
		t.Logf("node-a's first IPVS entry after step 1: %s", tl.Steps[0].IPVS["node-a"][0])
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/api/flows")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s := string(b)
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Count(s, "event: step\n") != 9 || !strings.Contains(s, "event: done\n") {
		t.Fatalf("stream: %s %.500s", resp.Header.Get("Content-Type"), s)
	}
	// The first step's connections to the VIP are DNATed to backends: their SYNs show it.
	if !strings.Contains(s, `"nat":["DNAT`) || !strings.Contains(s, `"step":1`) {
		t.Errorf("no DNATed flow of step 1 in the stream")
	}
}
