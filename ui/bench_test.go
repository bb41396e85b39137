package ui

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/clusterlab/clusterlab/scenario"
)

// BenchmarkFirstLoad is the server's side of the page's first load with the demo's
// cluster: the page, its two assets and the cluster's JSON (the server is built once,
// when `clusterlab ui` starts; BenchmarkStart measures that).
func BenchmarkFirstLoad(b *testing.B) {
	h := demoServer(b).Handler()
	for b.Loop() {
		for _, u := range []string{"/", "/assets/app.js", "/assets/style.css", "/api/cluster"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8080"+u, nil))
			if rec.Code != 200 {
				b.Fatalf("%s: %d", u, rec.Code)
			}
		}
	}
}

// BenchmarkStart is ui.New for the demo: the cluster built once to describe it.
func BenchmarkStart(b *testing.B) {
	s, err := scenario.DemoScenario()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := New(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTraceAPI traces the client's packet to my-service through the API as the
// page asks for it (format page: the JSON, the text and the SVG).
func BenchmarkTraceAPI(b *testing.B) {
	h := demoServer(b).Handler()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8080/api/trace?from=pod:default/client&to=service:default/my-service:80&format=page", nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkTraceCLI is the anchor: the same packet traced as `clusterlab trace` does
// (scenario.Trace, JSON out).
func BenchmarkTraceCLI(b *testing.B) {
	s, err := scenario.DemoScenario()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := scenario.Trace(context.Background(), s, scenario.TraceOptions{From: "pod:default/client", To: "service:default/my-service:80"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := res.JSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBrowserFirstLoad is the page's first load in headless Chromium, as a person
// sees it: a new tab opens the demo's page, which fetches its assets and the cluster,
// traces its first packet and draws it (until the page says it is ready).
func BenchmarkBrowserFirstLoad(b *testing.B) {
	tab(b, "") // the browser and the server started, outside the timing
	b.ResetTimer()
	var ms float64
	for b.Loop() {
		ctx := tab(b, "")
		ms += js[float64](b, ctx, `+document.body.dataset.readyMs`)
	}
	// The page's own clock: from the navigation's start to the first trace drawn
	// (without the DevTools round trips of opening a tab and polling).
	b.ReportMetric(ms/float64(b.N), "page-ms/op")
}
