package emulator

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// normaliseListing makes element lists order-insensitive: each `elements = { ... }`
// becomes one line with its elements sorted (nft lists elements in kernel order).
func normaliseListing(s string) string {
	var out []string
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "elements = {") {
			out = append(out, l)
			continue
		}
		body := strings.TrimPrefix(t, "elements = {")
		for !strings.HasSuffix(strings.TrimSpace(body), "}") && i+1 < len(lines) {
			i++
			body += " " + strings.TrimSpace(lines[i])
		}
		body = strings.TrimSuffix(strings.TrimSpace(body), "}")
		var els []string
		for _, e := range strings.Split(body, ",") {
			if e = strings.TrimSpace(e); e != "" {
				els = append(els, e)
			}
		}
		slices.Sort(els)
		out = append(out, "\t\telements = { "+strings.Join(els, ", ")+" }")
	}
	return strings.Join(out, "\n")
}

// TestListingRoundTrip: `nft list ruleset` (and -a) output captured from a real kernel
// (testdata/listing, see TestCaptureListings) parses, and printing the model gives
// what nft printed.
func TestListingRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/listing/*.nft")
	if len(files) == 0 {
		t.Fatal("no listings in testdata/listing")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Load(data, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var b strings.Builder
		e.Print(&b, PrintOptions{Handles: strings.HasSuffix(f, ".handles.nft")})
		if got, want := normaliseListing(b.String()), normaliseListing(string(data)); got != want {
			t.Errorf("%s: printed listing differs from nft's:\n%s", f, lineDiff(want, got))
		}
	}
}

// lineDiff shows the first differing lines.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + itoa(i+1) + ":\n  nft: " + a + "\n  ours: " + b
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }

// kernelCaptures are the scripts captured into testdata/listing.
var kernelCaptures = []string{"overall", "load-balancer", "etp-local", "nodeports-ipv6"}

// TestCaptureListings loads the kube-proxy rulesets into a real kernel (a throwaway
// network namespace) with nft -f and checks that nft's listings equal the captured
// files; with CAPTURE=1 it rewrites them. Root and nft are needed.
func TestCaptureListings(t *testing.T) {
	ns := newNetns(t)
	for _, name := range kernelCaptures {
		script := kubeProxyScript(t, name)
		run(t, "ip", "netns", "exec", ns, "nft", "flush", "ruleset")
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(string(script))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: nft -f: %v\n%s", name, err, out)
		}
		for _, v := range []struct{ suffix, flag string }{{".nft", ""}, {".handles.nft", "-a"}, {".json", "-j"}} {
			args := []string{"netns", "exec", ns, "nft"}
			if v.flag != "" {
				args = append(args, v.flag)
			}
			got := run(t, "ip", append(args, "list", "ruleset")...)
			path := filepath.Join("testdata/listing", name+v.suffix)
			if os.Getenv("CAPTURE") == "1" {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if v.suffix != ".json" && sameNFT(t) && normaliseListing(got) != normaliseListing(string(want)) {
				t.Errorf("%s: the kernel's listing differs from the captured one:\n%s", path, lineDiff(string(want), got))
			}
		}
		// The emulator, given the same script, prints what the kernel lists.
		e, err := Load(script, name)
		if err != nil {
			t.Fatal(err)
		}
		want := run(t, "ip", "netns", "exec", ns, "nft", "list", "ruleset")
		if got := e.String(); sameNFT(t) && normaliseListing(got) != normaliseListing(want) {
			t.Errorf("%s: emulator after the script differs from the kernel:\n%s", name, lineDiff(normaliseListing(want), normaliseListing(got)))
		}
		kernelAgrees(t, e, want)
	}
}

// kubeProxyScript returns a kube-proxy ruleset of testdata/kube-proxy as an nft -f
// transaction.
func kubeProxyScript(t *testing.T, name string) []byte {
	data, err := os.ReadFile(filepath.Join("testdata/kube-proxy", name+".nft"))
	if err != nil {
		t.Fatal(err)
	}
	if name == "overall" {
		base, err := os.ReadFile("testdata/kube-proxy/base-rules.nft")
		if err != nil {
			t.Fatal(err)
		}
		data = append(base, data...)
	}
	return sortDump(data)
}

// checkSameWalks walks a spread of packets through two emulators and compares the
// outcomes (without line numbers, which differ between a listing and JSON).
func checkSameWalks(t *testing.T, a, b *Emulator) { compareWalks(t, a, b, false) }

// compareWalks walks a spread of packets through two emulators and compares the
// outcomes: all but line numbers, or (loose) what the packet met and where it went,
// without rule texts, handles and lines (a script and its listing spell rules
// differently).
func compareWalks(t *testing.T, a, b *Emulator, loose bool) {
	t.Helper()
	srcs := []string{"10.0.0.2", "10.180.0.1", "203.0.113.2", "203.0.113.130", "192.168.0.2"}
	dsts := []string{"172.30.0.41", "172.30.0.44", "172.30.0.45", "172.30.0.46", "172.30.0.99", "192.168.0.2", "1.2.3.4", "5.6.7.8", "192.168.99.11"}
	if strings.Contains(a.String(), "table ip6") {
		srcs = []string{"fd00:10::2", "2600:5200::1", "2001:db8::1"}
		dsts = []string{"fd00:172:30::41", "2001:db8::1", "2001:db8:1::2"}
	}
	strip := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.Contains(l, `"line":`) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	for _, s := range srcs {
		for _, d := range dsts {
			for _, port := range []uint16{80, 3001, 3002, 3003} {
				in := WalkInput{Packet: Packet{Proto: 6, Src: netip.MustParseAddr(s), Dst: netip.MustParseAddr(d), SrcPort: 40000, DstPort: port},
					Local: []netip.Addr{netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("2001:db8::1")}, AllBranches: true}
				ra, err1 := a.Walk(in)
				rb, err2 := b.Walk(in)
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				ja, _ := ra.JSON()
				jb, _ := rb.JSON()
				if loose {
					ja, jb = []byte(outcomeSummary(ra)), []byte(outcomeSummary(rb))
				}
				if strip(string(ja)) != strip(string(jb)) {
					t.Fatalf("%s -> %s:%d: outcomes differ:\n%s\n%s", s, d, port, ja, jb)
				}
			}
		}
	}
}

// TestJSONListing: `nft -j list ruleset` output parses into the same model as the text
// listing: printing both gives the same text (rules in the normalised spelling), and
// walks through both give the same outcomes.
func TestJSONListing(t *testing.T) {
	for _, name := range kernelCaptures {
		js, err := os.ReadFile(filepath.Join("testdata/listing", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		txt, err := os.ReadFile(filepath.Join("testdata/listing", name+".handles.nft"))
		if err != nil {
			t.Fatal(err)
		}
		ej, err := Load(js, name+".json")
		if err != nil {
			t.Fatalf("%s.json: %v", name, err)
		}
		var got strings.Builder
		ej.Print(&got, PrintOptions{Handles: true})
		// nft 1.0.6's JSON leaves out table and chain comments and the dynamic flag;
		// the flag comes back as in the kernel, from the rules that update the sets.
		want := strings.Replace(string(txt), "\tcomment \"rules for kube-proxy\"\n", "", 1)
		want = strings.Replace(want, "\t\tcomment \"helper for @no-endpoint-services / @no-endpoint-nodeports\"\n", "", 1)
		if g, w := normaliseListing(got.String()), normaliseListing(want); g != w {
			t.Errorf("%s.json: printed differs from nft -a list ruleset:\n%s", name, lineDiff(w, g))
		}
		et, err := Load(txt, name)
		if err != nil {
			t.Fatal(err)
		}
		checkSameWalks(t, et, ej)
	}
}

// TestKernelListsSynthetic: the synthetic kube-proxy 1.37 listing of the benchmarks
// (hairpin set, numgen DNAT maps, inline masquerade marks) loads into a real kernel,
// and nft lists it as the emulator prints it.
func TestKernelListsSynthetic(t *testing.T) {
	ns := newNetns(t)
	text := genKubeProxyListing(20, 3)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v\n%s", err, out)
	}
	got := run(t, "ip", "netns", "exec", ns, "nft", "list", "ruleset")
	e, err := Load([]byte(text), "synthetic.nft")
	if err != nil {
		t.Fatal(err)
	}
	if w, g := normaliseListing(got), normaliseListing(e.String()); sameNFT(t) && w != g {
		t.Errorf("nft lists the synthetic ruleset differently:\n%s", lineDiff(w, g))
	}
	k, err := Load([]byte(got), "kernel.nft")
	if err != nil {
		t.Fatal(err)
	}
	compareWalks(t, e, k, true)
}

// TestKernelAcceptsFixtures: every kube-proxy ruleset in testdata/kube-proxy loads into
// a real kernel with nft -f, and nft lists it as the emulator prints it (root).
func TestKernelAcceptsFixtures(t *testing.T) {
	ns := newNetns(t)
	files, _ := filepath.Glob("testdata/kube-proxy/*.nft")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".nft")
		if name == "base-rules" {
			continue
		}
		script := kubeProxyScript(t, name)
		run(t, "ip", "netns", "exec", ns, "nft", "flush", "ruleset")
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(string(script))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: nft -f: %v\n%s", name, err, out)
			continue
		}
		want := run(t, "ip", "netns", "exec", ns, "nft", "list", "ruleset")
		e, err := Load(script, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.String(); sameNFT(t) && normaliseListing(got) != normaliseListing(want) {
			t.Errorf("%s: the emulator prints otherwise than nft lists:\n%s", name, lineDiff(normaliseListing(want), normaliseListing(got)))
		}
		kernelAgrees(t, e, want)
	}
}

// TestSpellings: statements beyond kube-proxy's (ct state lists, wildcards, ct marks,
// port ranges, anonymous sets, named counters, fib, reject types, log, masks, redirect,
// numgen maps with offsets, snat port ranges, masquerade flags) print as nft 1.0.6
// lists them (testdata/spellings/listed.nft, captured from a netns; re-checked as root).
func TestSpellings(t *testing.T) {
	in, err := os.ReadFile("testdata/spellings/input.nft")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/spellings/listed.nft")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Load(in, "input.nft")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.String(); got != string(want) {
		t.Errorf("printed differs from nft's listing:\n%s", lineDiff(string(want), got))
	}
	e2, err := Load(want, "listed.nft")
	if err != nil {
		t.Fatal(err)
	}
	if got := e2.String(); got != string(want) {
		t.Errorf("the listing does not print back as itself:\n%s", lineDiff(string(want), got))
	}
	if os.Geteuid() == 0 {
		ns := newNetns(t)
		run(t, "ip", "netns", "exec", ns, "nft", "-f", "testdata/spellings/input.nft")
		if got := run(t, "ip", "netns", "exec", ns, "nft", "list", "ruleset"); sameNFT(t) && got != string(want) {
			t.Errorf("the kernel lists otherwise than the captured file:\n%s", lineDiff(string(want), got))
		}
	}
}

// capturedWith is the nft version the files in testdata were captured with; listings
// are compared as text only with it (other versions print some things otherwise).
const capturedWith = "v1.0.6"

var nftVersion string

// sameNFT reports whether the machine's nft is the one the captures were made with,
// logging why text comparisons are skipped when it is not.
func sameNFT(t *testing.T) bool {
	if nftVersion == "" {
		out, _ := exec.Command("nft", "--version").Output()
		nftVersion = strings.TrimSpace(string(out))
	}
	if !strings.Contains(nftVersion, capturedWith+" ") {
		t.Logf("nft is %q, not %s: listings are compared by their walks, not as text", nftVersion, capturedWith)
		return false
	}
	return true
}

// kernelAgrees loads the kernel's listing and checks that it decides as e does.
func kernelAgrees(t *testing.T, e *Emulator, listing string) {
	t.Helper()
	k, err := Load([]byte(listing), "kernel listing")
	if err != nil {
		t.Fatalf("the kernel's listing does not load: %v", err)
	}
	compareWalks(t, e, k, true)
}

// outcomeSummary is what a walk did, without rule texts, handles, lines and elements.
func outcomeSummary(r *WalkResult) string {
	var b strings.Builder
	for _, o := range r.Outcomes {
		fmt.Fprintf(&b, "%.6f %s %s %s", o.Probability, o.Verdict, o.RejectWith, o.DecidedBy)
		if o.Decision != nil {
			fmt.Fprintf(&b, " %s/%s/%s", o.Decision.Table, o.Decision.Chain, o.Decision.Policy)
		}
		if o.DNATDestination != nil {
			b.WriteString(" dnat " + *o.DNATDestination)
		}
		fmt.Fprintf(&b, " masq=%v %s %s %v\n", o.Masqueraded, o.Mark, o.Packet, o.Hooks)
		for _, m := range o.MatchedRules {
			// Not the element: { 172.30.0.0/16 } in a script is a set, while the
			// listing's 172.30.0.0/16 is a constant.
			fmt.Fprintf(&b, "  %s %s %s\n", m.Hook, m.Table, m.Chain)
		}
	}
	return b.String()
}

// TestBitmaskSpellingsJSON: the bitmask matches of testdata/spellings (tcp flags, ct
// state and ct status with masks, "!", "/" and whole-value comparisons) read from
// `nft -j list ruleset` (listed.json, captured with listed.nft) print as the text
// listing does, so both forms load the same matches.
func TestBitmaskSpellingsJSON(t *testing.T) {
	js, err := os.ReadFile("testdata/spellings/listed.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/spellings/listed.nft")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Load(js, "listed.json")
	if err != nil {
		t.Fatal(err)
	}
	pick := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, "tcp flags") || strings.Contains(l, "ct state") || strings.Contains(l, "ct status") {
				out = append(out, strings.TrimSpace(l))
			}
		}
		return out
	}
	got, w := pick(e.String()), pick(string(want))
	if len(w) < 15 {
		t.Fatalf("listed.nft has %d bitmask matches, want the spellings' 15 or more", len(w))
	}
	if !slices.Equal(got, w) {
		t.Errorf("from JSON:\n%s\nnft's text listing:\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
	}
}
