package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/netsim"
)

// Family selects the address records a lookup asks for.
type Family int

const (
	// FamilyAny asks A and AAAA for every name tried (getaddrinfo AF_UNSPEC).
	FamilyAny Family = iota
	// FamilyIPv4 asks A only.
	FamilyIPv4
	// FamilyIPv6 asks AAAA only.
	FamilyIPv6
)

// ErrorKind is why a lookup failed, named after glibc's h_errno values.
type ErrorKind int

const (
	// HostNotFound: every name tried was NXDOMAIN (EAI_NONAME).
	HostNotFound ErrorKind = iota + 1
	// NoData: a name tried exists but has no address of the asked family
	// (EAI_NODATA).
	NoData
	// TryAgain: SERVFAIL or no reply (EAI_AGAIN).
	TryAgain
	// NoRecovery: REFUSED, FORMERR, NOTIMP or an unusable name (EAI_FAIL).
	NoRecovery
)

func (k ErrorKind) String() string {
	switch k {
	case HostNotFound:
		return "HOST_NOT_FOUND"
	case NoData:
		return "NO_DATA"
	case TryAgain:
		return "TRY_AGAIN"
	case NoRecovery:
		return "NO_RECOVERY"
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// LookupError is a failed lookup.
type LookupError struct {
	Name string
	Kind ErrorKind
}

func (e *LookupError) Error() string {
	return fmt.Sprintf("lookup %s: %s", e.Name, e.Kind)
}

// IsNotFound reports whether err is a lookup that found no such host or no
// address for it.
func IsNotFound(err error) bool {
	var le *LookupError
	return errors.As(err, &le) && (le.Kind == HostNotFound || le.Kind == NoData)
}

// QueryLog is one DNS query the stub sent, and what came back.
type QueryLog struct {
	Name    string
	Type    uint16
	Server  string // host:port
	Network string // udp or tcp
	Rcode   int    // -1 when there was no reply
	Answers int    // records in the answer section
	TC      bool
	Err     error
	// Local is the stub's end of the socket the query went from (its
	// source address and port), when the connection knows it.
	Local netip.AddrPort
}

// String is "A svc1.default.svc.cluster.local. @10.96.0.10:53/udp NXDOMAIN".
func (q QueryLog) String() string {
	res := ""
	switch {
	case q.Err != nil:
		res = "error: " + q.Err.Error()
	case q.Rcode == mdns.RcodeSuccess && q.Answers == 0:
		res = "NODATA"
	default:
		res = mdns.RcodeToString[q.Rcode]
		if q.Answers > 0 {
			res += fmt.Sprintf(" %d answers", q.Answers)
		}
	}
	if q.TC {
		res += " TC"
	}
	return fmt.Sprintf("%s %s @%s/%s %s", mdns.TypeToString[q.Type], q.Name, q.Server, q.Network, res)
}

// Result is a successful lookup.
type Result struct {
	Name  string       // the FQDN that answered
	Addrs []netip.Addr // A then AAAA addresses, in answer order
	Log   []QueryLog
	// Waited is the time the lookup spent waiting for replies that did not
	// come: one reply timeout for each UDP round (or TCP exchange) that
	// ended at its timeout.
	Waited time.Duration
}

// Stub is a pod's stub resolver: the glibc res_search walk over a
// ResolvConf's search list, talking to its nameservers through Dial, so it
// runs over a real or a simulated network. It records every query it sends.
// Safe for concurrent use.
type Stub struct {
	Conf ResolvConf
	// Dial opens a connection to a nameserver (network "udp" or "tcp",
	// address host:port). Nil dials the host's network.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Timeout overrides Conf's timeout option (per nameserver and round of
	// questions: glibc's send_dg timeout).
	Timeout time.Duration
	// After, when set, is the clock UDP reply timeouts run on (time.After's
	// shape, as a virtual clock provides it); nil uses read deadlines on the
	// wall clock.
	After func(d time.Duration) <-chan time.Time

	// gate, set by LookupOnClock, tells RunOnClock (netsim.Gate) when a UDP round's virtual
	// timer is armed while the stub is not blocked reading its replies (sending
	// the questions, handling a reply): the clock must not move then.
	gate *netsim.Gate

	mu     sync.Mutex
	nextID uint16
	// glibc's RES_SNGLKUP and RES_SNGLKUPREOP, set by its fallback when one
	// of an A+AAAA pair got no reply (exchangeUDP).
	learntSingle, learntReopen bool
}

// NewStub returns a stub resolver for conf.
func NewStub(conf ResolvConf, dial func(ctx context.Context, network, address string) (net.Conn, error)) *Stub {
	return &Stub{Conf: conf, Dial: dial}
}

// SearchList returns the names a lookup of name tries, in glibc's order:
// a name with a trailing dot only as is; with at least ndots dots as is first
// and then with each search domain; otherwise with each search domain and
// then as is. All are FQDNs.
func (s *Stub) SearchList(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	var out []string
	dots := strings.Count(name, ".")
	asIsFirst := dots >= s.Conf.Ndots()
	if asIsFirst {
		out = append(out, name+".")
	}
	rootOnList := false
	for _, d := range s.Conf.Searches {
		d = strings.TrimSuffix(d, ".")
		if d == "" {
			rootOnList = true
			out = append(out, name+".")
			continue
		}
		out = append(out, name+"."+d+".")
	}
	if !asIsFirst && !rootOnList {
		out = append(out, name+".")
	}
	return out
}

// LookupHost resolves name to addresses (A and AAAA), walking the search list.
func (s *Stub) LookupHost(ctx context.Context, name string) (*Result, error) {
	return s.Lookup(ctx, name, FamilyAny)
}

// LookupNetIP is net.Resolver.LookupNetIP's shape: network "ip", "ip4" or
// "ip6".
func (s *Stub) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	fam := FamilyAny
	switch network {
	case "ip4":
		fam = FamilyIPv4
	case "ip6":
		fam = FamilyIPv6
	case "ip":
	default:
		return nil, fmt.Errorf("lookup %s: unsupported network %q", host, network)
	}
	res, err := s.Lookup(ctx, host, fam)
	if err != nil {
		return nil, err
	}
	return res.Addrs, nil
}

// tryResult is the outcome of one name of the walk.
type tryResult struct {
	ok       bool
	kind     ErrorKind
	servfail bool // the failure was a SERVFAIL reply (not a timeout)
	addrs    []netip.Addr
}

// Lookup resolves name, walking the search list as glibc's res_search does:
// stop at the first name whose reply has answers; go on after NXDOMAIN,
// NODATA (remembered) and SERVFAIL; stop the search list after any other
// failure (REFUSED, no reply), but still try the name as is if it was not
// tried yet. The error reported: the as-is try's when it went first, else
// NO_DATA if any name had no data, else TRY_AGAIN after a SERVFAIL, else the
// last try's. The returned Result (also on error) holds the query log.
func (s *Stub) Lookup(ctx context.Context, name string, fam Family) (*Result, error) {
	res := &Result{}
	if name == "" || name == "." {
		return res, &LookupError{Name: name, Kind: HostNotFound}
	}
	ctx = context.WithValue(ctx, waitedKey{}, &res.Waited)
	fqdn, tr, kind := s.walk(name, func(fqdn string) tryResult { return s.tryName(ctx, fqdn, fam, &res.Log) })
	if fqdn == "" {
		return res, &LookupError{Name: name, Kind: kind}
	}
	res.Name, res.Addrs = fqdn, tr.addrs
	return res, nil
}

// walk is glibc's res_search over name (see Lookup): try is called for each
// name of the search list in turn until one succeeds. It returns the FQDN
// that succeeded with its result, or "" and the error glibc reports.
func (s *Stub) walk(name string, try func(fqdn string) tryResult) (string, tryResult, ErrorKind) {
	if strings.HasSuffix(name, ".") {
		tr := try(name)
		if tr.ok {
			return name, tr, 0
		}
		return "", tr, tr.kind
	}
	dots := strings.Count(name, ".")
	triedAsIs := false
	var saved ErrorKind
	if dots >= s.Conf.Ndots() {
		tr := try(name + ".")
		if tr.ok {
			return name + ".", tr, 0
		}
		saved, triedAsIs = tr.kind, true
	}
	gotNoData, gotServfail, rootOnList := false, false, false
	var last ErrorKind
	for _, d := range s.Conf.Searches {
		d = strings.TrimSuffix(d, ".")
		fqdn := name + "." + d + "."
		if d == "" {
			rootOnList = true
			fqdn = name + "."
		}
		tr := try(fqdn)
		if tr.ok {
			return fqdn, tr, 0
		}
		last = tr.kind
		done := false
		switch {
		case tr.kind == NoData:
			gotNoData = true
		case tr.kind == HostNotFound:
		case tr.kind == TryAgain && tr.servfail:
			gotServfail = true
		default:
			done = true
		}
		if done {
			break
		}
	}
	if !triedAsIs && !rootOnList {
		tr := try(name + ".")
		if tr.ok {
			return name + ".", tr, 0
		}
		last = tr.kind
	}
	switch {
	case saved != 0:
		return "", tryResult{}, saved
	case gotNoData:
		return "", tryResult{}, NoData
	case gotServfail:
		return "", tryResult{}, TryAgain
	case last != 0:
		return "", tryResult{}, last
	}
	return "", tryResult{}, HostNotFound
}

// tryName asks for the addresses of one FQDN and classifies the replies as
// glibc's __res_context_query does for an A+AAAA pair: success when either
// reply is NOERROR with answers; otherwise the rcode of the A reply, or of the
// AAAA reply when the A reply was NOERROR (when the exchange ended with one
// reply after glibc's single-request fallbacks, the rcode of that reply).
func (s *Stub) tryName(ctx context.Context, fqdn string, fam Family, log *[]QueryLog) tryResult {
	if _, ok := mdns.IsDomainName(fqdn); !ok || len(fqdn) > 254 {
		return tryResult{kind: NoRecovery}
	}
	var qtypes []uint16
	switch fam {
	case FamilyIPv4:
		qtypes = []uint16{mdns.TypeA}
	case FamilyIPv6:
		qtypes = []uint16{mdns.TypeAAAA}
	default:
		qtypes = []uint16{mdns.TypeA, mdns.TypeAAAA}
	}
	replies, partial := s.sendAll(ctx, fqdn, qtypes, log)
	var tr tryResult
	for _, r := range replies {
		if r == nil || r.Rcode != mdns.RcodeSuccess || len(r.Answer) == 0 {
			continue
		}
		tr.ok = true
		for _, rr := range r.Answer {
			switch v := rr.(type) {
			case *mdns.A:
				if ip, ok := netip.AddrFromSlice(v.A); ok {
					tr.addrs = append(tr.addrs, ip.Unmap())
				}
			case *mdns.AAAA:
				if ip, ok := netip.AddrFromSlice(v.AAAA); ok {
					tr.addrs = append(tr.addrs, ip)
				}
			}
		}
	}
	if tr.ok {
		return tr
	}
	first := replies[0]
	if partial && first == nil {
		// glibc's answer after its fallbacks is the one reply that came.
		first = replies[1]
	}
	if first == nil {
		return tryResult{kind: TryAgain}
	}
	code := first.Rcode
	if code == mdns.RcodeSuccess && len(replies) > 1 && !partial {
		if replies[1] == nil {
			return tryResult{kind: TryAgain}
		}
		code = replies[1].Rcode
	}
	switch code {
	case mdns.RcodeNameError:
		return tryResult{kind: HostNotFound}
	case mdns.RcodeServerFailure:
		return tryResult{kind: TryAgain, servfail: true}
	case mdns.RcodeSuccess:
		return tryResult{kind: NoData}
	}
	return tryResult{kind: NoRecovery}
}

func (s *Stub) id() uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	if s.nextID == 0 {
		s.nextID = 1
	}
	return s.nextID
}

func nameserverAddr(ns string) string {
	if _, _, err := net.SplitHostPort(ns); err == nil {
		return ns
	}
	return net.JoinHostPort(ns, "53")
}

// send asks the qtypes for fqdn as glibc's res_send does: over UDP, all
// questions on one socket back to back (unless single-request or
// single-request-reopen is on, by option or learnt: see exchangeUDP); per
// attempt each nameserver in turn, moving on after no reply or a
// SERVFAIL/NOTIMP/REFUSED reply (kept in case no server does better); a
// truncated reply is asked again over TCP. replies[i] is nil when qtypes[i]
// got no reply at all.
func (s *Stub) send(ctx context.Context, fqdn string, qtypes []uint16, log *[]QueryLog) []*mdns.Msg {
	replies, _ := s.sendAll(ctx, fqdn, qtypes, log)
	return replies
}

// sendAll is send; partial reports that a nameserver's UDP exchange ended
// with one reply of two after glibc's single-request fallbacks were used up,
// which glibc takes as that server's answer (the missing reply is ignored).
func (s *Stub) sendAll(ctx context.Context, fqdn string, qtypes []uint16, log *[]QueryLog) (replies []*mdns.Msg, partial bool) {
	best := make([]*mdns.Msg, len(qtypes))
	servers := s.Conf.Nameservers
	if len(servers) == 0 {
		servers = []string{"127.0.0.1"}
	}
	_, vc := s.Conf.Option("use-vc")
	for attempt := 0; attempt < s.Conf.Attempts(); attempt++ {
		for _, ns := range servers {
			addr := nameserverAddr(ns)
			var replies []*mdns.Msg
			partial := false
			if vc {
				replies = s.exchangeVC(ctx, addr, fqdn, qtypes, log)
			} else {
				replies, partial = s.exchangeUDP(ctx, addr, fqdn, qtypes, log)
			}
			if partial {
				return replies, true
			}
			good := true
			for i, r := range replies {
				if r != nil && r.Truncated {
					r = s.exchangeTCP(ctx, addr, fqdn, qtypes[i], log)
					replies[i] = r
				}
				if r == nil {
					good = false
					continue
				}
				switch r.Rcode {
				case mdns.RcodeServerFailure, mdns.RcodeNotImplemented, mdns.RcodeRefused:
					good = false
				}
				best[i] = r
			}
			if good {
				return replies, false
			}
			if ctx.Err() != nil {
				return best, false
			}
		}
	}
	return best, false
}

func (s *Stub) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return s.Conf.Timeout()
}

// SingleRequest reports how the stub sends an A+AAAA pair over UDP: one at a
// time on one socket (single), or with a new socket for the second question
// (reopen, which implies single). Either comes from the resolv.conf options
// or was learnt by glibc's fallback (see exchangeUDP).
func (s *Stub) SingleRequest() (single, reopen bool) {
	_, single = s.Conf.Option("single-request")
	_, reopen = s.Conf.Option("single-request-reopen")
	s.mu.Lock()
	defer s.mu.Unlock()
	reopen = reopen || s.learntReopen
	return single || reopen || s.learntSingle, reopen
}

// learn sets glibc's RES_SNGLKUP (reopen false) or RES_SNGLKUPREOP (reopen
// true) in the stub's state, for this and later lookups.
func (s *Stub) learn(reopen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reopen {
		s.learntReopen = true
	} else {
		s.learntSingle = true
	}
}

func (s *Stub) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if s.Dial != nil {
		return s.Dial(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (s *Stub) query(fqdn string, qtype uint16) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(fqdn, qtype)
	m.Id = s.id()
	return m
}

// replyTimer is the timeout of one send_dg round: glibc computes it once
// for all the questions of the round (both, when sent one at a time).
type replyTimer struct {
	deadline time.Time        // on the wall clock, without Stub.After
	fired    <-chan time.Time // Stub.After's channel
	expired  bool
	gate     *netsim.Gate // marked busy from arming to the end of the round but while blocked in read
}

func (s *Stub) newReplyTimer() *replyTimer {
	if s.After != nil {
		s.mu.Lock()
		g := s.gate
		s.mu.Unlock()
		g.Add(1)
		return &replyTimer{fired: s.After(s.timeout()), gate: g}
	}
	return &replyTimer{deadline: time.Now().Add(s.timeout())}
}

// release ends the round for the clock gate.
func (t *replyTimer) release() {
	if t.fired != nil {
		t.gate.Add(-1)
	}
}

// longAgo is a read deadline that has passed: it wakes a blocked read.
var longAgo = time.Unix(1, 0)

// read reads one message from conn before the round's timeout. On Stub.After's
// clock a watcher wakes the read by moving its deadline into the past.
func (t *replyTimer) read(conn *mdns.Conn) (*mdns.Msg, error) {
	if t.fired == nil {
		_ = conn.SetReadDeadline(t.deadline)
		return conn.ReadMsg()
	}
	if t.expired {
		return drainRead(conn)
	}
	_ = conn.SetReadDeadline(time.Time{})
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-t.fired:
			t.expired = true
			_ = conn.SetReadDeadline(longAgo)
		case <-done:
		}
	}()
	t.gate.Add(-1)
	m, err := conn.ReadMsg()
	t.gate.Add(1)
	close(done)
	<-stopped
	if err != nil && t.expired && isTimeout(err) {
		return drainRead(conn)
	}
	return m, err
}

// drainRead returns a reply already queued on conn when the round's virtual timeout
// fired, or the timeout. The clock moves to a timeout only when the simulation is quiet
// (RunOnClock), so a reply queued then arrived before the deadline and wins, as it does
// in glibc's poll. Without this the reply could lose a race: gonet's read, woken by the
// reply and by the past deadline at once, picks either (a select), and a lookup whose
// answer had arrived waited a whole timeout (seen in examples/dns-insert-race under
// load: 1 lookup in 80 waited 5 s with no insert_failed). The short wall-clock deadline
// only bounds the non-blocking read: a queued datagram is read at once, before it.
func drainRead(conn *mdns.Conn) (*mdns.Msg, error) {
	_ = conn.SetReadDeadline(time.Now().Add(drainWait))
	m, err := conn.ReadMsg()
	if err != nil && isTimeout(err) {
		return nil, os.ErrDeadlineExceeded
	}
	return m, err
}

// drainWait bounds drainRead's read when nothing is queued.
const drainWait = time.Millisecond

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// exchangeUDP sends the questions to one nameserver and collects the replies,
// matching IDs: glibc's send_dg. An A+AAAA pair goes back to back on one
// socket, or one at a time under single-request (same socket) or
// single-request-reopen (a new socket for the second question), within one
// timeout. glibc's fallback: when the timeout passes with one of the two
// replies in (and it was not SERVFAIL, NOTIMP, REFUSED or truncated: those end
// the round at once in glibc), back-to-back sending switches to
// single-request and the pair is asked again on the same socket with a new
// timeout; if that too ends with one reply, single-request-reopen, on a new
// socket; after that the one reply is the answer (partial). Each switch is
// kept in the stub (glibc sets RES_SNGLKUP / RES_SNGLKUPREOP in the thread's
// _res, which later lookups use until resolv.conf is read again). The log
// gets every query sent, round by round.
func (s *Stub) exchangeUDP(ctx context.Context, addr, fqdn string, qtypes []uint16, log *[]QueryLog) (replies []*mdns.Msg, partial bool) {
	sequential, reopen := s.SingleRequest()
	var conn *mdns.Conn
	closeConn := func() {
		if conn != nil {
			conn.Close()
			conn = nil
		}
	}
	defer closeConn()
	open := func() error {
		closeConn()
		c, err := s.dial(ctx, "udp", addr)
		if err != nil {
			return err
		}
		conn = &mdns.Conn{Conn: c, UDPSize: mdns.MinMsgSize}
		return nil
	}
	if err := open(); err != nil {
		for _, qt := range qtypes {
			*log = append(*log, QueryLog{Name: fqdn, Type: qt, Server: addr, Network: "udp", Rcode: -1, Err: err})
		}
		return make([]*mdns.Msg, len(qtypes)), false
	}
	for {
		var timedOut bool
		replies, timedOut = s.udpRound(addr, fqdn, qtypes, sequential, reopen, &conn, open, log)
		if timedOut {
			s.addWaited(ctx)
		}
		if len(qtypes) != 2 || !timedOut || (replies[0] == nil) == (replies[1] == nil) {
			return replies, false
		}
		got := replies[0]
		if got == nil {
			got = replies[1]
		}
		switch got.Rcode {
		case mdns.RcodeServerFailure, mdns.RcodeNotImplemented, mdns.RcodeRefused:
			return replies, false
		}
		if got.Truncated {
			return replies, false
		}
		switch {
		case !sequential:
			s.learn(false)
			sequential = true
		case !reopen:
			s.learn(true)
			reopen = true
			if err := open(); err != nil {
				for _, qt := range qtypes {
					*log = append(*log, QueryLog{Name: fqdn, Type: qt, Server: addr, Network: "udp", Rcode: -1, Err: err})
				}
				return make([]*mdns.Msg, len(qtypes)), false
			}
		default:
			return replies, true
		}
	}
}

// udpRound is one round of send_dg on *conn (open replaces it): the questions
// sent and their replies awaited within one timeout. timedOut reports that
// the timeout ended the round.
func (s *Stub) udpRound(addr, fqdn string, qtypes []uint16, sequential, reopen bool, conn **mdns.Conn, open func() error, log *[]QueryLog) (replies []*mdns.Msg, timedOut bool) {
	replies = make([]*mdns.Msg, len(qtypes))
	// Log entries go in question order, whatever order the replies came in.
	entries := make([]*QueryLog, len(qtypes))
	defer func() {
		for _, e := range entries {
			if e != nil {
				*log = append(*log, *e)
			}
		}
	}()
	// The socket's local address, looked up once a socket.
	var localOf *mdns.Conn
	var local netip.AddrPort
	record := func(i int, r *mdns.Msg, err error) {
		if *conn != localOf {
			localOf, local = *conn, localAddr(*conn)
		}
		e := &QueryLog{Name: fqdn, Type: qtypes[i], Server: addr, Network: "udp", Rcode: -1, Err: err, Local: local}
		if r != nil {
			e.Rcode, e.Answers, e.TC = r.Rcode, len(r.Answer), r.Truncated
		}
		entries[i] = e
	}
	timer := s.newReplyTimer()
	defer timer.release()
	// readFor waits for the replies to the outstanding queries.
	readFor := func(pending map[uint16]int) {
		for len(pending) > 0 {
			r, err := timer.read(*conn)
			if err != nil {
				timedOut = timedOut || isTimeout(err)
				for _, i := range pending {
					record(i, nil, err)
				}
				return
			}
			i, ok := pending[r.Id]
			if !ok || len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, fqdn) || r.Question[0].Qtype != qtypes[i] {
				continue // a stray or mismatched reply: keep waiting, as glibc does
			}
			delete(pending, r.Id)
			replies[i] = r
			record(i, r, nil)
		}
	}
	if sequential || reopen {
		for i, qt := range qtypes {
			if timedOut {
				break // glibc's round ends at the timeout: the rest is not sent
			}
			if i > 0 && reopen {
				if err := open(); err != nil {
					record(i, nil, err)
					continue
				}
			}
			q := s.query(fqdn, qt)
			if err := (*conn).WriteMsg(q); err != nil {
				record(i, nil, err)
				continue
			}
			readFor(map[uint16]int{q.Id: i})
		}
		return replies, timedOut
	}
	pending := map[uint16]int{}
	for i, qt := range qtypes {
		q := s.query(fqdn, qt)
		if err := (*conn).WriteMsg(q); err != nil {
			record(i, nil, err)
			continue
		}
		pending[q.Id] = i
	}
	readFor(pending)
	return replies, timedOut
}

func (s *Stub) exchangeTCP(ctx context.Context, addr, fqdn string, qtype uint16, log *[]QueryLog) *mdns.Msg {
	e := QueryLog{Name: fqdn, Type: qtype, Server: addr, Network: "tcp", Rcode: -1}
	defer func() { *log = append(*log, e) }()
	c, err := s.dial(ctx, "tcp", addr)
	if err != nil {
		e.Err = err
		return nil
	}
	conn := &mdns.Conn{Conn: c}
	defer conn.Close()
	e.Local = localAddr(conn)
	_ = conn.SetDeadline(time.Now().Add(s.timeout()))
	q := s.query(fqdn, qtype)
	if err := conn.WriteMsg(q); err != nil {
		e.Err = err
		return nil
	}
	for {
		r, err := conn.ReadMsg()
		if err != nil {
			e.Err = err
			return nil
		}
		if r.Id == q.Id {
			e.Rcode, e.Answers, e.TC = r.Rcode, len(r.Answer), r.Truncated
			return r
		}
	}
}

// NetResolver returns a Go *net.Resolver that resolves as this stub does: the
// search list, ndots and nameservers of its resolv.conf, not this process's.
// Every question Go asks is answered by the stub's walk for that name (A and
// AAAA questions for one name share one A+AAAA walk, as getaddrinfo's), with
// a CNAME from the name asked to the FQDN that answered; the resolver itself
// dials nothing (see goresolver.go). Go still reads this process's /etc/hosts
// before asking. Through GoResolver's methods a name with a trailing dot is
// asked once, as is, and a relative one walks the search list, as glibc
// does; through the embedded *net.Resolver every name is walked as a
// relative one (Go sends every name with a trailing dot).
func (s *Stub) NetResolver() *GoResolver {
	return newGoResolver(&goAnswerer{stub: s})
}
