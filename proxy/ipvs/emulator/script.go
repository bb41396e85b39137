package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// This file runs clusterlab ipvs scripts: ipvsadm commands, connections (conn), scheduler
// questions (sched), single packets (packet), captured counters (set), sysctls, and
// virtual time (sleep/advance). The grammar, one line each (`clusterlab ipvs --help`
// explains every line):
//
//	conn tcp|udp|sctp CLIENT:PORT VIP:PORT [close|server-close] [mark=N] [ct=confirmed]
//	sched tcp|udp|sctp CLIENT:PORT VIP:PORT [mark=N]
//	pick tcp|udp|sctp CLIENT:PORT VIP:PORT [mark=N]
//	packet tcp|udp|sctp SRC:PORT DST:PORT [flags=SYN,ACK,FIN,RST] [chunk=NAME] [reply] [mark=N] [ct=confirmed]
//	set -t|-u|-f SERVICE -r RIP:PORT [active=N] [inactive=N] [overloaded=yes|no]
//	sleep|advance SECONDS
//	sysctl NAME=VALUE
//	kernel VERSION
//	seed N
//	an ipvsadm command, with or without the leading "ipvsadm"
//
// ct=confirmed gives the (first) packet a confirmed netfilter conntrack entry
// (Packet.ConfirmedConntrack), as a node with conntrack=1 has for a tuple it saw before:
// since Linux 5.9 a SYN that would reschedule a reused entry (conn_reuse_mode,
// expire_nodest_conn on a weight-0 server) and any packet of a removed server's entry
// (expire_nodest_conn) are then dropped while the old entry is expired, and the client's
// retransmission is scheduled afresh.

// ScriptInput is what RunScript runs.
type ScriptInput struct {
	Restore     []byte // an ipvsadm -Sn or -Ln dump to start from (nil: empty)
	RestoreName string
	Script      []byte // the script (nil: none)
	ScriptName  string
	Config      Config // Clock nil: a ManualClock driven by sleep/advance lines
}

// ScriptResult is the outcome of one conn, sched, pick or packet line.
type ScriptResult struct {
	File          string `json:"file"`
	Line          int    `json:"line"`
	Command       string `json:"command"` // conn, sched, pick or packet
	Protocol      string `json:"protocol"`
	Client        string `json:"client"`
	Virtual       string `json:"virtual"`
	Mark          uint32 `json:"mark,omitempty"`
	Close         bool   `json:"close,omitempty"`
	Conntrack     string `json:"conntrack,omitempty"` // "confirmed" for ct=confirmed
	Reply         bool   `json:"reply,omitempty"`     // packet ... reply: from the real server
	Flags         string `json:"flags,omitempty"`     // packet: TCP flags or SCTP chunk
	Destination   string `json:"destination,omitempty"`
	NoDestination bool   `json:"no_destination"`
	Verdict       string `json:"verdict"`
	Via           string `json:"via"`
	Service       string `json:"service,omitempty"`
	Scheduler     string `json:"scheduler,omitempty"`
	NewConnection bool   `json:"new_connection"`
	State         string `json:"state,omitempty"`
	Expires       string `json:"expires,omitempty"`
	Reason        string `json:"reason"`
	// ConntrackDrop: dropped because of the packet's confirmed conntrack entry; the old
	// entry is expired and a retransmitted SYN/INIT is scheduled afresh.
	ConntrackDrop bool   `json:"conntrack_drop,omitempty"`
	Time          string `json:"time"` // virtual time since the start
}

// ScriptListing is the output of an ipvsadm -L or -S line of the script.
type ScriptListing struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Command string `json:"command"`
	Output  string `json:"output"`
}

// StateDest is a destination in a state snapshot.
type StateDest struct {
	Address    string `json:"address"`
	Forward    string `json:"forward"`
	Weight     int    `json:"weight"`
	Active     int    `json:"active_conns"`
	Inactive   int    `json:"inactive_conns"`
	Persistent int    `json:"persistent_conns"`
	Overloaded bool   `json:"overloaded"`
	UThreshold uint32 `json:"upper_threshold,omitempty"`
	LThreshold uint32 `json:"lower_threshold,omitempty"`
}

// StateService is a virtual service in a state snapshot; Destinations are in kernel list
// order.
type StateService struct {
	Service      string      `json:"service"`
	Scheduler    string      `json:"scheduler"`
	Flags        string      `json:"flags,omitempty"`
	Persistent   uint32      `json:"persistent_timeout,omitempty"`
	Netmask      string      `json:"netmask,omitempty"`
	Destinations []StateDest `json:"destinations"`
}

// StateConn is a connection entry in a state snapshot.
type StateConn struct {
	Protocol    string `json:"protocol"`
	Client      string `json:"client"`
	Virtual     string `json:"virtual"`
	Destination string `json:"destination"`
	State       string `json:"state"`
	Expires     string `json:"expires"`
	Template    bool   `json:"template,omitempty"`
}

// State is a snapshot of the model.
type State struct {
	Services    []StateService `json:"services"`
	Connections []StateConn    `json:"connections"`
}

// ScriptReport is everything a run produced.
type ScriptReport struct {
	RestoreFormat string          `json:"restore_format,omitempty"`
	Results       []ScriptResult  `json:"results"`
	Listings      []ScriptListing `json:"listings"`
	Final         State           `json:"final"`
	Elapsed       string          `json:"elapsed"`
	text          bytes.Buffer
	model         *Model
}

// Model returns the model the run ended with.
func (r *ScriptReport) Model() *Model { return r.model }

// WriteText writes the human-readable report: one line per conn/sched result and the
// listings of -L/-S lines, in script order; with no script, the restored state as
// ipvsadm -Ln shows it.
func (r *ScriptReport) WriteText(w io.Writer) error {
	_, err := w.Write(r.text.Bytes())
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *ScriptReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// scriptLine is a parsed script line.
type scriptLine struct {
	no    int
	text  string
	kind  string // ipvsadm, conn, sched, set, sleep, sysctl
	cmd   *Command
	proto uint8
	src   netip.AddrPort
	dst   netip.AddrPort
	mark  uint32
	close bool
	// serverClose: conn ... server-close, the real server closes first
	serverClose bool
	svc         svcSpec
	rs          netip.AddrPort
	st          DestState
	dur         time.Duration
	sysK        string
	sysV        string
	seed        uint64
	kern        netfilter.KernelVersion // kernel line
	reply       bool
	ct          bool // ct=confirmed
	flags       uint8
	chunk       uint8
}

// RunScript loads in.Restore, then runs in.Script line by line. Any error (a line that
// does not parse, an ipvsadm command the kernel would refuse) stops the run and is
// returned as a *LineError naming the file and line; the partial report is discarded.
func RunScript(in ScriptInput) (*ScriptReport, error) {
	parsed, err := parseScript(in.Script, in.ScriptName)
	if err != nil {
		return nil, err
	}
	cfg := in.Config
	var clock *ManualClock
	if cfg.Clock == nil {
		clock = NewManualClock()
		cfg.Clock = clock
	}
	rep := &ScriptReport{}
	var m *Model
	if len(in.Restore) > 0 {
		var f DumpFormat
		m, f, err = LoadDump(cfg, in.Restore, in.RestoreName)
		if err != nil {
			return nil, err
		}
		rep.RestoreFormat = f.String()
	} else if m, err = New(cfg); err != nil {
		return nil, err
	}
	rep, err = m.run(rep, parsed, in.ScriptName, clock)
	if err != nil {
		return nil, err
	}
	if len(parsed) == 0 {
		rep.text.WriteString(m.Listing(false))
	}
	return rep, nil
}

// Run runs a script on the model; sleep lines advance clock (nil: sleep is an error).
// The first failing line stops the run with a *LineError.
func (m *Model) Run(script []byte, name string, clock *ManualClock) (*ScriptReport, error) {
	parsed, err := parseScript(script, name)
	if err != nil {
		return nil, err
	}
	return m.run(&ScriptReport{}, parsed, name, clock)
}

func (m *Model) run(rep *ScriptReport, parsed []scriptLine, name string, clock *ManualClock) (*ScriptReport, error) {
	rep.model = m
	start := m.Now()
	for _, l := range parsed {
		if err := rep.run(m, clock, l, name, start); err != nil {
			return nil, &LineError{name, l.no, err}
		}
	}
	rep.Final = m.Snapshot()
	rep.Elapsed = m.Now().Sub(start).String()
	if rep.Results == nil {
		rep.Results = []ScriptResult{}
	}
	if rep.Listings == nil {
		rep.Listings = []ScriptListing{}
	}
	return rep, nil
}

// parseScript parses a script without running it.
func parseScript(data []byte, name string) ([]scriptLine, error) {
	var out []scriptLine
	for i, raw := range lines(data) {
		t := strings.TrimSpace(raw)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		words, err := SplitArgs(t)
		if err != nil {
			return nil, &LineError{name, i + 1, err}
		}
		for j, w := range words { // a word starting with # begins a comment
			if strings.HasPrefix(w, "#") {
				words = words[:j]
				break
			}
		}
		if len(words) == 0 {
			continue
		}
		l, err := parseScriptLine(words)
		if err != nil {
			return nil, &LineError{name, i + 1, err}
		}
		l.no = i + 1
		l.text = strings.Join(words, " ")
		out = append(out, l)
	}
	return out, nil
}

func parseScriptLine(w []string) (scriptLine, error) {
	var l scriptLine
	switch w[0] {
	case "conn", "sched", "pick":
		l.kind = w[0]
		if len(w) < 4 {
			return l, fmt.Errorf("%s: want %s tcp|udp CLIENT_IP:PORT VIP:PORT%s [mark=N]%s", w[0], w[0],
				map[bool]string{true: " [close]", false: ""}[w[0] == "conn"], map[bool]string{true: " [ct=confirmed]", false: ""}[w[0] == "conn"])
		}
		p, err := parseProtocol(w[1])
		if err != nil {
			return l, fmt.Errorf("%s: %w", w[0], err)
		}
		l.proto = p
		if l.src, err = parseAddrPort(w[2]); err != nil {
			return l, fmt.Errorf("%s: client %q: %w", w[0], w[2], err)
		}
		if l.dst, err = parseAddrPort(w[3]); err != nil {
			return l, fmt.Errorf("%s: virtual address %q: %w", w[0], w[3], err)
		}
		if l.src.Addr().Is6() != l.dst.Addr().Is6() {
			return l, fmt.Errorf("%s: client %s and virtual address %s are of different families", w[0], w[2], w[3])
		}
		for _, x := range w[4:] {
			switch {
			case x == "close" && w[0] == "conn":
				l.close = true
			case x == "server-close" && w[0] == "conn":
				if l.proto != netfilter.ProtoTCP {
					return l, errors.New("conn: server-close is for TCP (the real server sends the first FIN)")
				}
				l.serverClose = true
			case strings.HasPrefix(x, "ct="):
				if w[0] != "conn" {
					return l, fmt.Errorf("%s: %s: %s asks the scheduler only and does not look at the connection table; use conn or packet", w[0], x, w[0])
				}
				if err := parseCT(x); err != nil {
					return l, fmt.Errorf("conn: %w", err)
				}
				l.ct = true
			case strings.HasPrefix(x, "mark="):
				v, err := strconv.ParseUint(strings.TrimPrefix(x, "mark="), 0, 32)
				if err != nil {
					return l, fmt.Errorf("%s: %s: want mark=N (0..4294967295)", w[0], x)
				}
				l.mark = uint32(v)
			default:
				return l, fmt.Errorf("%s: unexpected %q", w[0], x)
			}
		}
		if l.close && l.serverClose {
			return l, errors.New("conn: close (the client closes first) and server-close (the real server does) exclude each other")
		}
	case "packet":
		l.kind = "packet"
		if len(w) < 4 {
			return l, errors.New("packet: want packet tcp|udp|sctp SRC_IP:PORT DST_IP:PORT [flags=SYN,ACK,FIN,RST] [chunk=NAME] [reply] [mark=N] [ct=confirmed]")
		}
		p, err := parseProtocol(w[1])
		if err != nil {
			return l, fmt.Errorf("packet: %w", err)
		}
		l.proto = p
		if l.src, err = parseAddrPort(w[2]); err != nil {
			return l, fmt.Errorf("packet: source %q: %w", w[2], err)
		}
		if l.dst, err = parseAddrPort(w[3]); err != nil {
			return l, fmt.Errorf("packet: destination %q: %w", w[3], err)
		}
		for _, x := range w[4:] {
			switch {
			case x == "reply":
				l.reply = true
			case strings.HasPrefix(x, "ct="):
				if err := parseCT(x); err != nil {
					return l, fmt.Errorf("packet: %w", err)
				}
				l.ct = true
			case strings.HasPrefix(x, "flags=") && p == netfilter.ProtoTCP:
				f, err := parseTCPFlags(strings.TrimPrefix(x, "flags="))
				if err != nil {
					return l, fmt.Errorf("packet: %s: %w", x, err)
				}
				l.flags = f
			case strings.HasPrefix(x, "chunk=") && p == netfilter.ProtoSCTP:
				c, err := parseChunk(strings.TrimPrefix(x, "chunk="))
				if err != nil {
					return l, fmt.Errorf("packet: %s: %w", x, err)
				}
				l.chunk = c
			case strings.HasPrefix(x, "mark="):
				v, err := strconv.ParseUint(strings.TrimPrefix(x, "mark="), 0, 32)
				if err != nil {
					return l, fmt.Errorf("packet: %s: want mark=N (0..4294967295)", x)
				}
				l.mark = uint32(v)
			default:
				return l, fmt.Errorf("packet: unexpected %q", x)
			}
		}
		if l.reply && l.ct {
			return l, errors.New("packet: ct=confirmed applies to packets from the client (the IPVS input hook), not to a reply")
		}
	case "set":
		l.kind = "set"
		if err := parseSetLine(&l, w[1:]); err != nil {
			return l, fmt.Errorf("set: %w", err)
		}
	case "sleep", "advance":
		l.kind = "sleep"
		if len(w) != 2 {
			return l, fmt.Errorf("%s: want %s SECONDS (or a duration like 2m30s)", w[0], w[0])
		}
		d, err := parseSeconds(w[1])
		if err != nil {
			return l, fmt.Errorf("%s %s: %w", w[0], w[1], err)
		}
		l.dur = d
	case "seed":
		l.kind = "seed"
		if len(w) != 2 {
			return l, errors.New("seed: want seed N")
		}
		n, err := strconv.ParseUint(w[1], 10, 64)
		if err != nil {
			return l, fmt.Errorf("seed %s: want a number", w[1])
		}
		l.seed = n
	case "kernel":
		l.kind = "kernel"
		if len(w) != 2 {
			return l, errors.New("kernel: want kernel VERSION (a Linux release such as 5.4 or 6.6)")
		}
		k, err := netfilter.ParseKernelVersion(w[1])
		if err != nil {
			return l, fmt.Errorf("kernel: %w", err)
		}
		l.kern = k
	case "sysctl":
		l.kind = "sysctl"
		if len(w) != 2 || !strings.Contains(w[1], "=") {
			return l, errors.New("sysctl: want sysctl NAME=VALUE (conn_reuse_mode, expire_nodest_conn, ...)")
		}
		k, v, _ := strings.Cut(w[1], "=")
		k = strings.TrimPrefix(k, "net.ipv4.vs.")
		if err := applySysctl(&Sysctls{}, k, v); err != nil {
			return l, err
		}
		l.sysK, l.sysV = k, v
	default:
		if w[0] == "ipvsadm" || strings.HasPrefix(w[0], "-") {
			c, err := ParseCommand(w)
			if err != nil {
				return l, fmt.Errorf("ipvsadm: %w", err)
			}
			l.kind, l.cmd = "ipvsadm", c
			return l, nil
		}
		return l, fmt.Errorf("%q: not an ipvsadm command, conn, sched, pick, packet, set, sleep/advance, sysctl, kernel or seed line", w[0])
	}
	return l, nil
}

// parseCT parses a ct= token; ct=confirmed is the only value.
func parseCT(x string) error {
	if x != "ct=confirmed" {
		return fmt.Errorf("%s: want ct=confirmed (the packet has a confirmed conntrack entry)", x)
	}
	return nil
}

func parseAddrPort(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, errors.New("want IP:PORT or [IPv6]:PORT")
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

func parseSeconds(s string) (time.Duration, error) {
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, errors.New("want seconds (90, 0.5) or a duration (2m30s)")
	}
	if d < 0 {
		return 0, errors.New("time only moves forward")
	}
	return d, nil
}

func parseSetLine(l *scriptLine, w []string) error {
	var haveSvc, haveRS bool
	for i := 0; i < len(w); i++ {
		x := w[i]
		next := func() (string, error) {
			if i+1 >= len(w) {
				return "", fmt.Errorf("%s: missing argument", x)
			}
			i++
			return w[i], nil
		}
		switch {
		case x == "-t" || x == "-u" || x == "--sctp-service" || x == "--tcp-service" || x == "--udp-service":
			v, err := next()
			if err != nil {
				return err
			}
			p := map[string]uint8{"-t": netfilter.ProtoTCP, "--tcp-service": netfilter.ProtoTCP, "-u": netfilter.ProtoUDP, "--udp-service": netfilter.ProtoUDP, "--sctp-service": netfilter.ProtoSCTP}[x]
			addr, port, _, ok := parseService(v, p)
			if !ok {
				return fmt.Errorf("%s %s: illegal virtual server address[:port] specified", x, v)
			}
			l.svc.key = svcKey{v6: addr.Is6(), proto: p, addr: addr, port: port}
			haveSvc = true
		case x == "-f" || x == "--fwmark-service":
			v, err := next()
			if err != nil {
				return err
			}
			mark, ok := parseFwmark(v)
			if !ok {
				return fmt.Errorf("%s %s: invalid fwmark value", x, v)
			}
			l.svc.key = svcKey{fwmark: mark}
			haveSvc = true
		case x == "-6" || x == "--ipv6":
			if l.svc.key.fwmark == 0 {
				return errors.New("-6 used before -f")
			}
			l.svc.key.v6 = true
		case x == "-r" || x == "--real-server":
			v, err := next()
			if err != nil {
				return err
			}
			addr, port, hasPort, ok := parseService(v, l.svc.key.proto)
			if !ok {
				return fmt.Errorf("%s %s: illegal real server address[:port] specified", x, v)
			}
			if !hasPort {
				port = l.svc.key.port
			}
			l.rs = netip.AddrPortFrom(addr, port)
			haveRS = true
		case strings.HasPrefix(x, "active="), strings.HasPrefix(x, "inactive="):
			k, v, _ := strings.Cut(x, "=")
			n, err := strconv.ParseUint(v, 10, 31)
			if err != nil {
				return fmt.Errorf("%s: want a count", x)
			}
			c := int(n)
			if k == "active" {
				l.st.Active = &c
			} else {
				l.st.Inactive = &c
			}
		case strings.HasPrefix(x, "overloaded="):
			v := strings.TrimPrefix(x, "overloaded=")
			var b bool
			switch v {
			case "yes", "true", "1":
				b = true
			case "no", "false", "0":
			default:
				return fmt.Errorf("%s: want overloaded=yes or overloaded=no", x)
			}
			l.st.Overloaded = &b
		default:
			return fmt.Errorf("unexpected %q (want -t|-u|-f SERVICE -r RIP:PORT [active=N] [inactive=N] [overloaded=yes|no])", x)
		}
	}
	if !haveSvc {
		return errors.New("missing the service (-t, -u, --sctp-service or -f)")
	}
	if !haveRS {
		return errors.New("missing the real server (-r RIP:PORT)")
	}
	if l.st.Active == nil && l.st.Inactive == nil && l.st.Overloaded == nil {
		return errors.New("nothing to set (active=N, inactive=N, overloaded=yes|no)")
	}
	return nil
}

func applySysctl(s *Sysctls, k, v string) error {
	num := func() (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("sysctl %s=%s: want a number", k, v)
		}
		return n, nil
	}
	switch k {
	case "conn_reuse_mode":
		n, err := num()
		if err != nil {
			return err
		}
		s.ConnReuseMode = n
	case "expire_nodest_conn", "expire_quiescent_template", "sloppy_tcp", "sloppy_sctp", "cache_bypass", "conntrack":
		n, err := num()
		if err != nil {
			return err
		}
		b := n != 0
		switch k {
		case "expire_nodest_conn":
			s.ExpireNodestConn = b
		case "expire_quiescent_template":
			s.ExpireQuiescentTemplate = b
		case "sloppy_tcp":
			s.SloppyTCP = b
		case "sloppy_sctp":
			s.SloppySCTP = b
		case "cache_bypass":
			s.CacheBypass = b
		case "conntrack":
			s.Conntrack = b
		}
	case "lblc_expiration", "lblcr_expiration":
		n, err := num()
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("sysctl %s=%s: want a positive number of seconds", k, v)
		}
		if k == "lblc_expiration" {
			s.LBLCExpiration = secs(n)
		} else {
			s.LBLCRExpiration = secs(n)
		}
	default:
		return fmt.Errorf("sysctl %s: unknown (conn_reuse_mode, expire_nodest_conn, expire_quiescent_template, sloppy_tcp, sloppy_sctp, cache_bypass, conntrack, lblc_expiration, lblcr_expiration)", k)
	}
	return nil
}

func (rep *ScriptReport) run(m *Model, clock *ManualClock, l scriptLine, file string, start time.Time) error {
	switch l.kind {
	case "ipvsadm":
		var out bytes.Buffer
		if err := m.Apply(l.cmd, &out); err != nil {
			return err
		}
		if l.cmd.Op == OpList || l.cmd.Op == OpSave {
			rep.Listings = append(rep.Listings, ScriptListing{File: file, Line: l.no, Command: l.text, Output: out.String()})
			fmt.Fprintf(&rep.text, "%s\n%s", l.text, out.String())
		}
	case "sleep":
		if clock == nil {
			return errors.New("sleep: the model runs on an external clock")
		}
		clock.Advance(l.dur)
	case "seed":
		m.Reseed(l.seed)
	case "kernel":
		m.SetKernel(l.kern)
	case "sysctl":
		s := m.Sysctls()
		if err := applySysctl(&s, l.sysK, l.sysV); err != nil {
			return err
		}
		m.SetSysctls(s)
	case "set":
		vs := (&service{key: l.svc.key, proto: l.svc.key.proto}).virtualServer()
		vs.Scheduler = ""
		return m.SetDestState(vs, l.rs, l.st)
	case "conn", "sched", "pick", "packet":
		r := ScriptResult{File: file, Line: l.no, Command: l.kind, Protocol: strings.ToLower(protoName(l.proto)),
			Client: l.src.String(), Virtual: l.dst.String(), Mark: l.mark, Close: l.close, Reply: l.reply}
		if l.ct {
			r.Conntrack = "confirmed"
		}
		if l.kind == "packet" {
			r.Flags = packetFlags(l)
		}
		var dec Decision
		var final *ConnEntry
		if l.kind == "packet" {
			pk := Packet{Protocol: l.proto, Src: l.src, Dst: l.dst, Mark: l.mark, TCPFlags: l.flags, SCTPChunk: l.chunk,
				ConfirmedConntrack: l.ct}
			if l.reply {
				dec = m.Out(pk)
			} else {
				dec = m.In(pk)
			}
			final = dec.Conn
		} else if l.kind == "sched" {
			dec = m.Schedule(Packet{Protocol: l.proto, Src: l.src, Dst: l.dst, Mark: l.mark, TCPFlags: netfilter.TCPSyn, SCTPChunk: SCTPInit})
		} else if l.kind == "pick" {
			dec = m.Pick(Packet{Protocol: l.proto, Src: l.src, Dst: l.dst, Mark: l.mark})
		} else {
			dec, final = m.connect(l.proto, l.src, l.dst, l.mark, l.close, l.serverClose, l.ct)
		}
		r.Time = m.Now().Sub(start).String()
		r.Verdict = dec.Verdict.String()
		r.Via = dec.Via.String()
		r.Reason = dec.Reason
		r.NewConnection = dec.New
		r.ConntrackDrop = dec.OldConntrack
		if dec.Service != nil {
			r.Service = serviceLabel(dec.Service)
			r.Scheduler = dec.Service.Scheduler
		}
		switch dec.Verdict {
		case VerdictForward:
			r.Destination = dec.Dest.String()
		case VerdictBypass:
			r.Destination = dec.Dest.String()
		default:
			r.NoDestination = true
		}
		if final != nil {
			r.State = final.State
			r.Expires = final.Expires.String()
		} else if l.kind != "sched" && l.kind != "pick" && !r.NoDestination {
			r.State = "expired"
		}
		rep.Results = append(rep.Results, r)
		rep.text.WriteString(r.textLine() + "\n")
	}
	return nil
}

func serviceLabel(vs *ipvs.VirtualServer) string {
	if vs.FWMark != 0 {
		if vs.Address.IsValid() && vs.Address.Is6() {
			return fmt.Sprintf("FWM %d IPv6", vs.FWMark)
		}
		return fmt.Sprintf("FWM %d", vs.FWMark)
	}
	return vs.Protocol + " " + fmtAddrPort(vs.Address, vs.Port)
}

func (r *ScriptResult) textLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s -> %s", r.Command, r.Protocol, r.Client, r.Virtual)
	if r.Mark != 0 {
		fmt.Fprintf(&b, " mark=%d", r.Mark)
	}
	if r.Close {
		b.WriteString(" close")
	}
	if r.Reply {
		b.WriteString(" reply")
	}
	if r.Flags != "" {
		b.WriteString(" " + r.Flags)
	}
	if r.Conntrack != "" {
		b.WriteString(" ct=" + r.Conntrack)
	}
	b.WriteString(": ")
	if r.NoDestination {
		b.WriteString("no destination")
	} else {
		b.WriteString(r.Destination)
		if r.Verdict == "bypass" {
			b.WriteString(" (bypass)")
		}
	}
	var det []string
	if r.Service != "" {
		det = append(det, r.Service+" "+r.Scheduler)
	}
	switch {
	case r.ConntrackDrop:
		det = append(det, "dropped: "+r.Reason)
	case r.NoDestination:
		det = append(det, r.Verdict)
	case r.Command == "sched":
		det = append(det, "via "+r.Via)
	case r.Command == "pick":
		det = append(det, "picked via "+r.Via+", no entry")
	case r.Reply:
		det = append(det, "reply of an existing connection")
	case r.NewConnection:
		det = append(det, "new connection via "+r.Via)
	default:
		det = append(det, "existing connection")
	}
	if r.State != "" {
		det = append(det, r.State)
	}
	b.WriteString(" [" + strings.Join(det, ", ") + "]")
	return b.String()
}

// connect plays a whole connection through In and Out: for TCP the three-way handshake
// (the SYN-ACK only for masqueraded connections: DR and TUN replies bypass the director),
// for UDP one datagram and its reply, for SCTP the four-way INIT handshake. With close it
// also plays the close (TCP FIN from the client, FIN-ACK, ACK; SCTP SHUTDOWN, SHUTDOWN-ACK,
// SHUTDOWN-COMPLETE); UDP has no close: its entry is expired as its idle timeout would.
// On an existing entry only the close (or, without close, a new handshake on the same
// tuple) is played; an entry in TIME_WAIT or CLOSE (SCTP: CLOSED) is not continued: a
// new connection's handshake meets it (rescheduled or kept per conn_reuse_mode and the
// kernel release), and with close that new connection is closed. ct gives the first packet a confirmed conntrack entry
// (Packet.ConfirmedConntrack); when the kernel drops it for that, nothing more is played:
// the client's retransmission is a later conn line. It returns the first packet's
// decision and the entry afterwards.
func (m *Model) connect(proto uint8, src, dst netip.AddrPort, mark uint32, close, serverClose, ct bool) (Decision, *ConnEntry) {
	first1 := ct
	// UDP datagrams carry the request and the reply (ConnPayload bytes each, as the VM
	// agent sends them); TCP segments are played without payload.
	plen := 0
	if proto == netfilter.ProtoUDP {
		plen = 28 + ConnPayload
		if src.Addr().Is6() {
			plen = 48 + ConnPayload
		}
	}
	in := func(flags, chunk uint8) Decision {
		c := first1
		first1 = false
		return m.In(Packet{Protocol: proto, Src: src, Dst: dst, Mark: mark, TCPFlags: flags, SCTPChunk: chunk, ConfirmedConntrack: c, Len: plen})
	}
	out := func(d Decision, flags, chunk uint8) {
		if d.Verdict == VerdictForward && d.Forward == ipvs.Masquerade {
			m.Out(Packet{Protocol: proto, Src: d.Dest, Dst: src, TCPFlags: flags, SCTPChunk: chunk, Len: plen})
		}
	}
	// An entry in TIME_WAIT or CLOSE (SCTP: CLOSED) is an old connection: a conn line
	// on its tuple is a new connection whose SYN meets it, as the kernel sees it.
	exists := m.hasConn(proto, src, dst) && !m.entryClosed(proto, src, dst)
	var first Decision
	last := func() *ConnEntry { return m.connEntry(proto, src, dst) }
	if close && exists {
		switch proto {
		case netfilter.ProtoTCP:
			first = in(netfilter.TCPFin|netfilter.TCPAck, 0)
			out(first, netfilter.TCPFin|netfilter.TCPAck, 0)
			if first.Verdict == VerdictForward {
				in(netfilter.TCPAck, 0)
			}
		case netfilter.ProtoUDP:
			first = in(0, 0)
			out(first, 0, 0)
			m.ExpireConnection(proto, src, dst)
		case netfilter.ProtoSCTP:
			first = in(0, SCTPShutdown)
			out(first, 0, SCTPShutdownAck)
			if first.Verdict == VerdictForward {
				in(0, SCTPShutdownComplete)
			}
		}
		return first, last()
	}
	switch proto {
	case netfilter.ProtoTCP:
		first = in(netfilter.TCPSyn, 0)
		out(first, netfilter.TCPSyn|netfilter.TCPAck, 0)
		if first.Verdict == VerdictForward {
			in(netfilter.TCPAck, 0)
		}
	case netfilter.ProtoUDP:
		first = in(0, 0)
		out(first, 0, 0)
	case netfilter.ProtoSCTP:
		first = in(0, SCTPInit)
		out(first, 0, SCTPInitAck)
		if first.Verdict == VerdictForward {
			d := in(0, SCTPCookieEcho)
			out(d, 0, SCTPCookieAck)
		}
	}
	if close && first.Verdict == VerdictForward {
		_, e := m.connect(proto, src, dst, mark, true, false, false)
		return first, e
	}
	if serverClose && first.Verdict == VerdictForward {
		// the real server's FIN; the client acknowledges it and keeps its side open
		out(first, netfilter.TCPFin|netfilter.TCPAck, 0)
		in(netfilter.TCPAck, 0)
	}
	return first, last()
}

// entryClosed reports whether the tuple's entry is in TCP TIME_WAIT or CLOSE or SCTP
// CLOSED: its connection is over, and a SYN (INIT) on the tuple starts a new one.
func (m *Model) entryClosed(proto uint8, src, dst netip.AddrPort) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	c := m.connInGet(proto, src.Addr(), src.Port(), dst.Addr(), dst.Port())
	if c == nil {
		return false
	}
	switch proto {
	case netfilter.ProtoTCP:
		return c.state == tcpTimeWait || c.state == tcpClose
	case netfilter.ProtoSCTP:
		return c.state == sctpClosed
	}
	return false
}

func (m *Model) hasConn(proto uint8, src, dst netip.AddrPort) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	return m.connInGet(proto, src.Addr(), src.Port(), dst.Addr(), dst.Port()) != nil
}

func (m *Model) connEntry(proto uint8, src, dst netip.AddrPort) *ConnEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	if c := m.connInGet(proto, src.Addr(), src.Port(), dst.Addr(), dst.Port()); c != nil {
		return m.entry(c)
	}
	return nil
}

// ExpireConnection makes the entry of (proto, client, virtual) expire now (as its timer
// would), and reports whether there was one.
func (m *Model) ExpireConnection(proto uint8, client, virtual netip.AddrPort) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	c := m.connInGet(proto, client.Addr(), client.Port(), virtual.Addr(), virtual.Port())
	if c == nil {
		return false
	}
	m.expireNow(c)
	m.runEvents(m.now)
	return true
}

// ExpireTemplate makes the persistence template of (proto, client network, virtual)
// expire now (as its timer would: one that still controls connections is re-armed, as
// the kernel's ip_vs_conn_expire does), and reports whether there was one.
func (m *Model) ExpireTemplate(proto uint8, client netip.Addr, virtual netip.AddrPort) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	c := m.ctInGet(proto, client, virtual.Addr(), virtual.Port())
	if c == nil {
		return false
	}
	m.expireNow(c)
	m.runEvents(m.now)
	return true
}

// Snapshot returns the services (destinations in list order, with counters) and the
// connection table.
func (m *Model) Snapshot() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	st := State{Services: []StateService{}, Connections: []StateConn{}}
	for _, s := range m.sortedServices() {
		ss := StateService{Service: serviceLabel(s.virtualServer()), Scheduler: s.schedName,
			Flags: s.schedFlagsString(), Destinations: []StateDest{}}
		if s.flags&ipvs.FlagOnePacket != 0 {
			ss.Flags = strings.TrimPrefix(ss.Flags+",ops", ",")
		}
		if s.persistent() {
			ss.Persistent = s.timeoutSec
			if s.key.v6 {
				ss.Netmask = "/" + strconv.Itoa(s.bits6)
			} else {
				ss.Netmask = dotted(s.mask4)
			}
		}
		for _, d := range s.dests {
			ss.Destinations = append(ss.Destinations, StateDest{Address: fmtAddrPort(d.addr, d.port),
				Forward: fwdName(d.fwd), Weight: d.weight, Active: d.active, Inactive: d.inactive,
				Persistent: d.persist, Overloaded: d.overload, UThreshold: d.uThresh, LThreshold: d.lThresh})
		}
		st.Services = append(st.Services, ss)
	}
	for _, c := range m.allConns() {
		e := m.entry(c)
		st.Connections = append(st.Connections, StateConn{Protocol: e.Protocol, Client: fmtAddrPort(c.caddr, c.cport),
			Virtual: fmtAddrPort(c.vaddr, c.vport), Destination: fmtAddrPort(c.daddr, c.dport), State: e.State,
			Expires: e.Expires.String(), Template: c.template})
	}
	return st
}

func parseTCPFlags(s string) (uint8, error) {
	var f uint8
	if s == "" || s == "none" {
		return 0, nil
	}
	names := map[string]uint8{"syn": netfilter.TCPSyn, "ack": netfilter.TCPAck, "fin": netfilter.TCPFin, "rst": netfilter.TCPRst,
		"s": netfilter.TCPSyn, "a": netfilter.TCPAck, "f": netfilter.TCPFin, "r": netfilter.TCPRst}
	parts := strings.Split(strings.ToLower(s), ",")
	if len(parts) == 1 && len(parts[0]) <= 4 && strings.Trim(parts[0], "safr") == "" {
		parts = strings.Split(parts[0], "")
	}
	for _, p := range parts {
		v, ok := names[p]
		if !ok {
			return 0, fmt.Errorf("unknown TCP flag %q (SYN, ACK, FIN, RST)", p)
		}
		f |= v
	}
	return f, nil
}

var chunkNames = map[string]uint8{"data": SCTPData, "init": SCTPInit, "init-ack": SCTPInitAck,
	"abort": SCTPAbort, "shutdown": SCTPShutdown, "shutdown-ack": SCTPShutdownAck, "error": SCTPError,
	"cookie-echo": SCTPCookieEcho, "cookie-ack": SCTPCookieAck, "shutdown-complete": SCTPShutdownComplete}

func parseChunk(s string) (uint8, error) {
	if v, ok := chunkNames[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("unknown SCTP chunk %q (init, init-ack, cookie-echo, cookie-ack, data, shutdown, shutdown-ack, shutdown-complete, abort, error or a number)", s)
	}
	return uint8(v), nil
}

func packetFlags(l scriptLine) string {
	switch l.proto {
	case netfilter.ProtoTCP:
		var n []string
		for _, f := range []struct {
			bit  uint8
			name string
		}{{netfilter.TCPSyn, "SYN"}, {netfilter.TCPAck, "ACK"}, {netfilter.TCPFin, "FIN"}, {netfilter.TCPRst, "RST"}} {
			if l.flags&f.bit != 0 {
				n = append(n, f.name)
			}
		}
		if len(n) == 0 {
			return "flags=none"
		}
		return "flags=" + strings.Join(n, ",")
	case netfilter.ProtoSCTP:
		for k, v := range chunkNames {
			if v == l.chunk {
				return "chunk=" + k
			}
		}
		return "chunk=" + strconv.Itoa(int(l.chunk))
	}
	return ""
}
