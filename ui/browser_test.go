package ui

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/clusterlab/clusterlab/scenario"
)

// The browser tests drive a real headless Chromium (Debian's chromium package) through
// the DevTools protocol: one browser for the package's run, a tab a test. They skip,
// saying why, where there is no Chromium.

var update = flag.Bool("update", false, "rewrite the screenshots in testdata/screenshots")

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserCancel func()
	browserSkip   string
	serverURL     string
	serverProc    *exec.Cmd
)

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		serveDemo()
		return
	}
	flag.Parse()
	code := m.Run()
	if browserCancel != nil {
		browserCancel()
	}
	if serverProc != nil {
		serverProc.Process.Kill()
		serverProc.Wait()
	}
	os.Exit(code)
}

// serveEnv makes the test binary serve the demo's page instead of running tests: the
// browser tests' server runs in a process of its own, because the scenario runner's
// real connections wait for the process to be quiet (netsim's Quiesce), and the
// DevTools client's goroutine reading its pipe to the browser (blocked in read(2))
// would keep it busy: each connection of the live flows view waited Quiesce's 5 s.
const serveEnv = "CLUSTERLAB_UI_TEST_SERVE"

// serveDemo serves the demo's page on a free loopback port, prints its URL and serves
// until the test process that started it is gone. (It does not wait on a read of its
// standard input: a goroutine blocked in a read(2) on a pipe counts as busy for
// Quiesce, as the DevTools client's pipe to the browser did in the test process.)
func serveDemo() {
	s, err := scenario.DemoScenario()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	srv, err := New(s)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	go http.Serve(ln, srv.Handler())
	for parent := os.Getppid(); os.Getppid() == parent; {
		time.Sleep(200 * time.Millisecond) // the test process still runs
	}
}

// startServer starts the test binary as the page's server (serveEnv) and returns its URL.
func startServer() (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	serverProc = cmd
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		return "", fmt.Errorf("the page's server said %q: %v", line, err)
	}
	return strings.TrimSpace(line), nil
}

// chromiumPath finds the browser: $CLUSTERLAB_CHROMIUM, else chromium on PATH (Debian's
// package), else chromium-browser or google-chrome.
func chromiumPath() string {
	if p := os.Getenv("CLUSTERLAB_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// tab opens a new tab of the shared browser on the demo's page (with fragment, if any)
// and waits until the page has drawn its first trace.
func tab(t testing.TB, fragment string) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no browser tests")
	}
	browserOnce.Do(func() {
		path := chromiumPath()
		if path == "" {
			browserSkip = "no Chromium found (apt-get install chromium, or set CLUSTERLAB_CHROMIUM)"
			return
		}
		u, err := startServer()
		if err != nil {
			browserSkip = "" // not a missing browser: a failure
			t.Fatal(err)
		}
		serverURL = u
		opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.Headless, chromedp.DisableGPU, chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 800), chromedp.Flag("hide-scrollbars", false),
			chromedp.Flag("font-render-hinting", "none"), chromedp.Flag("force-device-scale-factor", "1")}
		if os.Geteuid() == 0 {
			opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		if _, err := chromedp.Run(bctx, chromedp.Evaluate[int]("1")); err != nil {
			bcancel()
			acancel()
			browserSkip = fmt.Sprintf("Chromium at %s does not start: %v", path, err)
			return
		}
		browserCtx, browserCancel = bctx, func() { bcancel(); acancel() }
	})
	if browserSkip != "" {
		t.Skip(browserSkip)
	}
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	ctx, cancel2 := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel2)
	run(t, ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(serverURL+"/"+fragment))
	waitJS(t, ctx, `document.body.dataset.ready === "true"`)
	return ctx
}

func run(t testing.TB, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

func js[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitJS waits until expr is true in the page (the page's own work: fetches, drawing).
func waitJS(t testing.TB, ctx context.Context, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		status := js[string](t, ctx, `document.getElementById("status").textContent`)
		t.Fatalf("waiting for %s: %v (status line: %q)", expr, err, status)
	}
}

// traced waits for a new trace: the drawing's caption names to.
func traced(t *testing.T, ctx context.Context, to string) {
	t.Helper()
	waitJS(t, ctx, fmt.Sprintf(`(document.querySelector("#drawing svg title")||{}).textContent?.includes(%q) && document.getElementById("status").textContent === ""`, "to "+to+" ("))
}

// TestBrowserTrace: the page draws the client's packet to my-service: through node-a's
// PREROUTING, the KUBE-SERVICES and KUBE-SEP chains with their dump lines, a DNAT, to a
// my-app backend, with the text beside it; then a pod picked as the destination is
// reached without any DNAT.
func TestBrowserTrace(t *testing.T) {
	ctx := tab(t, "")
	if from := js[string](t, ctx, `document.getElementById("from").value`); from != "pod:default/client" {
		t.Errorf("source %q, want the client pod", from)
	}
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "service:default/my-service:80"), chromedp.Click(chromedp.CSS("#go")))
	traced(t, ctx, "service:default/my-service:80")
	for _, sel := range []string{
		`#drawing g.hook[data-node="node-a"][data-hook="PREROUTING"]`,
		`#drawing g.hook[data-node="node-a"][data-hook="POSTROUTING"] text[data-chain="nat/KUBE-POSTROUTING"]`,
		`#drawing text.rule[data-chain="nat/KUBE-SERVICES"][data-line]`,
		`#drawing text.rule[data-chain^="nat/KUBE-SEP-"]`,
		`#drawing text.nat`,
		`#drawing g.end.ok[data-pod^="default/my-app-"]`,
	} {
		if !js[bool](t, ctx, fmt.Sprintf(`!!document.querySelector(%q)`, sel)) {
			t.Errorf("the drawing has no %s", sel)
		}
	}
	dnat := js[string](t, ctx, `document.querySelector("#drawing text.nat").textContent`)
	backend := js[string](t, ctx, `document.querySelector("#drawing g.end").dataset.pod`)
	ip := js[string](t, ctx, fmt.Sprintf(`document.querySelector('.pod[data-pod=%q] .ip').textContent`, backend))
	if !strings.Contains(dnat, "DNAT") || !strings.Contains(dnat, ip+":9376") {
		t.Errorf("DNAT line %q does not name the backend %s's address %s:9376", dnat, backend, ip)
	}
	text := js[string](t, ctx, `document.getElementById("trace-text").textContent`)
	if !strings.Contains(text, "DNAT to "+ip+":9376") || !strings.Contains(text, "[node-a] PREROUTING") {
		t.Errorf("the text trace lacks the DNAT or the hook:\n%.400s", text)
	}

	// A pod as the destination: no Service, no DNAT.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "pod:"+backend+":9376"), chromedp.Click(chromedp.CSS("#go")))
	traced(t, ctx, "pod:"+backend+":9376")
	if js[bool](t, ctx, `!!document.querySelector("#drawing text.nat")`) || js[string](t, ctx, `document.querySelector("#drawing g.end").dataset.pod`) != backend {
		t.Error("a packet straight to the pod was NATed or went elsewhere")
	}
}

// TestBrowserAllBranchesAndReply: every branch lists the three backends, a third each;
// the answer's way ends at the client, un-DNATed.
func TestBrowserAllBranchesAndReply(t *testing.T) {
	ctx := tab(t, "")
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "my-service:80"), chromedp.Click(chromedp.CSS("#all")), chromedp.Click(chromedp.CSS("#reply")), chromedp.Click(chromedp.CSS("#go")))
	waitJS(t, ctx, `document.querySelectorAll("#summary .tree li").length === 3`)
	probs := js[[]string](t, ctx, `[...document.querySelectorAll("#summary .tree li")].map(li => li.dataset.probability)`)
	for _, p := range probs {
		if p != "0.3333" {
			t.Errorf("branch probabilities %v, want 0.3333 each", probs)
			break
		}
	}
	if n := js[int](t, ctx, `document.querySelectorAll("#drawing g.end.ok").length`); n != 4 {
		t.Errorf("%d ends drawn, want 3 branches and the answer", n)
	}
	if !js[bool](t, ctx, `[...document.querySelectorAll("#drawing text.nat")].some(e => e.textContent.startsWith("un-DNAT"))`) {
		t.Error("the answer's un-DNAT is not drawn")
	}
	if !strings.Contains(js[string](t, ctx, `document.getElementById("summary").textContent`), "the answer: delivered pod default/client") {
		t.Error("the summary does not say the answer reached the client")
	}
}

// TestBrowserAfterSteps: the cluster as it is after the NodePort step (the map shows
// the node port, the destinations offer it), and the laptop's packet to node-b's node
// port drawn: DNATed in PREROUTING and masqueraded in POSTROUTING.
func TestBrowserAfterSteps(t *testing.T) {
	ctx := tab(t, "")
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#after"), "8"), chromedp.Evaluate[chromedp.Void](`document.getElementById("after").dispatchEvent(new Event("change"))`))
	waitJS(t, ctx, `document.querySelector('#services [data-service="default/my-service"]').textContent.includes("node port 30007")`)
	if !js[bool](t, ctx, `[...document.querySelectorAll("#destinations option")].some(o => o.value === "nodeport:default/my-service:80@node-b")`) {
		t.Error("the node port is not offered as a destination")
	}
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#from"), "external:laptop"), chromedp.SetValue(chromedp.CSS("#to"), "nodeport:default/my-service:80@node-b"), chromedp.Click(chromedp.CSS("#go")))
	traced(t, ctx, "nodeport:default/my-service:80@node-b")
	for _, sel := range []string{`#drawing g.hook[data-node="node-b"][data-hook="PREROUTING"] text.nat`, `#drawing g.hook[data-node="node-b"][data-hook="POSTROUTING"] text.masq`, `#drawing g.end.ok[data-pod^="default/my-app-"]`} {
		if !js[bool](t, ctx, fmt.Sprintf(`!!document.querySelector(%q)`, sel)) {
			t.Errorf("the drawing has no %s", sel)
		}
	}
	if q, _ := url.ParseQuery(strings.TrimPrefix(js[string](t, ctx, `location.hash`), "#")); q.Get("after_step") != "8" {
		t.Errorf("the permalink lacks after_step=8: %v", q)
	}
}

// TestBrowserCompareModes: the compare view has a column per mode of this build, each
// with the packet drawn: IPVS's virtual server and scheduler, nftables' kube-proxy
// table, the userspace mode's REDIRECT to its listener on the node.
func TestBrowserCompareModes(t *testing.T) {
	ctx := tab(t, "")
	modes := demoServer(t).View().Modes
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "service:default/my-service:80"), chromedp.Click(chromedp.CSS("#tab-compare")))
	waitJS(t, ctx, fmt.Sprintf(`document.querySelectorAll("#compare .col svg").length === %d`, len(modes)))
	got := js[[]string](t, ctx, `[...document.querySelectorAll("#compare .col")].map(c => c.dataset.mode)`)
	if strings.Join(got, ",") != strings.Join(modes, ",") {
		t.Errorf("columns %v, want %v", got, modes)
	}
	want := map[string]string{"iptables": "KUBE-SEP-", "ipvs": "scheduler", "nftables": "ip kube-proxy", "userspace": "REDIRECT"}
	for _, m := range modes {
		text := js[string](t, ctx, fmt.Sprintf(`document.querySelector('#compare .col[data-mode=%q] svg').textContent`, m))
		if w := want[m]; w != "" && !strings.Contains(text, w) {
			t.Errorf("the %s column does not mention %q", m, w)
		}
	}
}

// TestBrowserKeyboard: everything is reachable with the keyboard: Tab walks the tabs
// and the form in order, arrow keys move between the views, Enter in the destination
// field traces.
func TestBrowserKeyboard(t *testing.T) {
	ctx := tab(t, "")
	run(t, ctx, chromedp.Focus(chromedp.CSS("#tab-trace")))
	var order []string
	for i := 0; i < 6; i++ {
		run(t, ctx, chromedp.KeyEvent(kb.Tab))
		order = append(order, js[string](t, ctx, `document.activeElement.id || document.activeElement.className`))
	}
	// The selected tab is the only one in the tab order (the ARIA tabs pattern); then
	// the map's pods, in the map's order.
	if order[0] != "pod" {
		t.Errorf("after the tabs, focus went to %v", order)
	}
	run(t, ctx, chromedp.Focus(chromedp.CSS("#from")))
	order = order[:0]
	for i := 0; i < 7; i++ {
		order = append(order, js[string](t, ctx, `document.activeElement.id`))
		run(t, ctx, chromedp.KeyEvent(kb.Tab))
	}
	if got := strings.Join(order, " "); got != "from to mode after all reply go" {
		t.Errorf("the form's tab order is %q", got)
	}
	// Arrow keys between the views.
	run(t, ctx, chromedp.Focus(chromedp.CSS("#tab-trace")), chromedp.KeyEvent(kb.ArrowRight))
	waitJS(t, ctx, `document.activeElement.id === "tab-compare" && !document.getElementById("view-compare").hidden`)
	run(t, ctx, chromedp.KeyEvent(kb.ArrowLeft))
	waitJS(t, ctx, `document.activeElement.id === "tab-trace" && !document.getElementById("view-trace").hidden`)
	// Typing a destination and Enter traces it.
	run(t, ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("to").value = ""`), chromedp.Focus(chromedp.CSS("#to")), chromedp.KeyEvent("my-service:80"), chromedp.KeyEvent(kb.Enter))
	traced(t, ctx, "my-service:80")
}

// TestBrowserExport: Export SVG downloads the drawing as an SVG file with its hooks;
// Export PNG a PNG of it.
func TestBrowserExport(t *testing.T) {
	ctx := tab(t, "")
	dir := t.TempDir()
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "service:default/my-service:80"), chromedp.Click(chromedp.CSS("#go")))
	traced(t, ctx, "service:default/my-service:80")
	run(t, ctx, chromedp.Click(chromedp.CSS("#export-svg")))
	svg := waitFile(t, filepath.Join(dir, "clusterlab-pod_default_client-service_default_my-service_80-iptables.svg"))
	if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte(`data-hook="PREROUTING"`)) || !bytes.Contains(svg, []byte("KUBE-SEP-")) {
		t.Errorf("the exported SVG: %.300s", svg)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS("#export-png")))
	b := waitFile(t, filepath.Join(dir, "clusterlab-pod_default_client-service_default_my-service_80-iptables.png"))
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() < 600 || img.Bounds().Dy() < 800 {
		t.Errorf("the exported PNG: %v", err)
	}
}

func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) { // a real browser writing a file
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	t.Fatalf("no download %s (the directory has %v)", filepath.Base(path), entries)
	return nil
}

// TestBrowserPermalink: the address bar holds the view; opening it again restores the
// source, destination, mode and options and traces; a link of another scenario says so.
// (nftables: its numgen random choice gives every branch; IPVS's rr has one.)
func TestBrowserPermalink(t *testing.T) {
	ctx := tab(t, "")
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "my-service:80"), chromedp.SetValue(chromedp.CSS("#mode"), "nftables"), chromedp.Click(chromedp.CSS("#all")), chromedp.Click(chromedp.CSS("#go")))
	waitJS(t, ctx, `document.querySelectorAll("#summary .tree li").length === 3`)
	link := js[string](t, ctx, `location.hash`)
	q, err := url.ParseQuery(strings.TrimPrefix(link, "#"))
	if err != nil || q.Get("scenario") != demoServer(t).View().Name || q.Get("to") != "my-service:80" || q.Get("mode") != "nftables" || q.Get("all_branches") != "1" {
		t.Fatalf("permalink %q", link)
	}
	ctx2 := tab(t, link)
	waitJS(t, ctx2, `document.querySelectorAll("#summary .tree li").length === 3`)
	if js[string](t, ctx2, `document.getElementById("mode").value`) != "nftables" || !js[bool](t, ctx2, `document.getElementById("all").checked`) ||
		!strings.Contains(js[string](t, ctx2, `document.getElementById("summary").textContent`), "kube-proxy nftables mode") {
		t.Error("the permalink did not restore the view")
	}
	ctx3 := tab(t, "#scenario=another&to=x")
	if s := js[string](t, ctx3, `document.getElementById("status").textContent`); !strings.Contains(s, "another") {
		// The first trace clears the status; the notice must survive it.
		t.Errorf("a link of another scenario: status %q", s)
	}
}

// TestBrowserTimeline: the steps run one at a time; the first passes its expectations
// (shown), and after the delete step the endpoints check sees 4 endpoints.
func TestBrowserTimeline(t *testing.T) {
	ctx := tab(t, "")
	run(t, ctx, chromedp.Click(chromedp.CSS("#tab-timeline")))
	waitJS(t, ctx, `document.querySelectorAll("#steps li").length === 9 && document.getElementById("step-where").textContent.startsWith("0 of 9")`)
	run(t, ctx, chromedp.Click(chromedp.CSS("#step-next")))
	waitJS(t, ctx, `document.querySelectorAll("#steps li.ok").length === 1`)
	detail := js[string](t, ctx, `document.getElementById("step-detail").textContent`)
	if !strings.Contains(detail, "passed") || !strings.Contains(detail, "3 distinct backends") || !strings.Contains(detail, "Conntrack entries after the step") {
		t.Errorf("step 1's detail: %.500s", detail)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS("#steps li:nth-child(7) button")))
	waitJS(t, ctx, `document.querySelectorAll("#steps li.ok").length === 7`)
	if d := js[string](t, ctx, `document.getElementById("step-detail").textContent`); !strings.Contains(d, "4 endpoints, 3 ready") {
		t.Errorf("step 7's detail: %.300s", d)
	}
	if s := js[string](t, ctx, `new URLSearchParams(location.hash.slice(1)).get("step")`); s != "7" {
		t.Errorf("the permalink's step is %q", s)
	}
}

// TestBrowserLiveFlows: running the steps streams their packets: the client's DNS query
// to kube-dns's VIP DNATed to a coredns pod, and connections to my-service DNATed to its
// backends; Enter on a row shows that packet's trace.
func TestBrowserLiveFlows(t *testing.T) {
	ctx := tab(t, "")
	run(t, ctx, chromedp.Click(chromedp.CSS("#tab-flows")), chromedp.Click(chromedp.CSS("#flows-start")))
	waitJS(t, ctx, `document.getElementById("flows-note").textContent.includes("packets traced")`)
	rows := js[[]string](t, ctx, `[...document.querySelectorAll("#flows tbody tr[data-index]")].map(r => r.textContent)`)
	dns, vip := false, false
	for _, r := range rows {
		dns = dns || strings.Contains(r, ":53") && strings.Contains(r, "DNAT")
		vip = vip || strings.Contains(r, ":80") && strings.Contains(r, "DNAT")
	}
	if !dns || !vip || js[int](t, ctx, `document.querySelectorAll("#flows tr.steprow").length`) != 9 {
		t.Errorf("%d flows; a DNATed DNS query: %v, a DNATed connection to the VIP: %v", len(rows), dns, vip)
	}
	run(t, ctx, chromedp.Focus(chromedp.CSS("#flows tbody tr[data-index]")), chromedp.KeyEvent(kb.Enter))
	if !strings.Contains(js[string](t, ctx, `document.getElementById("flow-text").textContent`), "live packet") {
		t.Error("Enter on a flow does not show its trace")
	}
}

// TestBrowserScreenshots keeps PNG snapshots of the main views at 1280×800 in
// testdata/screenshots (go test ./ui -run Screenshots -update rewrites them) and
// compares them tolerantly: fonts and antialiasing differ between machines, so a few
// per cent of the pixels may differ, not the layout.
func TestBrowserScreenshots(t *testing.T) {
	ctx := tab(t, "")
	shots := []struct {
		name  string
		setup func()
	}{
		{"trace", func() {
			run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "service:default/my-service:80"), chromedp.Click(chromedp.CSS("#go")))
			traced(t, ctx, "service:default/my-service:80")
		}},
		{"branches", func() {
			run(t, ctx, chromedp.SetValue(chromedp.CSS("#to"), "my-service:80"), chromedp.Click(chromedp.CSS("#all")), chromedp.Click(chromedp.CSS("#reply")), chromedp.Click(chromedp.CSS("#go")))
			waitJS(t, ctx, `document.querySelectorAll("#summary .tree li").length === 3 && document.querySelectorAll("#drawing g.end").length === 4`)
		}},
		{"compare", func() {
			run(t, ctx, chromedp.Click(chromedp.CSS("#all")), chromedp.Click(chromedp.CSS("#reply")), chromedp.SetValue(chromedp.CSS("#to"), "service:default/my-service:80"), chromedp.Click(chromedp.CSS("#tab-compare")))
			waitJS(t, ctx, fmt.Sprintf(`document.querySelectorAll("#compare .col svg").length === %d && document.getElementById("status").textContent === ""`, len(demoServer(t).View().Modes)))
		}},
		{"timeline", func() {
			run(t, ctx, chromedp.Click(chromedp.CSS("#tab-timeline")))
			waitJS(t, ctx, `document.querySelectorAll("#steps li").length === 9`)
			run(t, ctx, chromedp.Click(chromedp.CSS("#steps li:nth-child(7) button")))
			waitJS(t, ctx, `document.querySelectorAll("#steps li.ok").length === 7`)
		}},
		{"flows", func() {
			run(t, ctx, chromedp.Click(chromedp.CSS("#tab-flows")), chromedp.Click(chromedp.CSS("#flows-start")))
			waitJS(t, ctx, `document.getElementById("flows-note").textContent.includes("packets traced")`)
			run(t, ctx, chromedp.Click(chromedp.CSS("#flows tbody tr[data-index]:nth-of-type(3)")))
		}},
	}
	for _, s := range shots {
		s.setup()
		run(t, ctx, chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`))
		b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "screenshots", s.name+".png")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./ui -run Screenshots -update writes it)", err)
		}
		diff, err := pngDiff(want, b)
		t.Logf("%s: %.2f%% of the pixels differ", s.name, diff*100)
		if err != nil || diff > 0.03 {
			got := filepath.Join(t.TempDir(), s.name+".png")
			os.WriteFile(got, b, 0o644)
			t.Errorf("%s: %.1f%% of the pixels differ (%v); the new one is %s", s.name, diff*100, err, got)
		}
	}
}

// pngDiff is the fraction of pixels that differ by more than a little in a channel.
func pngDiff(a, b []byte) (float64, error) {
	ia, err := png.Decode(bytes.NewReader(a))
	if err != nil {
		return 1, err
	}
	ib, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return 1, err
	}
	if ia.Bounds() != ib.Bounds() {
		return 1, fmt.Errorf("size %v, want %v", ib.Bounds().Size(), ia.Bounds().Size())
	}
	return differing(ia, ib), nil
}

func differing(a, b image.Image) float64 {
	r := a.Bounds()
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			if absDiff(r1, r2) > 0x3000 || absDiff(g1, g2) > 0x3000 || absDiff(b1, b2) > 0x3000 {
				n++
			}
		}
	}
	return float64(n) / float64(r.Dx()*r.Dy())
}

func absDiff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestPNGDiff: the screenshot comparison passes antialiasing-sized changes and catches a
// moved box: a 20×20 square on 100×100 is 4 % of the pixels, over the 3 % allowed.
func TestPNGDiff(t *testing.T) {
	enc := func(img image.Image) []byte {
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	white := image.NewRGBA(image.Rect(0, 0, 100, 100))
	for i := range white.Pix {
		white.Pix[i] = 0xff
	}
	faint, boxed := image.NewRGBA(white.Rect), image.NewRGBA(white.Rect)
	copy(faint.Pix, white.Pix)
	copy(boxed.Pix, white.Pix)
	for y := 0; y < 20; y++ {
		for x := 0; x < 20; x++ {
			boxed.Set(x, y, image.Black)
			faint.Set(x, y, color.RGBA{0xf4, 0xf4, 0xf4, 0xff}) // antialiasing's kind of change
		}
	}
	if d, err := pngDiff(enc(white), enc(faint)); err != nil || d != 0 {
		t.Errorf("a faint change: %v %v", d, err)
	}
	if d, err := pngDiff(enc(white), enc(boxed)); err != nil || d != 0.04 {
		t.Errorf("a black box: %v %v", d, err)
	}
	if _, err := pngDiff(enc(white), enc(image.NewRGBA(image.Rect(0, 0, 50, 50)))); err == nil {
		t.Error("images of different sizes compare")
	}
}
