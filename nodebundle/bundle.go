// Package nodebundle reads one node's networking state as `clusterlab collect`'s
// script gathers it (a directory, or its .tar.gz): the iptables, nftables, ipset, IPVS
// and conntrack dumps, `ip -j` addresses, routes, links (with the bridge ports' hairpin
// modes) and neighbours, the bridges' forwarding entries, sysctls, the kernel release
// and kube-proxy's version and configuration. Every part may be missing; Missing says
// why (not collected, or the tool's error as the script recorded it).
package nodebundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	_ "embed"
)

// CollectScript is the shell script that gathers a bundle on a node.
//
//go:embed collect.sh
var CollectScript string

// The files of a bundle.
const (
	IPTablesSave  = "iptables-save.txt"
	IP6TablesSave = "ip6tables-save.txt"
	NFTRuleset    = "nft-ruleset.txt"
	IPSetSave     = "ipset-save.txt"
	IPVSSave      = "ipvsadm-Sn.txt"
	ConntrackList = "conntrack-L.txt"
	ConntrackStat = "conntrack-S.txt"
	IPAddr        = "ip-addr.json"
	IPRoute       = "ip-route.json"
	IPLink        = "ip-link.json"
	IPNeigh       = "ip-neigh.json"
	BridgeFDB     = "bridge-fdb.json"
	Sysctl        = "sysctl.txt"
	Uname         = "uname.txt"
)

// maxFile bounds one file of a bundle (a dump of a large node is some megabytes; a
// variable for the fuzz target).
var maxFile int64 = 256 << 20

// Bundle is a node's state as collected.
type Bundle struct {
	// Source is the directory or tarball it was read from.
	Source string
	files  map[string][]byte
	errs   map[string]string
	// Ifaces are the interfaces with their addresses (ip -j addr), in order.
	Ifaces []Iface
	// Routes are the main table's routes (ip -j route), in order.
	Routes []Route
	// Sysctls are the collected sysctls by name.
	Sysctls map[string]string
	// AbsentSysctls are the sysctls the script found not to exist on the node (the
	// net.bridge ones while br_netfilter is not loaded), as opposed to not collected.
	AbsentSysctls map[string]bool
	// Links are the interfaces with their kind and bridge details (ip -j -d link), in
	// order; nil when the bundle has no ip-link.json.
	Links []Link
	// Neighbours are the neighbour (ARP/NDP) entries (ip -j neigh), in order.
	Neighbours []Neighbour
	// FDB are the bridges' forwarding database entries (bridge -j fdb), in order.
	FDB []FDBEntry
}

// Link is one interface as `ip -j -d link show` describes it: what a bridge and its
// ports decide for a packet that comes back out the port it came in on.
type Link struct {
	Name string
	MAC  string
	// Kind is the link's type (linkinfo info_kind: "bridge", "veth", ...; "" for a
	// plain device); Master the bridge (or bond) it is a port of.
	Kind   string
	Master string
	// Promisc: the PROMISC flag (kubelet's --hairpin-mode=promiscuous-bridge sets it
	// on the bridge).
	Promisc bool
	// Hairpin is a bridge port's hairpin mode (info_slave_data hairpin); nil when the
	// link is not a bridge port or the dump does not say.
	Hairpin *bool
	// PortState is a bridge port's STP state ("forwarding", "disabled", ...).
	PortState string
	// NFCallIPTables is a bridge's own nf_call_iptables option (info_data): bridged
	// IPv4 frames go through iptables even with the sysctl off; nil when not a bridge
	// or not said.
	NFCallIPTables *bool
}

// Neighbour is one neighbour table entry: an address and the MAC it resolves to on
// an interface.
type Neighbour struct {
	Addr  netip.Addr
	Dev   string
	MAC   string
	State []string
}

// FDBEntry is one bridge forwarding database entry: the port a MAC was learnt (or
// set) on. Master is the bridge for entries of the bridge's own table; entries
// without it ("self") are the port device's own table, not the bridge's.
type FDBEntry struct {
	MAC    string
	Port   string
	Master string
	State  string
}

// Iface is one interface and its addresses.
type Iface struct {
	Name  string
	Addrs []netip.Prefix
}

// Route is one route of the main table.
type Route struct {
	Dst     netip.Prefix
	Dev     string
	Gateway netip.Addr
}

// Load reads a bundle: a directory, or a .tar.gz (.tgz) of one.
func Load(p string) (*Bundle, error) {
	b := newBundle(p)
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		err = b.readDir(p)
	} else {
		var f *os.File
		if f, err = os.Open(p); err == nil {
			err = b.readTar(f)
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("node bundle %s: %w", p, err)
	}
	if len(b.files) == 0 && len(b.errs) == 0 {
		return nil, fmt.Errorf("node bundle %s: none of the files `clusterlab collect` writes (%s, %s, ...)", p, IPTablesSave, NFTRuleset)
	}
	if err := b.parse(); err != nil {
		return nil, fmt.Errorf("node bundle %s: %w", p, err)
	}
	return b, nil
}

// FromFiles makes a bundle from files by name (FILE.err for a tool's error).
func FromFiles(source string, files map[string][]byte) (*Bundle, error) {
	b := newBundle(source)
	for name, data := range files {
		b.add(name, data)
	}
	if err := b.parse(); err != nil {
		return nil, fmt.Errorf("node bundle %s: %w", source, err)
	}
	return b, nil
}

func newBundle(source string) *Bundle {
	return &Bundle{Source: source, files: map[string][]byte{}, errs: map[string]string{}, Sysctls: map[string]string{}, AbsentSysctls: map[string]bool{}}
}

func (b *Bundle) add(name string, data []byte) {
	if base, ok := strings.CutSuffix(name, ".err"); ok {
		b.errs[base] = strings.TrimSpace(string(data))
		return
	}
	b.files[name] = data
}

func (b *Bundle) readDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := readLimited(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		b.add(e.Name(), data)
	}
	return nil
}

func readLimited(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if int64(len(data)) > maxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxFile)
	}
	return data, err
}

// readTar reads the files of a gzipped tarball (one directory's, as collect writes
// it: the files are taken by their base names).
func (b *Bundle) readTar(r io.Reader) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("not a directory nor a .tar.gz: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tarball: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > maxFile {
			return fmt.Errorf("%s: larger than %d bytes", h.Name, maxFile)
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxFile))
		if err != nil {
			return fmt.Errorf("tarball: %s: %w", h.Name, err)
		}
		b.add(path.Base(h.Name), data)
	}
}

// File returns a file of the bundle.
func (b *Bundle) File(name string) ([]byte, bool) {
	d, ok := b.files[name]
	return d, ok
}

// Missing says why a file is not in the bundle ("" when it is): the error the script
// recorded for its tool, or that it was not collected.
func (b *Bundle) Missing(name string) string {
	if _, ok := b.files[name]; ok {
		return ""
	}
	if e := b.errs[name]; e != "" {
		return e
	}
	return "not collected"
}

// Names lists the bundle's files.
func (b *Bundle) Names() []string {
	var out []string
	for n := range b.files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// parse reads the structured files: addresses, routes, sysctls, links, neighbours
// and the bridges' forwarding entries. A file that is there but does not parse is an
// error naming it; nothing is kept from a bundle that has one.
func (b *Bundle) parse() error {
	for _, step := range []struct {
		file  string
		parse func([]byte) error
	}{{IPAddr, b.parseAddrs}, {IPRoute, b.parseRoutes}, {IPLink, b.parseLinks}, {IPNeigh, b.parseNeigh}, {BridgeFDB, b.parseFDB}} {
		if data, ok := b.files[step.file]; ok && len(bytes.TrimSpace(data)) > 0 {
			if err := step.parse(data); err != nil {
				return err
			}
		}
	}
	if data, ok := b.files[Sysctl]; ok {
		b.parseSysctls(data)
	}
	return nil
}

func (b *Bundle) parseAddrs(data []byte) error {
	var links []struct {
		Name     string `json:"ifname"`
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(data, &links); err != nil {
		return fmt.Errorf("%s: want `ip -j addr show` output: %w", IPAddr, err)
	}
	for _, l := range links {
		ifc := Iface{Name: l.Name}
		for _, a := range l.AddrInfo {
			ip, err := netip.ParseAddr(a.Local)
			if err != nil {
				continue
			}
			pf, err := ip.Prefix(a.PrefixLen)
			if err != nil {
				return fmt.Errorf("%s: %s: address %s/%d: %w", IPAddr, l.Name, a.Local, a.PrefixLen, err)
			}
			ifc.Addrs = append(ifc.Addrs, netip.PrefixFrom(ip, pf.Bits()))
		}
		b.Ifaces = append(b.Ifaces, ifc)
	}
	return nil
}

func (b *Bundle) parseRoutes(data []byte) error {
	var routes []struct {
		Dst     string `json:"dst"`
		Dev     string `json:"dev"`
		Gateway string `json:"gateway"`
		Table   string `json:"table"`
		Type    string `json:"type"`
	}
	if err := json.Unmarshal(data, &routes); err != nil {
		return fmt.Errorf("%s: want `ip -j route show` output: %w", IPRoute, err)
	}
	for _, r := range routes {
		if r.Table != "" && r.Table != "main" || r.Type != "" && r.Type != "unicast" {
			continue
		}
		var dst netip.Prefix
		switch {
		case r.Dst == "default":
			// set below by the gateway's family
		case strings.Contains(r.Dst, "/"):
			p, err := netip.ParsePrefix(r.Dst)
			if err != nil {
				return fmt.Errorf("%s: route %q: %w", IPRoute, r.Dst, err)
			}
			dst = p
		default:
			a, err := netip.ParseAddr(r.Dst)
			if err != nil {
				return fmt.Errorf("%s: route %q: %w", IPRoute, r.Dst, err)
			}
			dst = netip.PrefixFrom(a, a.BitLen())
		}
		rt := Route{Dev: r.Dev}
		if r.Gateway != "" {
			gw, err := netip.ParseAddr(r.Gateway)
			if err != nil {
				return fmt.Errorf("%s: gateway %q: %w", IPRoute, r.Gateway, err)
			}
			rt.Gateway = gw
		}
		if r.Dst == "default" {
			dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if rt.Gateway.Is6() {
				dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
		}
		rt.Dst = dst
		b.Routes = append(b.Routes, rt)
	}
	return nil
}

// parseSysctls reads "KEY = VALUE" lines, and "# not present: KEY" for a sysctl the
// node does not have.
func (b *Bundle) parseSysctls(data []byte) {
	for _, line := range strings.Split(string(data), "\n") {
		if k, ok := strings.CutPrefix(strings.TrimSpace(line), "# not present:"); ok {
			b.AbsentSysctls[strings.TrimSpace(k)] = true
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			b.Sysctls[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
}

// jsonBool reads a flag `ip -j` prints as a boolean (bridge_slave hairpin) or as 0/1
// (the bridge's nf_call_iptables); nil when absent.
type jsonBool struct{ v *bool }

func (j *jsonBool) UnmarshalJSON(data []byte) error {
	var v bool
	switch strings.TrimSpace(string(data)) {
	case "true", "1", `"on"`:
		v = true
	case "false", "0", `"off"`:
	case "null":
		return nil
	default:
		return fmt.Errorf("want true, false, 0 or 1, not %s", data)
	}
	j.v = &v
	return nil
}

func (b *Bundle) parseLinks(data []byte) error {
	var links []struct {
		Name     string   `json:"ifname"`
		Address  string   `json:"address"`
		Master   string   `json:"master"`
		Flags    []string `json:"flags"`
		LinkInfo struct {
			Kind     string `json:"info_kind"`
			InfoData struct {
				NFCallIPTables jsonBool `json:"nf_call_iptables"`
			} `json:"info_data"`
			SlaveKind string `json:"info_slave_kind"`
			SlaveData struct {
				Hairpin jsonBool `json:"hairpin"`
				State   string   `json:"state"`
			} `json:"info_slave_data"`
		} `json:"linkinfo"`
	}
	if err := json.Unmarshal(data, &links); err != nil {
		return fmt.Errorf("%s: want `ip -j -d link show` output: %w", IPLink, err)
	}
	b.Links = []Link{}
	for _, l := range links {
		li := l.LinkInfo
		ln := Link{Name: l.Name, MAC: strings.ToLower(l.Address), Kind: li.Kind, Master: l.Master, Promisc: slices.Contains(l.Flags, "PROMISC")}
		if li.Kind == "bridge" {
			ln.NFCallIPTables = li.InfoData.NFCallIPTables.v
		}
		if li.SlaveKind == "bridge" {
			ln.Hairpin, ln.PortState = li.SlaveData.Hairpin.v, li.SlaveData.State
		}
		b.Links = append(b.Links, ln)
	}
	return nil
}

func (b *Bundle) parseNeigh(data []byte) error {
	var ns []struct {
		Dst    string   `json:"dst"`
		Dev    string   `json:"dev"`
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	if err := json.Unmarshal(data, &ns); err != nil {
		return fmt.Errorf("%s: want `ip -j neigh show` output: %w", IPNeigh, err)
	}
	for _, n := range ns {
		a, err := netip.ParseAddr(n.Dst)
		if err != nil {
			return fmt.Errorf("%s: neighbour %q: want an IP address", IPNeigh, n.Dst)
		}
		b.Neighbours = append(b.Neighbours, Neighbour{Addr: a.Unmap(), Dev: n.Dev, MAC: strings.ToLower(n.LLAddr), State: n.State})
	}
	return nil
}

func (b *Bundle) parseFDB(data []byte) error {
	var fdb []struct {
		MAC    string `json:"mac"`
		Port   string `json:"ifname"`
		Master string `json:"master"`
		State  string `json:"state"`
	}
	if err := json.Unmarshal(data, &fdb); err != nil {
		return fmt.Errorf("%s: want `bridge -j fdb show` output: %w", BridgeFDB, err)
	}
	for _, e := range fdb {
		b.FDB = append(b.FDB, FDBEntry{MAC: strings.ToLower(e.MAC), Port: e.Port, Master: e.Master, State: e.State})
	}
	return nil
}

// LocalAddrs are the node's addresses (every interface's, loopback included).
func (b *Bundle) LocalAddrs() []netip.Addr {
	var out []netip.Addr
	for _, i := range b.Ifaces {
		for _, a := range i.Addrs {
			out = append(out, a.Addr())
		}
	}
	return out
}

// PrimaryAddrs maps each interface to its first address of the family (IPv6: its
// first global one), the one the kernel's MASQUERADE takes for a packet leaving by it.
func (b *Bundle) PrimaryAddrs(ipv6 bool) map[string]netip.Addr {
	out := map[string]netip.Addr{}
	for _, i := range b.Ifaces {
		for _, a := range i.Addrs {
			ip := a.Addr()
			if ip.Is6() != ipv6 || ipv6 && ip.IsLinkLocalUnicast() {
				continue
			}
			if _, ok := out[i.Name]; !ok {
				out[i.Name] = ip
			}
		}
	}
	return out
}

// OutIface is the interface the main table's longest matching route sends dst out of,
// and the route ("" when no route matches).
func (b *Bundle) OutIface(dst netip.Addr) (string, Route) {
	best := -1
	var out Route
	for _, r := range b.Routes {
		if r.Dst.Addr().Is4() != dst.Is4() || !r.Dst.Contains(dst) || r.Dst.Bits() <= best {
			continue
		}
		best, out = r.Dst.Bits(), r
	}
	return out.Dev, out
}

// Link returns the interface of that name.
func (b *Bundle) Link(name string) (Link, bool) {
	for _, l := range b.Links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}

// Ports are a bridge's ports, in order.
func (b *Bundle) Ports(bridge string) []Link {
	var out []Link
	for _, l := range b.Links {
		if l.Master == bridge && l.Name != bridge {
			out = append(out, l)
		}
	}
	return out
}

// PortOf finds the bridge port behind an address on a bridge, as the kernel's bridge
// would: the address's MAC from the neighbour table (on the bridge device), then the
// port the bridge's forwarding database has that MAC on. It returns "" and the reason
// when either is missing.
func (b *Bundle) PortOf(bridge string, addr netip.Addr) (string, string) {
	if b.Neighbours == nil {
		return "", fmt.Sprintf("no neighbour table (%s: %s)", IPNeigh, b.Missing(IPNeigh))
	}
	mac := ""
	for _, n := range b.Neighbours {
		if n.Addr == addr.Unmap() && n.Dev == bridge && n.MAC != "" {
			mac = n.MAC
			break
		}
	}
	if mac == "" {
		return "", fmt.Sprintf("%s has no entry for %s on %s", IPNeigh, addr, bridge)
	}
	if b.FDB == nil {
		return "", fmt.Sprintf("%s is %s, but no forwarding database (%s: %s)", addr, mac, BridgeFDB, b.Missing(BridgeFDB))
	}
	for _, e := range b.FDB {
		// An entry without an interface names no port (bridge -j fdb always gives
		// one; a fuzzed or edited file may not).
		if e.MAC == mac && e.Master == bridge && e.Port != bridge && e.Port != "" {
			return e.Port, ""
		}
	}
	return "", fmt.Sprintf("%s is %s, which %s has on no port of %s", addr, mac, BridgeFDB, bridge)
}
