package emulator

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// This file prints the model the way ipvsadm -Ln, -Lnc and -Sn do, and loads
// ipvsadm -Sn (restore format) and ipvsadm -Ln dumps.

// IPVSVersion is the IPVS version ipvsadm prints in its listing header.
const IPVSVersion = "1.2.1"

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

type listFormat struct {
	noSort, thresholds, persistentConn, tunInfo bool
}

func (f listFormat) title(w io.Writer) {
	switch {
	case f.thresholds:
		fmt.Fprintf(w, "%-33s %-10s %-10s %-10s %-10s\n  -> RemoteAddress:Port\n",
			"Prot LocalAddress:Port", "Uthreshold", "Lthreshold", "ActiveConn", "InActConn")
	case f.persistentConn:
		fmt.Fprintf(w, "%-33s %-9s %-11s %-10s %-10s\n  -> RemoteAddress:Port\n",
			"Prot LocalAddress:Port", "Weight", "PersistConn", "ActiveConn", "InActConn")
	case f.tunInfo:
		fmt.Fprint(w, "Prot LocalAddress:Port Scheduler Flags\n"+
			"  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn\n")
	default:
		fmt.Fprint(w, "Prot LocalAddress:Port Scheduler Flags\n"+
			"  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	}
}

// fmtAddrPort is addrport_to_anyname() with FMT_NUMERIC.
func fmtAddrPort(a netip.Addr, port uint16) string {
	if a.Is6() && !a.Is4In6() {
		return "[" + a.String() + "]:" + strconv.Itoa(int(port))
	}
	return a.Unmap().String() + ":" + strconv.Itoa(int(port))
}

func fwdName(f ipvs.ForwardMethod) string {
	switch f {
	case ipvs.Masquerade:
		return "Masq"
	case ipvs.Local:
		return "Local"
	case ipvs.Tunnel:
		return "Tunnel"
	case ipvs.DirectRoute:
		return "Route"
	}
	return ""
}

func fwdSwitch(f ipvs.ForwardMethod) string {
	switch f {
	case ipvs.Masquerade:
		return "-m"
	case ipvs.Tunnel:
		return "-i"
	}
	return "-g"
}

func (s *service) schedFlagsString() string {
	var fl []string
	switch s.schedName {
	case "sh":
		if s.flags&ipvs.FlagSchedSH1 != 0 {
			fl = append(fl, "sh-fallback")
		}
		if s.flags&ipvs.FlagSchedSH2 != 0 {
			fl = append(fl, "sh-port")
		}
	case "mh":
		if s.flags&ipvs.FlagSchedSH1 != 0 {
			fl = append(fl, "mh-fallback")
		}
		if s.flags&ipvs.FlagSchedSH2 != 0 {
			fl = append(fl, "mh-port")
		}
	default:
		if s.flags&ipvs.FlagSchedSH1 != 0 {
			fl = append(fl, "flag-1")
		}
		if s.flags&ipvs.FlagSchedSH2 != 0 {
			fl = append(fl, "flag-2")
		}
		if s.flags&ipvs.FlagSchedSH3 != 0 {
			fl = append(fl, "flag-3")
		}
	}
	return strings.Join(fl, ",")
}

func dotted(v uint32) string {
	return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&0xff, v>>8&0xff, v&0xff)
}

func (s *service) sortedDests(noSort bool) []*dest {
	ds := append([]*dest(nil), s.dests...)
	if !noSort {
		msort(ds, cmpDests)
	}
	return ds
}

func (m *Model) listServices(noSort bool) []*service {
	if !noSort {
		return m.sortedServices()
	}
	out := make([]*service, 0, len(m.services))
	for _, s := range m.services {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// writeListing is ipvsadm -Ln (list_all).
func (m *Model) writeListing(w io.Writer, f listFormat) {
	fmt.Fprintf(w, "IP Virtual Server version %s (size=%d)\n", IPVSVersion, 1<<m.tabBits)
	f.title(w)
	for _, s := range m.listServices(f.noSort) {
		m.writeService(w, s, f)
	}
}

// writeService is print_service_entry() for the list formats.
func (m *Model) writeService(w io.Writer, s *service, f listFormat) {
	name := statsName(s)
	var b strings.Builder
	b.WriteString(name + " " + s.schedName)
	if s.flags&(ipvs.FlagSchedSH1|ipvs.FlagSchedSH2|ipvs.FlagSchedSH3) != 0 {
		b.WriteString(" (" + s.schedFlagsString() + ")")
	}
	if s.persistent() {
		fmt.Fprintf(&b, " persistent %d", s.timeoutSec)
		if !s.key.v6 && s.mask4 != 0xffffffff {
			b.WriteString(" mask " + dotted(s.mask4))
		}
		if s.key.v6 && s.bits6 != 128 {
			fmt.Fprintf(&b, " mask %d", s.bits6)
		}
	}
	if s.flags&ipvs.FlagOnePacket != 0 {
		b.WriteString(" ops")
	}
	fmt.Fprintln(w, b.String())
	for _, d := range s.sortedDests(f.noSort) {
		dn := fmtAddrPort(d.addr, d.port)
		if !d.addr.Is6() && len(dn) > 28 {
			dn = dn[:28]
		}
		switch {
		case f.thresholds:
			fmt.Fprintf(w, "  -> %-28s %-10d %-10d %-10d %-10d\n", dn, d.uThresh, d.lThresh, uint32(d.active), uint32(d.inactive))
		case f.persistentConn:
			fmt.Fprintf(w, "  -> %-28s %-9d %-11d %-10d %-10d\n", dn, uint32(d.weight), uint32(d.persist), uint32(d.active), uint32(d.inactive))
		case f.tunInfo:
			ti := "n/a"
			if d.fwd == ipvs.Tunnel {
				if d.tun.typ == 1 {
					ti = fmt.Sprintf("gue:%d:%s", d.tun.port, [...]string{"-c", "+c", "r+c"}[d.tun.flags])
				} else {
					ti = "ipip"
				}
			}
			fmt.Fprintf(w, "  -> %-28s %-7s %-13s %-6d %-10d %-10d\n", dn, fwdName(d.fwd), ti, d.weight, uint32(d.active), uint32(d.inactive))
		default:
			fmt.Fprintf(w, "  -> %-28s %-7s %-6d %-10d %-10d\n", dn, fwdName(d.fwd), d.weight, uint32(d.active), uint32(d.inactive))
		}
	}
}

// statsName is the service's name in a listing (print_service_entry's svc_name).
func statsName(s *service) string {
	if s.key.fwmark != 0 {
		name := fmt.Sprintf("FWM  %d", s.key.fwmark)
		if s.key.v6 {
			name += " IPv6"
		}
		return name
	}
	name := fmt.Sprintf("%-4s %s", protoName(s.proto), fmtAddrPort(s.key.addr, s.key.port))
	if !s.key.v6 && len(name) > 33 {
		name = name[:33]
	}
	return name
}

// writeRules is ipvsadm -Sn. Like ipvsadm it leaves out the -x/-y thresholds (see
// ipvsadm -L --thresholds).
func (m *Model) writeRules(w io.Writer) {
	for _, s := range m.sortedServices() {
		var name string
		if s.key.fwmark != 0 {
			name = fmt.Sprintf("-f %d", s.key.fwmark)
			if s.key.v6 {
				name += " -6"
			}
		} else {
			opt := map[uint8]string{netfilter.ProtoTCP: "-t", netfilter.ProtoUDP: "-u", netfilter.ProtoSCTP: "--sctp-service"}[s.proto]
			name = opt + " " + fmtAddrPort(s.key.addr, s.key.port)
		}
		var b strings.Builder
		b.WriteString("-A " + name + " -s " + s.schedName)
		if s.persistent() {
			fmt.Fprintf(&b, " -p %d", s.timeoutSec)
			if !s.key.v6 && s.mask4 != 0xffffffff {
				b.WriteString(" -M " + dotted(s.mask4))
			}
			if s.key.v6 && s.bits6 != 128 {
				fmt.Fprintf(&b, " -M %d", s.bits6)
			}
		}
		if s.flags&ipvs.FlagOnePacket != 0 {
			b.WriteString(" -o")
		}
		if s.flags&(ipvs.FlagSchedSH1|ipvs.FlagSchedSH2|ipvs.FlagSchedSH3) != 0 {
			b.WriteString(" -b " + s.schedFlagsString())
		}
		fmt.Fprintln(w, b.String())
		for _, d := range s.sortedDests(false) {
			line := fmt.Sprintf("-a %s -r %s %s -w %d", name, fmtAddrPort(d.addr, d.port), fwdSwitch(d.fwd), d.weight)
			if d.fwd == ipvs.Tunnel {
				if d.tun.typ == 1 {
					line += fmt.Sprintf(" --tun-type gue --tun-port %d %s", d.tun.port,
						[...]string{"--tun-nocsum", "--tun-csum", "--tun-remcsum"}[d.tun.flags])
				} else {
					line += " --tun-type ipip"
				}
			}
			fmt.Fprintln(w, line)
		}
	}
}

// writeConns is ipvsadm -Lnc (list_conn over /proc/net/ip_vs_conn). Entries come in
// creation order (the kernel's order is that of its randomly seeded hash table).
func (m *Model) writeConns(w io.Writer, pc bool) {
	fmt.Fprintln(w, "IPVS connection entries")
	if pc {
		fmt.Fprintf(w, "pro expire %-11s %-18s %-18s %-18s %-16s %s\n", "state", "source", "virtual", "destination", "pe name", "pe_data")
	} else {
		fmt.Fprintf(w, "pro expire %-11s %-18s %-18s %s\n", "state", "source", "virtual", "destination")
	}
	for _, c := range m.allConns() {
		var left time.Duration
		if c.timerPending {
			left = c.expires.Sub(m.now)
		}
		s := int(left / time.Second)
		fmt.Fprintf(w, "%-3s %-6s %-11s %-18s %-18s %s\n", protoName(c.proto), fmt.Sprintf("%02d:%02d", s/60, s%60),
			c.stateName(), fmtAddrPort(c.caddr, c.cport), fmtAddrPort(c.vaddr, c.vport), fmtAddrPort(c.daddr, c.dport))
	}
}

// Listing returns ipvsadm -Ln output (noSort: ipvsadm -Ln --nosort, destinations in kernel
// list order).
func (m *Model) Listing(noSort bool) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	var b bytes.Buffer
	m.writeListing(&b, listFormat{noSort: noSort})
	return b.String()
}

// Rules returns ipvsadm -Sn output.
func (m *Model) Rules() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	var b bytes.Buffer
	m.writeRules(&b)
	return b.String()
}

// ConnListing returns ipvsadm -Lnc output.
func (m *Model) ConnListing() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	var b bytes.Buffer
	m.writeConns(&b, false)
	return b.String()
}

// DumpFormat is the kind of text LoadDump read.
type DumpFormat int

const (
	DumpEmpty   DumpFormat = iota // nothing but blank lines and comments
	DumpRules                     // ipvsadm -Sn / ipvsadm-save: -A and -a commands
	DumpListing                   // ipvsadm -Ln
)

func (f DumpFormat) String() string {
	return [...]string{"empty", "ipvsadm -Sn", "ipvsadm -Ln"}[f]
}

// LineError is a dump or script error with its position.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// DetectDumpFormat tells an ipvsadm -Sn dump from an ipvsadm -Ln listing by its first
// significant line.
func DetectDumpFormat(data []byte) DumpFormat {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		l = strings.TrimPrefix(l, "ipvsadm ")
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "->") {
			return DumpRules
		}
		return DumpListing
	}
	return DumpEmpty
}

// LoadDump builds a model from an ipvsadm -Sn dump (replayed command by command, as
// ipvsadm -R does, so each -a lands at the head of its list) or from an ipvsadm -Ln
// listing (destinations loaded so that the model's list order is the printed order,
// which is exact for -Ln --nosort; ActiveConn and InActConn become the destinations'
// counters). name labels errors ("file:line: ..."). On error nothing is returned.
func LoadDump(cfg Config, data []byte, name string) (*Model, DumpFormat, error) {
	m, err := New(cfg)
	if err != nil {
		return nil, DumpEmpty, err
	}
	f := DetectDumpFormat(data)
	switch f {
	case DumpRules:
		err = m.loadRules(data, name)
	case DumpListing:
		err = m.loadListing(data, name)
	}
	if err != nil {
		return nil, f, err
	}
	return m, f, nil
}

func lines(data []byte) []string {
	s := strings.ReplaceAll(string(data), "\r\n", "\n")
	return strings.Split(s, "\n")
}

func (m *Model) loadRules(data []byte, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, l := range lines(data) {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		args, err := SplitArgs(t)
		if err != nil {
			return &LineError{name, i + 1, err}
		}
		c, err := ParseCommand(args)
		if err != nil {
			return &LineError{name, i + 1, err}
		}
		switch c.Op {
		case OpList, OpSave, OpZero:
			return &LineError{name, i + 1, fmt.Errorf("%s: not a rule of an ipvsadm -Sn dump", c.Op)}
		}
		if err := m.apply(c, nil); err != nil {
			return &LineError{name, i + 1, fmt.Errorf("%s: %w", strings.Join(args, " "), err)}
		}
	}
	return nil
}

type listedDest struct {
	spec     destSpec
	active   int
	inactive int
	line     int
}

func (m *Model) loadListing(data []byte, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var cur *service
	var pending []listedDest
	flush := func() error {
		if cur == nil {
			return nil
		}
		for i := len(pending) - 1; i >= 0; i-- {
			p := pending[i]
			if err := m.addDest(cur, p.spec); err != nil {
				return &LineError{name, p.line, err}
			}
			d := cur.lookupDest(p.spec.addr, p.spec.port)
			d.active, d.inactive = p.active, p.inactive
		}
		pending = nil
		return nil
	}
	for i, l := range lines(data) {
		ln := i + 1
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		f := strings.Fields(t)
		switch {
		case strings.HasPrefix(t, "IP Virtual Server version"):
			continue
		case strings.HasPrefix(t, "Prot LocalAddress:Port"):
			if len(f) < 3 || f[2] != "Scheduler" {
				return &LineError{name, ln, fmt.Errorf("only the default ipvsadm -Ln layout can be loaded (not --stats, --rate, --thresholds or --persistent-conn): %w", ErrUnsupported)}
			}
			continue
		case strings.HasPrefix(t, "-> RemoteAddress:Port"):
			if len(f) >= 4 && f[3] == "TunnelInfo" {
				return &LineError{name, ln, fmt.Errorf("--tun-info listings cannot be loaded: %w", ErrUnsupported)}
			}
			continue
		case f[0] == "->":
			if cur == nil {
				return &LineError{name, ln, fmt.Errorf("real server line before any virtual service")}
			}
			ld, err := parseListedDest(f, cur)
			if err != nil {
				return &LineError{name, ln, err}
			}
			ld.line = ln
			pending = append(pending, ld)
		default:
			if err := flush(); err != nil {
				return err
			}
			sp, err := parseListedService(f)
			if err != nil {
				return &LineError{name, ln, err}
			}
			if err := m.addService(sp); err != nil {
				return &LineError{name, ln, err}
			}
			cur = m.services[sp.key]
		}
	}
	return flush()
}

func parseListedService(f []string) (svcSpec, error) {
	var sp svcSpec
	sp.mask4 = 0xffffffff
	sp.bits6 = 128
	i := 0
	switch f[0] {
	case "FWM":
		if len(f) < 3 {
			return sp, fmt.Errorf("FWM line: want FWM MARK [IPv6] SCHEDULER")
		}
		mark, ok := parseFwmark(f[1])
		if !ok {
			return sp, fmt.Errorf("FWM %s: invalid fwmark", f[1])
		}
		sp.key = svcKey{fwmark: mark}
		sp.proto = netfilter.ProtoTCP
		i = 2
		if f[2] == "IPv6" {
			sp.key.v6 = true
			i = 3
		}
	case "TCP", "UDP", "SCTP":
		if len(f) < 3 {
			return sp, fmt.Errorf("%s line: want %s ADDRESS:PORT SCHEDULER", f[0], f[0])
		}
		p, _ := parseProtocol(f[0])
		addr, port, hasPort, ok := parseService(f[1], p)
		if !ok || !hasPort {
			return sp, fmt.Errorf("%s %s: not an address:port (load a numeric listing, ipvsadm -Ln)", f[0], f[1])
		}
		sp.key = svcKey{v6: addr.Is6(), proto: p, addr: addr, port: port}
		sp.proto = p
		i = 2
	default:
		return sp, fmt.Errorf("%q: not a virtual service line (TCP, UDP, SCTP or FWM) of ipvsadm -Ln", f[0])
	}
	if i >= len(f) {
		return sp, fmt.Errorf("missing scheduler")
	}
	sp.schedName = f[i]
	i++
	for i < len(f) {
		tok := f[i]
		switch {
		case strings.HasPrefix(tok, "(") && strings.HasSuffix(tok, ")"):
			fl, err := parseSchedFlags(sp.schedName, tok[1:len(tok)-1])
			if err != nil {
				return sp, err
			}
			sp.flags |= fl
			i++
		case tok == "persistent":
			if i+1 >= len(f) {
				return sp, fmt.Errorf("persistent: missing timeout")
			}
			v, ok := stringToNumber(f[i+1], 1, maxTimeout)
			if !ok {
				return sp, fmt.Errorf("persistent %s: invalid timeout (want 1..%d)", f[i+1], maxTimeout)
			}
			sp.flags |= ipvs.FlagPersistent
			sp.timeoutSec = uint32(v)
			i += 2
		case tok == "mask":
			if i+1 >= len(f) {
				return sp, fmt.Errorf("mask: missing value")
			}
			if sp.key.v6 {
				n, err := strconv.Atoi(f[i+1])
				if err != nil || n < 1 || n > 128 {
					return sp, fmt.Errorf("mask %s: invalid IPv6 prefix length", f[i+1])
				}
				sp.bits6 = n
			} else {
				v, ok := inetAton(f[i+1])
				if !ok {
					return sp, fmt.Errorf("mask %s: invalid netmask", f[i+1])
				}
				sp.mask4 = v
			}
			i += 2
		case tok == "ops":
			sp.flags |= ipvs.FlagOnePacket
			i++
		case tok == "pe":
			return sp, fmt.Errorf("pe %s: persistence engines are not modelled: %w", strings.Join(f[i+1:], " "), ErrUnsupported)
		default:
			return sp, fmt.Errorf("%q: unexpected word in a virtual service line", tok)
		}
	}
	// the checks ipvsadm -A makes, so that the model can be written back as -Sn
	if sp.key.fwmark == 0 && sp.key.port == 0 && sp.flags&ipvs.FlagPersistent == 0 {
		return sp, errors.New("Zero port specified for non-persistent service")
	}
	if sp.flags&ipvs.FlagOnePacket != 0 && sp.key.fwmark == 0 && sp.proto != netfilter.ProtoUDP {
		return sp, errors.New("One-Packet Scheduling is only for UDP virtual services")
	}
	return sp, nil
}

func parseListedDest(f []string, s *service) (listedDest, error) {
	var ld listedDest
	if len(f) != 6 {
		return ld, fmt.Errorf("real server line: want -> ADDRESS:PORT FORWARD WEIGHT ACTIVECONN INACTCONN")
	}
	addr, port, hasPort, ok := parseService(f[1], s.proto)
	if !ok || !hasPort {
		return ld, fmt.Errorf("%s: not an address:port", f[1])
	}
	var fwd ipvs.ForwardMethod
	switch f[2] {
	case "Masq":
		fwd = ipvs.Masquerade
	case "Route":
		fwd = ipvs.DirectRoute
	case "Tunnel":
		fwd = ipvs.Tunnel
	case "Local":
		fwd = ipvs.Local
	default:
		return ld, fmt.Errorf("forward %q: want Masq, Route, Tunnel or Local", f[2])
	}
	w, ok := stringToNumber(f[3], 0, 65535)
	if !ok {
		return ld, fmt.Errorf("weight %q: want 0..65535", f[3])
	}
	a, err := strconv.ParseUint(f[4], 10, 31)
	if err != nil {
		return ld, fmt.Errorf("ActiveConn %q: not a count", f[4])
	}
	in, err := strconv.ParseUint(f[5], 10, 31)
	if err != nil {
		return ld, fmt.Errorf("InActConn %q: not a count", f[5])
	}
	ld.spec = destSpec{addr: addr, port: port, weight: w, fwd: fwd}
	ld.active, ld.inactive = int(a), int(in)
	return ld, nil
}
