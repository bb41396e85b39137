package kernel

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// newNFTNetns makes an empty throwaway network namespace (deleted when the test ends)
// and an NFTables adapter for the given family in it, or skips the test when this
// machine cannot (not root, no ip or nft).
func newNFTNetns(t *testing.T, family knftables.Family) *NFTables {
	t.Helper()
	RequireTools(t, "nft")
	n, err := NewNFTables(ctxT(t), NFTablesOptions{Family: family, Netns: NewTestNetns(t)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nftDumpOrder reorders knftables Fake.Dump()-style text (kube-proxy's expected
// rulesets, which group lines per service) into an order nft accepts, the order
// Fake.Dump itself prints: tables, chains, sets, maps, counters, then rules and
// elements (rules and elements keep their relative order), so that every object
// exists before a rule or element refers to it. Comments and blank lines go.
func nftDumpOrder(t *testing.T, text string) string {
	t.Helper()
	rank := map[string]int{"table": 0, "chain": 1, "set": 2, "map": 3, "counter": 4, "rule": 5, "element": 6}
	type line struct {
		rank int
		text string
	}
	var lines []line
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		r, ok := rank[f[min(1, len(f)-1)]]
		if len(f) < 4 || f[0] != "add" || !ok {
			t.Fatalf("line %d: %q: want add table|chain|set|map|counter|rule|element", i+1, l)
		}
		lines = append(lines, line{r, l})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.rank - b.rank })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/nftables/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kube-proxy's own expected ruleset (TestOverallNFTablesRules) loads into a kernel;
// its listing, loaded into a fresh namespace, lists back identically.
func TestNFTablesKubeProxyRulesetRoundTrip(t *testing.T) {
	ctx := ctxT(t)
	first := newNFTNetns(t, knftables.IPv4Family)
	script := nftDumpOrder(t, readTestdata(t, "kube-proxy-overall.nft"))
	if err := first.ApplyScript(ctx, script); err != nil {
		t.Fatalf("apply kube-proxy's expected ruleset: %v", err)
	}
	listed, err := first.ListRuleset(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	text := string(listed)
	// nft's normalised spelling of what kube-proxy wrote (reference §6).
	for _, want := range []string{
		"table ip kube-proxy {\n\tcomment \"rules for kube-proxy\"\n",
		"\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n",
		"\tchain filter-prerouting-pre-dnat {\n\t\ttype filter hook prerouting priority dstnat - 10; policy accept;\n",
		"\t\tmeta mark set meta mark | 0x00004000\n",
		"\t\tip daddr . meta l4proto . th dport vmap @service-ips\n",
		"\t\tip daddr 172.30.0.0/16 drop comment \"Drop traffic to unallocated ClusterIPs\"\n",
		"\t\tip saddr != 203.0.113.0/25 drop\n",
		"\t\tupdate @affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 { ip saddr }\n",
		"\t\tflags dynamic,timeout\n\t\ttimeout 3h\n",
		"\t\tmeta l4proto tcp dnat to 10.180.0.3:80\n",
		"172.30.0.46 . tcp . 80 comment \"ns6/svc6:p80\" : goto reject-chain",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("nft list ruleset lacks %q", want)
		}
	}
	// Every chain, set and map of the script is there.
	for _, l := range strings.Split(script, "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && (f[1] == "chain" || f[1] == "set" || f[1] == "map") && !strings.Contains(text, "\t"+f[1]+" "+f[4]+" {\n") {
			t.Errorf("listing lacks %s %s", f[1], f[4])
		}
	}
	if t.Failed() {
		t.Logf("listing:\n%s", text)
	}
	second := newNFTNetns(t, knftables.IPv4Family)
	if err := second.ApplyScript(ctx, text); err != nil {
		t.Fatalf("apply the listing into a fresh namespace: %v", err)
	}
	again, err := second.ListRuleset(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != text {
		t.Errorf("round trip changed the ruleset:\nfirst:\n%s\nsecond:\n%s", text, again)
	}
	// -a adds handles; -j is libnftables JSON with the same objects.
	handles, err := first.ListRuleset(ctx, NFTListOptions{Handles: true})
	if err != nil || !strings.Contains(string(handles), "table ip kube-proxy { # handle ") || !strings.Contains(string(handles), "jump services # handle ") {
		t.Errorf("nft -a list ruleset: %v\n%s", err, handles)
	}
	js, err := first.ListRuleset(ctx, NFTListOptions{JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("nft -j list ruleset: %v\n%s", err, js)
	}
	kinds := map[string]int{}
	for _, item := range doc.Nftables {
		for k := range item {
			kinds[k]++
		}
	}
	if kinds["metainfo"] != 1 || kinds["table"] != 1 || kinds["chain"] != strings.Count(text, "\tchain ") || kinds["rule"] < 40 {
		t.Errorf("JSON objects by kind %v", kinds)
	}
	table, err := first.ListTable(ctx, NFTListOptions{})
	if err != nil || string(table) != text {
		t.Errorf("ListTable differs from the ruleset of a namespace holding only that table: %v\n%s", err, table)
	}
}

// The generator's path: kube-proxy's expected ruleset as knftables objects (parsed by
// knftables' own Fake.ParseDump, as kube-proxy's tests parse it) in one transaction
// through Run gives the kernel the same ruleset as the text through ApplyScript.
func TestNFTablesKubeProxyRulesetThroughRun(t *testing.T) {
	ctx := ctxT(t)
	text := nftDumpOrder(t, readTestdata(t, "kube-proxy-overall.nft"))
	fake := knftables.NewFake(knftables.IPv4Family, "kube-proxy")
	if err := fake.ParseDump(text); err != nil {
		t.Fatalf("knftables ParseDump: %v", err)
	}
	tx := fake.LastTransaction
	if tx == nil || tx.NumOperations() != strings.Count(text, "\n") {
		t.Fatalf("ParseDump's transaction: %v operations for %d lines", tx.NumOperations(), strings.Count(text, "\n"))
	}
	viaRun := newNFTNetns(t, knftables.IPv4Family)
	if err := viaRun.Run(ctx, tx); err != nil {
		t.Fatalf("Run kube-proxy's ruleset as a knftables transaction: %v", err)
	}
	viaScript := newNFTNetns(t, knftables.IPv4Family)
	if err := viaScript.ApplyScript(ctx, text); err != nil {
		t.Fatal(err)
	}
	a, err := viaRun.ListRuleset(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := viaScript.ListRuleset(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) || !strings.Contains(string(a), "chain service-HVFWP5L3-ns5/svc5/tcp/p80 {") {
		t.Errorf("Run and ApplyScript gave different rulesets:\nRun:\n%s\nApplyScript:\n%s", a, b)
	}
	// Run again: every add of an existing table, chain, set, map or element is a no-op
	// for nft, rules are appended again (as kube-proxy flushes chains before refilling).
	if err := viaRun.Run(ctx, tx); err != nil {
		t.Fatalf("second Run: %v", err)
	}
	again, _ := viaRun.ListRuleset(ctx, NFTListOptions{})
	if n1, n2 := strings.Count(string(a), "jump services"), strings.Count(string(again), "jump services"); n2 != 2*n1 {
		t.Errorf("second Run: %d 'jump services' rules, want %d", n2, 2*n1)
	}
}

// A transaction that fails (a rule jumping to a chain that does not exist) changes
// nothing, and its error names nft's line.
func TestNFTablesFailedTransactionChangesNothing(t *testing.T) {
	ctx := ctxT(t)
	n := newNFTNetns(t, knftables.IPv4Family)
	if err := n.ApplyScript(ctx, nftDumpOrder(t, readTestdata(t, "kube-proxy-overall.nft"))); err != nil {
		t.Fatal(err)
	}
	before, err := n.ListRuleset(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tx := n.NewTransaction()
	tx.Add(&knftables.Chain{Name: "service-NEW-ns9/svc9/tcp/p80"})
	tx.Add(&knftables.Rule{Chain: "service-NEW-ns9/svc9/tcp/p80", Rule: "ip daddr 172.30.0.49 jump mark-for-masquerade"})
	tx.Add(&knftables.Element{Map: "service-ips", Key: []string{"172.30.0.49", "tcp", "80"}, Value: []string{"goto service-NEW-ns9/svc9/tcp/p80"}})
	tx.Add(&knftables.Rule{Chain: "services", Rule: "ip daddr 172.30.0.49 jump no-such-chain"})
	tx.Flush(&knftables.Chain{Name: "nat-prerouting"})
	err = n.Run(ctx, tx)
	var ne *NFTError
	if !errors.As(err, &ne) || ne.Line != 4 || !strings.Contains(ne.Text, "jump no-such-chain") {
		t.Fatalf("Run: %v; want an *NFTError naming line 4 (the jump to no-such-chain)", err)
	}
	if !strings.Contains(ne.Err.Stderr, "Could not process rule") || !IsNFTNotFound(err) {
		t.Errorf("nft's stderr %q", ne.Err.Stderr)
	}
	after, err := n.ListRuleset(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("failed transaction changed the ruleset:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// A syntax error is refused the same way, naming its line.
	err = n.ApplyScript(ctx, "add chain ip kube-proxy x\nadd rule ip kube-proxy x ip daddr 10.0.0.300 drop\n")
	if !errors.As(err, &ne) || ne.Line != 2 {
		t.Errorf("bad address: %v, want line 2", err)
	}
	if after, _ := n.ListRuleset(ctx, NFTListOptions{}); string(after) != string(before) {
		t.Error("failed script changed the ruleset")
	}
	// Check is a dry run: it validates against the kernel and changes nothing.
	good := n.NewTransaction()
	good.Add(&knftables.Chain{Name: "checked"})
	if err := n.Check(ctx, good); err != nil {
		t.Errorf("Check: %v", err)
	}
	if after, _ := n.ListRuleset(ctx, NFTListOptions{}); strings.Contains(string(after), "checked") {
		t.Error("Check created the chain")
	}
}

// A transaction built in Go, as the generator builds them, runs through Run; a second,
// partial one (flush and refill a chain, replace a map element) applies on top.
func TestNFTablesGoTransaction(t *testing.T) {
	ctx := ctxT(t)
	n := newNFTNetns(t, knftables.IPv4Family)
	tx := n.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for kube-proxy")})
	tx.Add(&knftables.Chain{Name: "nat-prerouting", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	tx.Add(&knftables.Chain{Name: "services"})
	tx.Add(&knftables.Chain{Name: "service-A"})
	tx.Add(&knftables.Set{Name: "cluster-ips", Type: "ipv4_addr", Comment: knftables.PtrTo("Active ClusterIPs")})
	tx.Add(&knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
	tx.Add(&knftables.Rule{Chain: "nat-prerouting", Rule: "jump services"})
	tx.Add(&knftables.Rule{Chain: "services", Rule: knftables.Concat("ip daddr", ".", "meta l4proto", ".", "th dport", "vmap", "@", "service-ips")})
	tx.Add(&knftables.Rule{Chain: "service-A", Rule: "meta l4proto tcp dnat to 10.244.0.2:8080", Comment: knftables.PtrTo("ns1/a:http")})
	tx.Add(&knftables.Element{Set: "cluster-ips", Key: []string{"10.96.0.10"}})
	tx.Add(&knftables.Element{Map: "service-ips", Key: []string{"10.96.0.10", "tcp", "80"}, Value: []string{"goto service-A"}})
	if err := n.Run(ctx, tx); err != nil {
		t.Fatalf("Run:\n%s\n%v", tx, err)
	}
	listed, err := n.ListTable(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\tset cluster-ips {\n\t\ttype ipv4_addr\n\t\tcomment \"Active ClusterIPs\"\n\t\telements = { 10.96.0.10 }\n\t}\n",
		"\t\telements = { 10.96.0.10 . tcp . 80 : goto service-A }\n",
		"\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n",
		"\t\tmeta l4proto tcp dnat to 10.244.0.2:8080 comment \"ns1/a:http\"\n",
	} {
		if !strings.Contains(string(listed), want) {
			t.Errorf("listing lacks %q:\n%s", want, listed)
		}
	}
	partial := n.NewTransaction()
	partial.Add(&knftables.Chain{Name: "service-B"})
	partial.Flush(&knftables.Chain{Name: "service-B"})
	partial.Add(&knftables.Rule{Chain: "service-B", Rule: "meta l4proto tcp dnat to 10.244.0.3:8080"})
	partial.Delete(&knftables.Element{Map: "service-ips", Key: []string{"10.96.0.10", "tcp", "80"}})
	partial.Add(&knftables.Element{Map: "service-ips", Key: []string{"10.96.0.10", "tcp", "80"}, Value: []string{"goto service-B"}})
	if err := n.Run(ctx, partial); err != nil {
		t.Fatalf("partial Run: %v", err)
	}
	listed, _ = n.ListTable(ctx, NFTListOptions{})
	if !strings.Contains(string(listed), "10.96.0.10 . tcp . 80 : goto service-B }") || !strings.Contains(string(listed), "dnat to 10.244.0.3:8080") {
		t.Errorf("after the partial transaction:\n%s", listed)
	}
	// Deleting an element that is gone fails as knftables' not-found would.
	gone := n.NewTransaction()
	gone.Delete(&knftables.Element{Set: "cluster-ips", Key: []string{"10.96.0.99"}})
	if err := n.Run(ctx, gone); !IsNFTNotFound(err) {
		t.Errorf("delete a missing element: %v, want not found", err)
	}
	create := n.NewTransaction()
	create.Create(&knftables.Chain{Name: "services"})
	if err := n.Run(ctx, create); !IsNFTExists(err) {
		t.Errorf("create an existing chain: %v, want exists", err)
	}
}

// DeleteTable removes kube-proxy's table and only it.
func TestNFTablesDeleteTable(t *testing.T) {
	ctx := ctxT(t)
	n := newNFTNetns(t, knftables.IPv4Family)
	if err := n.ApplyScript(ctx, nftDumpOrder(t, readTestdata(t, "kube-proxy-overall.nft"))); err != nil {
		t.Fatal(err)
	}
	other := "table ip other {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\ttcp dport 22 accept\n\t}\n}\n" +
		"table ip6 kube-proxy {\n\tchain services {\n\t}\n}\n"
	if err := n.ApplyScript(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteTable(ctx, knftables.IPv4Family, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	listed, err := n.ListRuleset(ctx, NFTListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(listed) != other {
		t.Errorf("after DeleteTable(ip, kube-proxy):\n%s\nwant only:\n%s", listed, other)
	}
	if err := n.DeleteTable(ctx, knftables.IPv4Family, "kube-proxy"); !IsNFTNotFound(err) {
		t.Errorf("delete a missing table: %v, want not found", err)
	}
	if _, err := n.ListTable(ctx, NFTListOptions{}); !IsNFTNotFound(err) {
		t.Errorf("ListTable of a missing table: %v, want not found", err)
	}
}
