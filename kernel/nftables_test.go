package kernel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

const nftVersionOut = "nftables v1.0.6 (Lester Gooch #5)\n"

func newFakeNFTables(t *testing.T, f *fakeRunner, opts NFTablesOptions) *NFTables {
	t.Helper()
	f.on(strings.Join(inNetnsArgv(opts.Netns, []string{"nft", "--version"}), " "), 0, nftVersionOut, "")
	n, err := newNFTables(context.Background(), opts, f)
	if err != nil {
		t.Fatal(err)
	}
	f.reset()
	return n
}

// The command lines and stdin each method produces, without root.
func TestNFTablesCommandLines(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	n := newFakeNFTables(t, f, NFTablesOptions{Netns: "ns1"})
	if n.Family() != knftables.IPv4Family || n.Table() != "kube-proxy" || n.Netns() != "ns1" || n.Version() != (NFTVersion{1, 0, 6}) {
		t.Errorf("adapter: family %q table %q netns %q version %v", n.Family(), n.Table(), n.Netns(), n.Version())
	}
	tx := n.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for kube-proxy")})
	tx.Add(&knftables.Chain{Name: "services"})
	tx.Add(&knftables.Rule{Chain: "services", Rule: "ip daddr 10.96.0.1 tcp dport 80 dnat to 10.244.0.2:8080"})
	if err := n.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := n.Check(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := n.ApplyScript(ctx, "flush ruleset\n"); err != nil {
		t.Fatal(err)
	}
	if err := n.Run(ctx, n.NewTransaction()); err != nil { // empty: runs nothing
		t.Fatal(err)
	}
	for _, o := range []NFTListOptions{{}, {Handles: true}, {JSON: true}, {Handles: true, JSON: true}} {
		if _, err := n.ListRuleset(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.ListTable(ctx, NFTListOptions{Handles: true}); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteTable(ctx, knftables.IPv6Family, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ip netns exec ns1 nft -f -",
		"ip netns exec ns1 nft --check -f -",
		"ip netns exec ns1 nft -f -",
		"ip netns exec ns1 nft list ruleset",
		"ip netns exec ns1 nft -a list ruleset",
		"ip netns exec ns1 nft -j list ruleset",
		"ip netns exec ns1 nft -a -j list ruleset",
		"ip netns exec ns1 nft -a list table ip kube-proxy",
		"ip netns exec ns1 nft delete table ip6 kube-proxy",
	}
	if strings.Join(f.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}
	wantTx := "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }\n" +
		"add chain ip kube-proxy services\n" +
		"add rule ip kube-proxy services ip daddr 10.96.0.1 tcp dport 80 dnat to 10.244.0.2:8080\n"
	if f.stdins[0] != wantTx || f.stdins[1] != wantTx {
		t.Errorf("transaction stdin:\n%s\nwant:\n%s", f.stdins[0], wantTx)
	}
	if f.stdins[2] != "flush ruleset\n" {
		t.Errorf("script stdin %q", f.stdins[2])
	}
}

// Nothing runs against the caller's own namespace unless HostNamespace (or the old
// AllowHost) says so, and bad names never reach nft's command line.
func TestNFTablesRefusals(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	if _, err := newNFTables(ctx, NFTablesOptions{}, f); !errors.Is(err, ErrNoNamespace) {
		t.Errorf("no Netns: %v; want ErrNoNamespace", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("ran %q without a Netns", f.calls)
	}
	var zero NFTables // a zero value has no Netns either
	if err := zero.ApplyScript(ctx, "flush ruleset\n"); err == nil {
		t.Error("zero NFTables ApplyScript: want a refusal")
	}
	for _, opts := range []NFTablesOptions{{Netns: HostNamespace}, {AllowHost: true}} {
		host := newFakeNFTables(t, f, opts)
		if _, err := host.ListRuleset(ctx, NFTListOptions{}); err != nil || f.calls[0] != "nft list ruleset" || host.Netns() != HostNamespace {
			t.Errorf("%+v: %v, %q, Netns %q", opts, err, f.calls, host.Netns())
		}
	}
	n := newFakeNFTables(t, f, NFTablesOptions{Netns: "ns1", Family: knftables.InetFamily, Table: "mine"})
	for _, tc := range []struct {
		family knftables.Family
		name   string
	}{{"ip", "kube-proxy; flush ruleset"}, {"ip", ""}, {"ip", "-a"}, {"ipx", "kube-proxy"}} {
		if err := n.DeleteTable(ctx, tc.family, tc.name); err == nil {
			t.Errorf("DeleteTable(%q, %q): want an error", tc.family, tc.name)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("bad names reached nft: %q", f.calls)
	}
	for _, opts := range []NFTablesOptions{{Netns: "x", Family: "ipv4"}, {Netns: "x", Table: "a b"}} {
		if _, err := newNFTables(ctx, opts, f); err == nil {
			t.Errorf("options %+v: want an error", opts)
		}
	}
	f.on("ip netns exec old nft --version", 0, "nftables v1.0.0 (Fearless Fosdick #3)\n", "")
	if _, err := newNFTables(ctx, NFTablesOptions{Netns: "old"}, f); err == nil || !strings.Contains(err.Error(), "too old") {
		t.Errorf("nft 1.0.0: %v, want too old", err)
	}
	f.on("ip netns exec gone nft --version", 1, "", "Cannot open network namespace \"gone\": No such file or directory\n")
	if _, err := newNFTables(ctx, NFTablesOptions{Netns: "gone"}, f); err == nil || !strings.Contains(err.Error(), "Cannot open network namespace") {
		t.Errorf("missing namespace: %v", err)
	}
}

// A transaction knftables already found invalid is refused before nft runs, with its
// message.
func TestNFTablesInvalidTransaction(t *testing.T) {
	f := newFake()
	n := newFakeNFTables(t, f, NFTablesOptions{Netns: "ns1"})
	tx := n.NewTransaction()
	tx.Add(&knftables.Chain{Name: "ok"})
	tx.Add(&knftables.Rule{Rule: "drop"}) // no chain
	err := n.Run(context.Background(), tx)
	if err == nil || !strings.Contains(err.Error(), "invalid transaction") || !strings.Contains(err.Error(), "chain") {
		t.Errorf("Run: %v, want knftables' validation error", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("nft ran: %q", f.calls)
	}
	if err := n.Run(context.Background(), nil); err == nil {
		t.Error("nil transaction: want an error")
	}
}

// nft's error names the input line; NFTError carries it and the text of that line, and
// unwraps to the CommandError with nft's stderr.
func TestNFTErrorLine(t *testing.T) {
	f := newFake()
	n := newFakeNFTables(t, f, NFTablesOptions{Netns: "ns1"})
	script := "add table ip t\nadd chain ip t c\nadd rule ip t c jump nosuch\n"
	stderr := "/dev/stdin:3:22-27: Error: Could not process rule: No such file or directory\nadd rule ip t c jump nosuch\n                     ^^^^^^\n"
	f.on("ip netns exec ns1 nft -f -", 1, "", stderr)
	err := n.ApplyScript(context.Background(), script)
	var ne *NFTError
	var ce *CommandError
	if !errors.As(err, &ne) || ne.Line != 3 || ne.Text != "add rule ip t c jump nosuch" {
		t.Fatalf("error %v (%#v), want an NFTError at line 3", err, ne)
	}
	if !errors.As(err, &ce) || ce.ExitCode != 1 || !strings.Contains(ce.Stderr, "Could not process rule") {
		t.Errorf("CommandError %+v", ce)
	}
	if !IsNFTNotFound(err) || IsNFTExists(err) {
		t.Errorf("IsNFTNotFound %v, IsNFTExists %v", IsNFTNotFound(err), IsNFTExists(err))
	}
	if !strings.Contains(err.Error(), "input line 3 (add rule ip t c jump nosuch)") {
		t.Errorf("message %q", err)
	}
	for _, tc := range []struct {
		stderr string
		line   int
	}{
		{"-:2:1-5: Error: syntax error, unexpected junk\n", 2},
		{"/tmp/x.nft:1:10: Error: foo\n", 1},
		{"Error: Could not process rule: Operation not permitted\n", 0},
		{"/dev/stdin:99:1-2: Error: past the end\n", 0},
	} {
		e := newNFTError(&CommandError{Stderr: tc.stderr, Err: errors.New("exit status 1")}, "a\nb\n")
		if e.Line != tc.line {
			t.Errorf("stderr %q: line %d, want %d", tc.stderr, e.Line, tc.line)
		}
	}
	if IsNFTNotFound(errors.New("No such file or directory")) {
		t.Error("IsNFTNotFound on a plain error")
	}
}

func TestParseNFTVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want NFTVersion
		ok   bool
	}{
		{"nftables v1.0.6 (Lester Gooch #5)\n", NFTVersion{1, 0, 6}, true},
		{"nftables v1.1.3 (Commodore Bullmoose #4)", NFTVersion{1, 1, 3}, true},
		{"nftables v0.9.8 (E.D.S.)", NFTVersion{0, 9, 8}, true},
		{"nftables v1.0", NFTVersion{1, 0, 0}, true},
		{"iptables v1.8.9", NFTVersion{}, false},
		{"", NFTVersion{}, false},
		{"nftables v99999999999999999999.0.1", NFTVersion{}, false},
	} {
		got, err := ParseNFTVersion(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseNFTVersion(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if !(NFTVersion{1, 0, 1}).AtLeast(MinNFTVersion) || (NFTVersion{1, 0, 0}).AtLeast(MinNFTVersion) || !(NFTVersion{2, 0, 0}).AtLeast(MinNFTVersion) {
		t.Error("AtLeast")
	}
}

func FuzzParseNFTVersion(f *testing.F) {
	f.Add("nftables v1.0.6 (Lester Gooch #5)\n")
	f.Add("nftables v1.0")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseNFTVersion(s)
		if err == nil && !strings.HasPrefix(strings.TrimSpace(s), "nftables v") {
			t.Errorf("%q parsed as %v", s, v)
		}
	})
}

// CheckScript is nft --check -f - with the script on stdin.
func TestNFTablesCheckScript(t *testing.T) {
	f := newFake()
	n := newFakeNFTables(t, f, NFTablesOptions{Netns: "ns1"})
	if err := n.CheckScript(context.Background(), "add table ip t\n"); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 1 || f.calls[0] != "ip netns exec ns1 nft --check -f -" || f.stdins[0] != "add table ip t\n" {
		t.Errorf("calls %q stdin %q", f.calls, f.stdins)
	}
}
