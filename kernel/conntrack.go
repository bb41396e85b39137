package kernel

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/proxy"
)

// ConntrackOptions configure a Conntrack.
type ConntrackOptions struct {
	// Netns is the named network namespace (/run/netns/NAME) the commands run in, as
	// `ip netns exec NAME conntrack ...`; HostNamespace for the caller's own. Required:
	// with an empty Netns every call fails (ErrNoNamespace) and runs nothing.
	Netns string
	// Family is the table a filter without addresses applies to (conntrack -f); a filter
	// with an address takes the address's family. Default IPv4.
	Family Family
	// Timeout bounds each Delete (which takes no context); 0 means 10 s.
	Timeout time.Duration
}

// Conntrack is the kernel implementation of proxy.Conntrack, driving the conntrack tool
// (conntrack-tools): Delete runs `conntrack -D` with the filter as options, and List
// runs `conntrack -L -o extended` and parses the entries.
type Conntrack struct {
	opts ConntrackOptions
	run  runner
}

var _ proxy.Conntrack = (*Conntrack)(nil)

// NewConntrack returns the adapter. It runs nothing; a missing tool, or a missing
// Netns (ErrNoNamespace), shows up as the first call's error.
func NewConntrack(opts ConntrackOptions) *Conntrack {
	return newConntrack(opts, execRunner{})
}

func newConntrack(opts ConntrackOptions, r runner) *Conntrack {
	if opts.Family == 0 {
		opts.Family = IPv4
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &Conntrack{opts: opts, run: r}
}

// protoNames are the protocols the conntrack tool knows by name (and accepts port
// options for).
var protoNames = map[uint8]string{
	1: "icmp", 6: "tcp", 17: "udp", 33: "dccp", 47: "gre", 58: "icmpv6", 132: "sctp", 136: "udplite",
}

// filterArgs turns a filter into conntrack options.
func (c *Conntrack) filterArgs(f proxy.ConntrackFilter) ([]string, error) {
	fam := c.opts.Family
	var famSet Family
	for _, a := range []struct {
		name string
		addr netip.Addr
	}{{"OrigSrc", f.OrigSrc}, {"OrigDst", f.OrigDst}, {"ReplySrc", f.ReplySrc}} {
		if !a.addr.IsValid() {
			continue
		}
		af := IPv4
		if a.addr.Unmap().Is6() {
			af = IPv6
		}
		if famSet != 0 && famSet != af {
			return nil, fmt.Errorf("conntrack filter: %s %v: mixes address families", a.name, a.addr)
		}
		famSet = af
	}
	if famSet != 0 {
		fam = famSet
	}
	var args []string
	if fam == IPv6 {
		args = append(args, "-f", "ipv6")
	}
	if f.Protocol != 0 {
		name, ok := protoNames[f.Protocol]
		if !ok {
			name = strconv.Itoa(int(f.Protocol))
		}
		args = append(args, "-p", name)
	}
	hasPort := f.OrigDstPort != 0 || f.ReplySrcPort != 0
	if hasPort {
		if _, ok := protoNames[f.Protocol]; !ok || f.Protocol == 1 || f.Protocol == 58 || f.Protocol == 47 {
			return nil, fmt.Errorf("conntrack filter: a port needs protocol tcp, udp, sctp, dccp or udplite (Protocol is %d)", f.Protocol)
		}
	}
	addr := func(opt string, a netip.Addr) {
		if a.IsValid() {
			args = append(args, opt, a.Unmap().String())
		}
	}
	addr("--orig-src", f.OrigSrc)
	addr("--orig-dst", f.OrigDst)
	if f.OrigDstPort != 0 {
		args = append(args, "--orig-port-dst", strconv.Itoa(int(f.OrigDstPort)))
	}
	addr("--reply-src", f.ReplySrc)
	if f.ReplySrcPort != 0 {
		args = append(args, "--reply-port-src", strconv.Itoa(int(f.ReplySrcPort)))
	}
	return args, nil
}

func (c *Conntrack) cmd(args []string) command {
	return command{argv: inNetnsArgv(c.opts.Netns, append([]string{"conntrack"}, args...))}
}

var (
	deletedRE = regexp.MustCompile(`(\d+) flow entries have been deleted`)
	shownRE   = regexp.MustCompile(`(\d+) flow entries have been shown`)
)

// Delete removes the entries the filter matches and returns how many went. It
// implements proxy.Conntrack. The conntrack tool exits 1 when nothing matched ("0 flow
// entries have been deleted"); that is success with a count of 0, as in kube-proxy.
func (c *Conntrack) Delete(f proxy.ConntrackFilter) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	return c.DeleteContext(ctx, f)
}

// DeleteContext is Delete with a context.
func (c *Conntrack) DeleteContext(ctx context.Context, f proxy.ConntrackFilter) (int, error) {
	if err := checkNetns("conntrack delete", c.opts.Netns); err != nil {
		return 0, err
	}
	args, err := c.filterArgs(f)
	if err != nil {
		return 0, err
	}
	cmd := c.cmd(append([]string{"-D"}, args...))
	res := c.run.run(ctx, cmd)
	m := deletedRE.FindSubmatch(res.stderr)
	if res.err != nil {
		if m != nil && string(m[1]) == "0" && res.exitCode == 1 {
			return 0, nil
		}
		return 0, fmt.Errorf("conntrack delete: %w", commandError(cmd, res))
	}
	if m == nil {
		return 0, fmt.Errorf("conntrack delete: %s: no count in output %q", cmd, strings.TrimSpace(string(res.stderr)))
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		return 0, fmt.Errorf("conntrack delete: count %q: %w", m[1], err)
	}
	return n, nil
}

// Flush empties the conntrack table (conntrack -F) of the adapter's family.
func (c *Conntrack) Flush(ctx context.Context) error {
	if err := checkNetns("conntrack flush", c.opts.Netns); err != nil {
		return err
	}
	args := []string{"-F"}
	if c.opts.Family == IPv6 {
		args = append(args, "-f", "ipv6")
	}
	cmd := c.cmd(args)
	if ce := commandError(cmd, c.run.run(ctx, cmd)); ce != nil {
		return fmt.Errorf("conntrack flush: %w", ce)
	}
	return nil
}

// List returns the entries the filter matches (conntrack -L -o extended with the same
// options as Delete).
func (c *Conntrack) List(ctx context.Context, f proxy.ConntrackFilter) ([]ConntrackEntry, error) {
	if err := checkNetns("conntrack list", c.opts.Netns); err != nil {
		return nil, err
	}
	args, err := c.filterArgs(f)
	if err != nil {
		return nil, err
	}
	cmd := c.cmd(append([]string{"-L", "-o", "extended"}, args...))
	res := c.run.run(ctx, cmd)
	if res.err != nil {
		// conntrack -L with a filter that matches nothing may exit non-zero, like -D.
		if m := shownRE.FindSubmatch(res.stderr); m != nil && string(m[1]) == "0" && res.exitCode == 1 {
			return nil, nil
		}
		return nil, fmt.Errorf("conntrack list: %w", commandError(cmd, res))
	}
	entries, err := ParseConntrack(res.stdout)
	if err != nil {
		return nil, fmt.Errorf("conntrack list: %s: %w", cmd, err)
	}
	return entries, nil
}

// ConntrackTuple is one direction of a connection.
type ConntrackTuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // tcp, udp, sctp, dccp, udplite
	// ICMP fields (icmp, icmpv6): type, code and echo id.
	ICMPType, ICMPCode uint8
	ICMPID             uint16
}

func (t ConntrackTuple) String() string {
	if t.SrcPort != 0 || t.DstPort != 0 {
		return netip.AddrPortFrom(t.Src, t.SrcPort).String() + "->" + netip.AddrPortFrom(t.Dst, t.DstPort).String()
	}
	return t.Src.String() + "->" + t.Dst.String()
}

// ConntrackStatus are the status flags `conntrack -L` prints in brackets.
type ConntrackStatus uint8

// Status flags.
const (
	StatusUnreplied ConntrackStatus = 1 << iota // [UNREPLIED]: no reply seen yet
	StatusAssured                               // [ASSURED]: seen traffic both ways, not evicted early
	StatusOffload                               // [OFFLOAD]: flowtable offloaded
	StatusHWOffload                             // [HW_OFFLOAD]
)

var statusNames = []struct {
	flag ConntrackStatus
	name string
}{{StatusUnreplied, "UNREPLIED"}, {StatusAssured, "ASSURED"}, {StatusOffload, "OFFLOAD"}, {StatusHWOffload, "HW_OFFLOAD"}}

func (s ConntrackStatus) String() string {
	var parts []string
	for _, n := range statusNames {
		if s&n.flag != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, "|")
}

// ConntrackEntry is one line of `conntrack -L -o extended`.
type ConntrackEntry struct {
	Family    Family
	Protocol  uint8  // IP protocol number
	ProtoName string // as printed: tcp, udp, icmp, unknown, ...
	Timeout   time.Duration
	State     string // TCP/SCTP/DCCP state (ESTABLISHED, SYN_SENT, ...); "" for others
	Orig      ConntrackTuple
	Reply     ConntrackTuple
	Status    ConntrackStatus
	Mark      uint32
	Zone      uint16
	Use       uint32
	// Extra holds key=value fields this parser does not model (secctx, labels, id,
	// delta-time, ...), in order.
	Extra []string
}

// DNATed reports whether the connection was destination-NATed: the reply comes from
// somewhere other than where the original packet was sent.
func (e ConntrackEntry) DNATed() bool {
	return e.Reply.Src != e.Orig.Dst || e.Reply.SrcPort != e.Orig.DstPort
}

// SNATed reports whether the connection was source-NATed (including MASQUERADE).
func (e ConntrackEntry) SNATed() bool {
	return e.Reply.Dst != e.Orig.Src || e.Reply.DstPort != e.Orig.SrcPort
}

func (e ConntrackEntry) String() string {
	s := fmt.Sprintf("%s %s orig %v reply %v", e.ProtoName, e.State, e.Orig, e.Reply)
	if e.Status != 0 {
		s += " [" + e.Status.String() + "]"
	}
	return s
}

// ParseConntrack parses `conntrack -L -o extended` output (also plain `conntrack -L`
// output, which lacks the leading family columns). Blank lines and the tool's
// "flow entries have been shown" summary are skipped. An error names the line.
func ParseConntrack(out []byte) ([]ConntrackEntry, error) {
	var entries []ConntrackEntry
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "conntrack v") {
			continue
		}
		e, err := parseConntrackLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return entries, nil
}

func parseConntrackLine(line string) (ConntrackEntry, error) {
	var e ConntrackEntry
	f := strings.Fields(line)
	i, err := parseConntrackHead(&e, f, line)
	if err != nil {
		return e, err
	}
	p := conntrackTuples{e: &e, dir: -1}
	for _, tok := range f[i:] {
		if err := p.field(tok); err != nil {
			return e, err
		}
	}
	return e, p.finish()
}

// parseConntrackHead reads the fields before the tuples into e: the family (-o
// extended: "ipv4 2 tcp 6 TIMEOUT ..."; plain: "tcp 6 TIMEOUT ..."), the protocol's name
// and number, the timeout and the state, if any. It returns the index of the next field.
func parseConntrackHead(e *ConntrackEntry, f []string, line string) (int, error) {
	i := 0
	if len(f) >= 2 && (f[0] == "ipv4" || f[0] == "ipv6") {
		e.Family = IPv4
		if f[0] == "ipv6" {
			e.Family = IPv6
		}
		if _, err := strconv.ParseUint(f[1], 10, 8); err != nil {
			return i, fmt.Errorf("family number %q: %w", f[1], err)
		}
		i = 2
	}
	if len(f) < i+3 {
		return i, fmt.Errorf("too few fields in %q", line)
	}
	e.ProtoName = f[i]
	p, err := strconv.ParseUint(f[i+1], 10, 8)
	if err != nil {
		return i, fmt.Errorf("protocol number %q: %w", f[i+1], err)
	}
	e.Protocol = uint8(p)
	t, err := strconv.ParseUint(f[i+2], 10, 32)
	if err != nil {
		return i, fmt.Errorf("timeout %q: %w", f[i+2], err)
	}
	e.Timeout = time.Duration(t) * time.Second
	i += 3
	if i < len(f) && !strings.Contains(f[i], "=") && !strings.HasPrefix(f[i], "[") {
		e.State = f[i]
		i++
	}
	return i, nil
}

// conntrackTuples reads the rest of a line into e, field by field: the first src=
// starts the original tuple, the second the reply; [FLAGS] anywhere; mark=, zone= and
// use= for the entry; what it does not model goes to e.Extra.
type conntrackTuples struct {
	e      *ConntrackEntry
	dir    int  // the tuple being read: -1 before the first src=, 0 original, 1 reply
	done   bool // set by mark= or use=, which follow both tuples
	tuples [2]ConntrackTuple
}

func (p *conntrackTuples) field(tok string) error {
	e := p.e
	if strings.HasPrefix(tok, "[") {
		return p.status(tok)
	}
	k, v, ok := strings.Cut(tok, "=")
	if !ok {
		return fmt.Errorf("unexpected token %q", tok)
	}
	switch k {
	case "src":
		return p.src(v)
	case "mark":
		m, err := parseUintField(k, v, 0, 32)
		if err != nil {
			return err
		}
		e.Mark, p.done = uint32(m), true
		return nil
	case "zone":
		z, err := parseUintField(k, v, 10, 16)
		if err != nil {
			return err
		}
		e.Zone = uint16(z)
		return nil
	case "use":
		u, err := parseUintField(k, v, 10, 32)
		if err != nil {
			return err
		}
		e.Use, p.done = uint32(u), true
		return nil
	}
	if p.dir < 0 || p.done || !isTupleKey(k) || (k == "id" && e.Protocol != 1 && e.Protocol != 58) {
		e.Extra = append(e.Extra, tok)
		return nil
	}
	return tupleField(&p.tuples[p.dir], k, v)
}

// status reads a [FLAG]; flags it does not know go to Extra.
func (p *conntrackTuples) status(tok string) error {
	if !strings.HasSuffix(tok, "]") || len(tok) < 3 {
		return fmt.Errorf("bad status token %q", tok)
	}
	name := tok[1 : len(tok)-1]
	known := false
	for _, sn := range statusNames {
		if sn.name == name {
			p.e.Status |= sn.flag
			known = true
		}
	}
	if !known {
		p.e.Extra = append(p.e.Extra, tok)
	}
	return nil
}

// src starts the next tuple; the first address gives a plain line its family.
func (p *conntrackTuples) src(v string) error {
	p.dir++
	if p.dir > 1 {
		return fmt.Errorf("more than two tuples")
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return fmt.Errorf("src: %w", err)
	}
	p.tuples[p.dir].Src = a
	if p.e.Family == 0 {
		p.e.Family = IPv4
		if a.Is6() {
			p.e.Family = IPv6
		}
	}
	return nil
}

// tupleField sets the field k (isTupleKey) of a tuple.
func tupleField(t *ConntrackTuple, k, v string) error {
	switch k {
	case "dst":
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("dst: %w", err)
		}
		t.Dst = a
	case "sport", "dport", "id":
		n, err := parseUintField(k, v, 10, 16)
		if err != nil {
			return err
		}
		switch k {
		case "sport":
			t.SrcPort = uint16(n)
		case "dport":
			t.DstPort = uint16(n)
		default:
			t.ICMPID = uint16(n)
		}
	case "type", "code":
		n, err := parseUintField(k, v, 10, 8)
		if err != nil {
			return err
		}
		if k == "type" {
			t.ICMPType = uint8(n)
		} else {
			t.ICMPCode = uint8(n)
		}
	}
	return nil
}

// parseUintField parses the value of the field k; an error names the field.
func parseUintField(k, v string, base, bitSize int) (uint64, error) {
	n, err := strconv.ParseUint(v, base, bitSize)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", k, err)
	}
	return n, nil
}

// finish checks that the line had both tuples, complete and of the entry's family, and
// stores them.
func (p *conntrackTuples) finish() error {
	e, tuples := p.e, p.tuples
	if p.dir != 1 {
		return fmt.Errorf("want an original and a reply tuple, found %d", p.dir+1)
	}
	if !tuples[0].Dst.IsValid() || !tuples[1].Dst.IsValid() {
		return fmt.Errorf("tuple without dst")
	}
	for _, a := range []netip.Addr{tuples[0].Src, tuples[0].Dst, tuples[1].Src, tuples[1].Dst} {
		if a.Is4() != (e.Family == IPv4) {
			return fmt.Errorf("address %v is not %v", a, e.Family)
		}
	}
	e.Orig, e.Reply = tuples[0], tuples[1]
	return nil
}

// isTupleKey reports whether k belongs to a tuple. "id" is the echo id inside an ICMP
// tuple, but also the connection id that `-o id` prints after mark= and use=; the
// caller tells them apart by position and protocol.
func isTupleKey(k string) bool {
	switch k {
	case "dst", "sport", "dport", "type", "code", "id":
		return true
	}
	return false
}
