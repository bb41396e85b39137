// Package nodebundle reads one node's networking state as `clusterlab collect`'s
// script gathers it (a directory, or its .tar.gz): the iptables, nftables, ipset, IPVS
// and conntrack dumps, `ip -j` addresses, routes and links, sysctls, the kernel release
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
	return &Bundle{Source: source, files: map[string][]byte{}, errs: map[string]string{}, Sysctls: map[string]string{}}
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

// parse reads the structured files: addresses, routes, sysctls.
func (b *Bundle) parse() error {
	if data, ok := b.files[IPAddr]; ok && len(bytes.TrimSpace(data)) > 0 {
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
	}
	if data, ok := b.files[IPRoute]; ok && len(bytes.TrimSpace(data)) > 0 {
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
	}
	if data, ok := b.files[Sysctl]; ok {
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if ok {
				b.Sysctls[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
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
