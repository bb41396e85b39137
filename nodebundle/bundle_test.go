package nodebundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testBundle = "../testdata/nodebundle/kind-worker"

// tarOf gzips a directory's files as collect's tar does (under the directory's name).
func tarOf(t testing.TB, dir string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tw.WriteHeader(&tar.Header{Name: "kind-worker/", Typeflag: tar.TypeDir, Mode: 0o755})
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: "kind-worker/" + e.Name(), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))})
		tw.Write(data)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// TestLoad: a bundle directory and its tarball load alike: the files, the tools'
// recorded errors, addresses, main-table routes (local table left out) and sysctls;
// routes pick the longest match; primary addresses skip IPv6 link-local ones.
func TestLoad(t *testing.T) {
	tgz := filepath.Join(t.TempDir(), "kind-worker.tar.gz")
	if err := os.WriteFile(tgz, tarOf(t, testBundle), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{testBundle, tgz} {
		b, err := Load(src)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := b.File(IPTablesSave); !ok || !strings.Contains(string(d), ":KUBE-SERVICES") {
			t.Errorf("%s: iptables-save missing", src)
		}
		if got := b.Missing(IPSetSave); got != "ipset: not installed" {
			t.Errorf("%s: ipset missing because %q", src, got)
		}
		if got := b.Missing(NFTRuleset); got != "not collected" {
			t.Errorf("%s: nft missing because %q", src, got)
		}
		if len(b.Ifaces) != 3 || b.Ifaces[1].Name != "eth0" || len(b.Ifaces[1].Addrs) != 2 {
			t.Errorf("%s: interfaces %+v", src, b.Ifaces)
		}
		if p := b.PrimaryAddrs(false); p["eth0"] != netip.MustParseAddr("172.18.0.2") || p["cbr0"] != netip.MustParseAddr("10.244.0.1") {
			t.Errorf("%s: primary addresses %v", src, p)
		}
		if p := b.PrimaryAddrs(true); len(p) != 0 {
			t.Errorf("%s: IPv6 primary addresses %v, want none (fe80:: is link-local)", src, p)
		}
		if len(b.Routes) != 3 {
			t.Errorf("%s: routes %+v, want the main table's 3", src, b.Routes)
		}
		for dst, want := range map[string]string{"10.244.0.9": "cbr0", "10.244.1.9": "eth0", "8.8.8.8": "eth0"} {
			if dev, _ := b.OutIface(netip.MustParseAddr(dst)); dev != want {
				t.Errorf("%s: %s leaves by %q, want %s", src, dst, dev, want)
			}
		}
		if dev, _ := b.OutIface(netip.MustParseAddr("fd00::1")); dev != "" {
			t.Errorf("%s: an IPv6 destination leaves by %q with IPv4 routes only", src, dev)
		}
		if b.Sysctls["net.ipv4.conf.all.route_localnet"] != "1" {
			t.Errorf("%s: sysctls %v", src, b.Sysctls)
		}
	}
}

// TestLoadErrors: what is not a bundle is an error naming it and the file.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "none of the files") {
		t.Errorf("empty directory: %v", err)
	}
	bad := filepath.Join(dir, "x.tar.gz")
	os.WriteFile(bad, []byte("plain text"), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "not a directory nor a .tar.gz") {
		t.Errorf("not a tarball: %v", err)
	}
	if _, err := FromFiles("b", map[string][]byte{IPAddr: []byte("{")}); err == nil || !strings.Contains(err.Error(), "ip-addr.json: want `ip -j addr show` output") {
		t.Errorf("bad addresses: %v", err)
	}
	if _, err := FromFiles("b", map[string][]byte{IPRoute: []byte(`[{"dst":"10.0.0.0/33","dev":"eth0"}]`)}); err == nil || !strings.Contains(err.Error(), `ip-route.json: route "10.0.0.0/33"`) {
		t.Errorf("bad route: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "nope")); err == nil {
		t.Error("a path that does not exist: no error")
	}
}

// FuzzLoadTar: a bundle tarball never makes the loader panic.
func FuzzLoadTar(f *testing.F) {
	f.Add(tarOf(f, testBundle))
	maxFile = 1 << 20
	f.Fuzz(func(t *testing.T, tgz []byte) {
		b := newBundle("fuzz")
		if err := b.readTar(bytes.NewReader(tgz)); err == nil {
			_ = b.parse()
		}
	})
}

// FuzzParse: the addresses and routes (ip -j output) never make the parser panic, and
// what parses answers route and address questions.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`[{"ifname":"eth0","addr_info":[{"family":"inet","local":"10.0.0.1","prefixlen":24}]}]`), []byte(`[{"dst":"default","gateway":"10.0.0.254","dev":"eth0"},{"dst":"10.1.0.0/16","dev":"cbr0"}]`))
	f.Fuzz(func(t *testing.T, addrs, routes []byte) {
		b, err := FromFiles("fuzz", map[string][]byte{IPAddr: addrs, IPRoute: routes})
		if err != nil {
			return
		}
		for _, a := range b.LocalAddrs() {
			b.OutIface(a)
		}
		b.PrimaryAddrs(false)
		b.PrimaryAddrs(true)
	})
}

const bridgeBundle = "../testdata/nodebundle/bridge-node"

// TestLoadBridge: a bundle collected from a bridged node gives the bridge, its ports
// with their hairpin modes, the bridge's own nf_call_iptables, the sysctls the node
// does not have, and a pod address's port (neighbour MAC, then the bridge's
// forwarding entry for it); what is missing for a port says why.
func TestLoadBridge(t *testing.T) {
	b, err := Load(bridgeBundle)
	if err != nil {
		t.Fatal(err)
	}
	br, ok := b.Link("cbr0")
	if !ok || br.Kind != "bridge" || br.NFCallIPTables == nil || *br.NFCallIPTables {
		t.Fatalf("cbr0: %+v", br)
	}
	hairpin := map[string]bool{}
	for _, p := range b.Ports("cbr0") {
		if p.Hairpin == nil || p.PortState != "forwarding" {
			t.Fatalf("port %+v: no hairpin mode or not forwarding", p)
		}
		hairpin[p.Name] = *p.Hairpin
	}
	if len(hairpin) != 3 || hairpin["vethsolo"] || !hairpin["vethweb"] || !hairpin["vethcli"] {
		t.Errorf("hairpin modes %v, want vethsolo off, vethweb and vethcli on", hairpin)
	}
	if eth, _ := b.Link("eth0"); eth.Hairpin != nil || eth.Master != "" {
		t.Errorf("eth0 is no bridge port: %+v", eth)
	}
	for addr, want := range map[string]string{"10.244.0.5": "vethsolo", "10.244.0.6": "vethweb", "10.244.0.7": "vethcli"} {
		if port, why := b.PortOf("cbr0", netip.MustParseAddr(addr)); port != want {
			t.Errorf("%s: port %q (%s), want %s", addr, port, why, want)
		}
	}
	if port, why := b.PortOf("cbr0", netip.MustParseAddr("10.244.0.9")); port != "" || !strings.Contains(why, "ip-neigh.json has no entry for 10.244.0.9 on cbr0") {
		t.Errorf("an address without a neighbour entry: %q, %q", port, why)
	}
	if b.Sysctls["net.bridge.bridge-nf-call-iptables"] != "1" || !b.AbsentSysctls["net.ipv4.vs.conntrack"] || b.AbsentSysctls["net.bridge.bridge-nf-call-iptables"] {
		t.Errorf("sysctls %v, absent %v", b.Sysctls, b.AbsentSysctls)
	}
	// Without the forwarding database the port is not known, and the reason says so.
	files := map[string][]byte{}
	for _, f := range []string{IPLink, IPNeigh} {
		files[f], _ = os.ReadFile(filepath.Join(bridgeBundle, f))
	}
	files[BridgeFDB+".err"] = []byte("bridge: not installed")
	nb, err := FromFiles("b", files)
	if err != nil {
		t.Fatal(err)
	}
	if port, why := nb.PortOf("cbr0", netip.MustParseAddr("10.244.0.5")); port != "" || !strings.Contains(why, "no forwarding database (bridge-fdb.json: bridge: not installed)") {
		t.Errorf("no fdb: %q, %q", port, why)
	}
	if port, why := (&Bundle{}).PortOf("cbr0", netip.MustParseAddr("10.244.0.5")); port != "" || !strings.Contains(why, "no neighbour table") {
		t.Errorf("no neighbours: %q, %q", port, why)
	}
}

// TestLoadBridgeErrors: a links, neighbour or forwarding file that is not the tool's
// JSON is an error naming the file; nothing is loaded.
func TestLoadBridgeErrors(t *testing.T) {
	for _, c := range []struct{ file, data, want string }{
		{IPLink, `{"ifname":"cbr0"}`, "ip-link.json: want `ip -j -d link show` output"},
		{IPLink, `[{"ifname":"vethx","linkinfo":{"info_slave_kind":"bridge","info_slave_data":{"hairpin":"maybe"}}}]`, "ip-link.json: want `ip -j -d link show` output"},
		{IPNeigh, `[{"dst":"10.0.0.300","dev":"cbr0"}]`, `ip-neigh.json: neighbour "10.0.0.300": want an IP address`},
		{IPNeigh, `[`, "ip-neigh.json: want `ip -j neigh show` output"},
		{BridgeFDB, `[{"mac":1}]`, "bridge-fdb.json: want `bridge -j fdb show` output"},
	} {
		if b, err := FromFiles("b", map[string][]byte{c.file: []byte(c.data)}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, %v; want an error with %q", c.file, c.data, b, err, c.want)
		}
	}
}

// FuzzParseBridge: the links, neighbours and forwarding entries (ip -j -d link, ip -j
// neigh, bridge -j fdb) never make the parser panic, and what parses answers port
// questions.
func FuzzParseBridge(f *testing.F) {
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(bridgeBundle, name))
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	f.Add(read(IPLink), read(IPNeigh), read(BridgeFDB))
	f.Add([]byte(`[{"ifname":"cbr0","linkinfo":{"info_kind":"bridge","info_data":{"nf_call_iptables":1}}},{"ifname":"v","master":"cbr0","linkinfo":{"info_slave_kind":"bridge","info_slave_data":{"hairpin":true}}}]`),
		[]byte(`[{"dst":"10.0.0.2","dev":"cbr0","lladdr":"aa:bb:cc:dd:ee:ff"}]`), []byte(`[{"mac":"AA:BB:CC:DD:EE:FF","ifname":"v","master":"cbr0"}]`))
	f.Fuzz(func(t *testing.T, links, neigh, fdb []byte) {
		b, err := FromFiles("fuzz", map[string][]byte{IPLink: links, IPNeigh: neigh, BridgeFDB: fdb})
		if err != nil {
			return
		}
		for _, l := range b.Links {
			b.Ports(l.Name)
			for _, n := range b.Neighbours {
				if port, why := b.PortOf(l.Name, n.Addr); port == "" && why == "" {
					t.Fatalf("no port and no reason for %s on %s", n.Addr, l.Name)
				}
			}
		}
	})
}
