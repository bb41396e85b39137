package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/netsim"
)

// attempt is one connection or packet, whichever way it was made.
type attempt struct {
	result string // connected, replied, delivered, refused, dropped
	pod    string
	node   string
	seen   netip.Addr
	reason string
	// status and body are an HTTP answer's (connect with http).
	status int
	body   string
}

func okResult(r string) bool {
	return r == netsim.ResultConnected || r == netsim.ResultReplied || r == netsim.ResultDelivered
}

// failedResult says whether an attempt failed as a client sees it: refused (a RST or an
// ICMP error) or dropped (no answer: the client times out). expect result: failed
// holds for either, where the two differ by mode (REJECT or DROP) and a test only needs
// the connection to fail.
func failedResult(r string) bool {
	return r == netsim.ResultRefused || r == netsim.ResultDropped
}

// resultMatches says whether an attempt's result is the one an expectation names
// (ok and failed name several).
func resultMatches(want, got string) bool {
	switch want {
	case "ok":
		return okResult(got)
	case "failed":
		return failedResult(got)
	}
	return want == got
}

// traffic runs a connect (connect=true) or send step.
func (r *runner) traffic(ctx context.Context, st *Step, t *Traffic, connect bool, res *StepResult) error {
	tp, err := r.planTraffic(ctx, t, connect)
	if err != nil {
		return err
	}
	tp.expect = st.Expect
	if r.dp != nil {
		tp.via, tp.autoNote = r.dp.Name(), ""
	}
	tr := &TrafficResult{From: t.From, Client: tp.client.String(), To: t.To, Dst: tp.dst.String(), Resolved: tp.how, Proto: tp.protoName, Via: tp.via, Attempts: tp.count,
		Results: map[string]int{}}
	if t.AllBranches {
		return r.allBranches(st, tp, tr, res)
	}
	if t.Packet != nil {
		return r.craft(st, tp, tr, res)
	}
	var atts []attempt
	switch {
	case r.dp != nil:
		atts = r.datapathAttempts(ctx, tp)
	case tp.via == "probe":
		atts, err = r.probeAttempts(tp, res)
	default:
		atts, err = r.netstackAttempts(ctx, tp, res)
	}
	if err != nil {
		return err
	}
	r.tally(tr, atts, tp.client)
	res.Traffic = tr
	res.Summary = trafficSummary(tr)
	describeTraffic(res, tr, tp)
	if st.Expect != nil {
		res.Expectations = r.checkTraffic(st.Expect, tr, atts, tp.client)
		if st.Expect.DecidedBy != nil && r.dp == nil { // no trace on a data path (its Verdict says so)
			res.Expectations = append(res.Expectations, checkDecision(st.Expect.DecidedBy, tp.firstTrace))
		}
	}
	return nil
}

// trafficPlan is a connect or send step made concrete: where the traffic goes, from
// which address, and how it is made.
type trafficPlan struct {
	t         *Traffic
	connect   bool
	dst       netip.AddrPort
	how       string // how a name or a service became dst
	client    netip.Addr
	protoName string // tcp (the default), udp or sctp
	proto     uint8
	count     int    // attempts, at least 1
	via       string // probe or netstack
	autoNote  string // why via is netstack when the step did not say
	// firstTrace is the first probe's trace, when the step shows it or an expectation
	// reads it (decided_by).
	firstTrace *netsim.Trace
	expect     *Expect // the step's expectations
}

// wantsDecision says whether an expectation reads the first attempt's trace.
func (tp *trafficPlan) wantsDecision() bool { return tp.expect != nil && tp.expect.DecidedBy != nil }

// planTraffic resolves a step's destination and client address and picks how the
// attempts are made: the userspace mode's connections go through netstack unless the
// step says otherwise, since there a program on the node picks the backend.
func (r *runner) planTraffic(ctx context.Context, t *Traffic, connect bool) (*trafficPlan, error) {
	tg, err := parseTarget(t.To, false)
	if err != nil {
		return nil, err
	}
	tp := &trafficPlan{t: t, connect: connect, count: t.Count, via: t.Via}
	tp.dst, tp.how, err = r.resolveTarget(ctx, tg, t.From)
	if err != nil {
		return nil, err
	}
	tp.client, err = r.clientAddr(t.From, tp.dst.Addr())
	if err != nil {
		return nil, err
	}
	tp.protoName = strings.ToLower(t.Proto)
	if tp.protoName == "" {
		tp.protoName = "tcp"
	}
	tp.proto, _ = netsim.ParseProto(tp.protoName)
	if tp.count == 0 {
		tp.count = 1
	}
	if tp.via == "" && t.HTTP != nil {
		tp.via = "netstack"
	}
	if tp.via == "" && connect && r.liveTraffic {
		tp.via = "netstack"
		tp.autoNote = "via netstack: live traffic was asked for (Session.LiveTraffic), so that its packets can be traced"
	}
	if tp.via == "" {
		tp.via = "probe"
		if connect && r.p.info.Semantics.Terminates && (tp.protoName == "tcp" || tp.protoName == "udp") {
			tp.via = "netstack"
			tp.autoNote = "via netstack: in the " + string(r.p.mode) + " mode a program on the node picks the backend, and a probe stops at its listener"
		}
	}
	return tp, nil
}

// allBranches sends one packet and follows every branch a probabilistic choice makes,
// each an outcome with its probability.
func (r *runner) allBranches(st *Step, tp *trafficPlan, tr *TrafficResult, res *StepResult) error {
	t := tp.t
	rs, err := r.c.Probe(netsim.Probe{From: t.From, Proto: tp.proto, Dst: tp.dst, SrcPort: uint16(t.SrcPort), Mode: netsim.ProbePacket, AllBranches: true, Trace: t.Trace, Payload: []byte("clusterlab\n")})
	if err != nil {
		return err
	}
	tr.Attempts = 1
	for i, pr := range rs {
		if i == 0 && pr.Trace != nil {
			res.Trace = pr.Trace
		}
		tr.Branches = append(tr.Branches, Branch{Probability: pr.Probability, Outcome: pr.Outcome.String(), Pod: pr.Pod})
	}
	res.Traffic = tr
	res.Summary = fmt.Sprintf("%s %s -> %s: %d possible outcomes", tp.protoName, tp.client, tp.dst, len(rs))
	if tp.how != "" {
		res.Details = append(res.Details, tp.how)
	}
	for _, b := range tr.Branches {
		res.Details = append(res.Details, fmt.Sprintf("p=%.4f  %s", b.Probability, b.Outcome))
	}
	if st.Expect != nil {
		defer func() {
			if st.Expect.Probabilities != nil {
				res.Expectations = append(res.Expectations, checkProbabilities(st.Expect, rs))
			}
		}()
		var atts []attempt
		for _, b := range rs {
			atts = append(atts, attempt{result: b.Result, pod: b.Pod, node: b.Node, seen: b.SeenSrc.Addr(), reason: b.Reason})
		}
		for _, a := range atts {
			tr.Results[a.result]++
			if okResult(a.result) && a.pod != "" {
				if tr.Backends == nil {
					tr.Backends = map[string]int{}
				}
				tr.Backends[a.pod]++
			}
		}
		res.Expectations = r.checkTraffic(st.Expect, tr, atts, tp.client)
	}
	return nil
}

// probeAttempts makes the step's attempts as probes; the first one is traced when the
// step asks.
func (r *runner) probeAttempts(tp *trafficPlan, res *StepResult) ([]attempt, error) {
	t := tp.t
	mode := netsim.ProbePacket
	if tp.connect {
		mode = netsim.ProbeConnect
	}
	var atts []attempt
	for i := 0; i < tp.count; i++ {
		trace := i == 0 && (t.Trace || tp.wantsDecision())
		pr, err := r.c.ProbeOne(netsim.Probe{From: t.From, Proto: tp.proto, Dst: tp.dst, SrcPort: uint16(t.SrcPort), Mode: mode, Trace: trace, Payload: []byte("clusterlab\n")})
		if err != nil {
			return nil, err
		}
		if i == 0 && pr.Trace != nil {
			tp.firstTrace = pr.Trace
			if t.Trace {
				res.Trace = pr.Trace
			}
		}
		atts = append(atts, attempt{result: pr.Result, pod: pr.Pod, node: pr.Node, seen: pr.SeenSrc.Addr(), reason: pr.Reason})
	}
	return atts, nil
}

// netstackAttempts makes the step's attempts as real connections from the source's
// network stack; a trace, when the step asks, comes from a probe packet sent first.
func (r *runner) netstackAttempts(ctx context.Context, tp *trafficPlan, res *StepResult) ([]attempt, error) {
	t := tp.t
	n, err := r.netOf(t.From)
	if err != nil {
		return nil, err
	}
	if t.Trace {
		pr, err := r.c.ProbeOne(netsim.Probe{From: t.From, Proto: tp.proto, Dst: tp.dst, SrcPort: uint16(t.SrcPort), Mode: netsim.ProbePacket, Trace: true})
		if err != nil {
			return nil, err
		}
		res.Trace = pr.Trace
	}
	var atts []attempt
	for i := 0; i < tp.count; i++ {
		if t.HTTP != nil {
			atts = append(atts, r.httpAttempt(ctx, n, t.HTTP, uint16(t.SrcPort), tp.dst))
			continue
		}
		atts = append(atts, r.netstackAttempt(ctx, n, tp.protoName, uint16(t.SrcPort), tp.dst))
	}
	return atts, nil
}

// tally counts the attempts into tr: results; for answers, the backend (a pod, or a
// node's host network) and the source address it saw; for the others, why.
func (r *runner) tally(tr *TrafficResult, atts []attempt, client netip.Addr) {
	for _, a := range atts {
		tr.Results[a.result]++
		if a.status != 0 {
			if tr.HTTPStatuses == nil {
				tr.HTTPStatuses = map[string]int{}
			}
			tr.HTTPStatuses[strconv.Itoa(a.status)]++
			if tr.HTTPBody == "" {
				tr.HTTPBody = a.body
			}
		}
		if okResult(a.result) {
			if a.pod != "" {
				if tr.Backends == nil {
					tr.Backends = map[string]int{}
				}
				tr.Backends[a.pod]++
			} else if a.node != "" {
				if tr.Backends == nil {
					tr.Backends = map[string]int{}
				}
				tr.Backends["node:"+a.node]++
			}
			if a.seen.IsValid() {
				if tr.SeenSources == nil {
					tr.SeenSources = map[string]int{}
				}
				tr.SeenSources[r.classify(a.seen, client)]++
			}
		} else if a.reason != "" {
			if tr.Reasons == nil {
				tr.Reasons = map[string]int{}
			}
			tr.Reasons[a.reason]++
		}
	}
}

// describeTraffic adds the lines under a traffic step's summary: how the destination
// was resolved, why netstack, who answered, the source they saw, and why attempts failed.
func describeTraffic(res *StepResult, tr *TrafficResult, tp *trafficPlan) {
	if tp.how != "" {
		res.Details = append(res.Details, tp.how)
	}
	if tp.autoNote != "" {
		res.Details = append(res.Details, tp.autoNote)
	}
	if len(tr.Backends) > 0 {
		res.Details = append(res.Details, "answered by "+countsText(tr.Backends))
	}
	if len(tr.SeenSources) > 0 {
		res.Details = append(res.Details, "the receiver saw the source as "+seenText(tr.SeenSources, tp.client))
	}
	for _, k := range sortedKeys(tr.Reasons) {
		res.Details = append(res.Details, fmt.Sprintf("why (%d of %d): %s", tr.Reasons[k], tp.count, k))
	}
	if len(tr.HTTPStatuses) > 0 {
		res.Details = append(res.Details, "HTTP status "+countsText(tr.HTTPStatuses))
		body := strings.Join(strings.Fields(tr.HTTPBody), " ")
		if len(body) > 300 {
			body = body[:300] + "..."
		}
		res.Details = append(res.Details, "first body: "+body)
	}
}

func trafficSummary(tr *TrafficResult) string {
	var parts []string
	for _, k := range []string{netsim.ResultConnected, netsim.ResultReplied, netsim.ResultDelivered, netsim.ResultRefused, netsim.ResultDropped, netsim.ResultStolen} {
		if n := tr.Results[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	for _, k := range sortedKeys(tr.Results) {
		switch k {
		case netsim.ResultConnected, netsim.ResultReplied, netsim.ResultDelivered, netsim.ResultRefused, netsim.ResultDropped, netsim.ResultStolen:
		default:
			parts = append(parts, fmt.Sprintf("%d %s", tr.Results[k], k))
		}
	}
	return fmt.Sprintf("%s %s -> %s: %s", tr.Proto, tr.Client, tr.Dst, strings.Join(parts, ", "))
}

func seenText(m map[string]int, client netip.Addr) string {
	out := map[string]int{}
	for k, v := range m {
		if k == "client" {
			k = "the client's own address " + client.String()
		}
		out[k] += v
	}
	return countsText(out)
}

// netstackAttempt makes one real connection (TCP: connect, send a line, read the whoami
// answer; UDP: a datagram and its answer) with DialWhoami, which moves the virtual clock
// while it waits, so that retransmissions, link latency and the proxies' timeouts happen.
//
// The clock moves only once the simulation has nothing left to do (Cluster.Quiesce), and
// then to the next timer, never on wall time. (It used to move 250ms every 10ms of wall
// time; under CPU load that fired the userspace proxy's first endpoint dial timeout,
// 250ms, in the middle of a healthy dial, and the proxy retried on the next endpoint: the
// demo's round robin came out 31/30/29.)
func (r *runner) netstackAttempt(ctx context.Context, n *netsim.Net, proto string, sport uint16, dst netip.AddrPort) attempt {
	budget := netstackBudget // virtual time before the attempt counts as dropped
	if proto == "udp" {
		budget = netstackBudgetUDP
	}
	d := DialWhoami(ctx, r.c, WhoamiDial{Net: n, Network: proto, SrcPort: sport, Dst: dst, Line: "clusterlab", Budget: budget,
		// Most answers need no timer and come within a few milliseconds.
		QuickWait: 2 * time.Millisecond, Failed: failed})
	return attempt{result: d.Result, pod: d.Pod, node: d.Node, seen: d.Seen, reason: d.Reason}
}

// httpAttempt makes one connection that sends an HTTP GET and reads the answer.
func (r *runner) httpAttempt(ctx context.Context, n *netsim.Net, h *HTTPGet, sport uint16, dst netip.AddrPort) attempt {
	path := h.Path
	if path == "" {
		path = "/"
	}
	d := DialWhoami(ctx, r.c, WhoamiDial{Net: n, Network: "tcp", SrcPort: sport, Dst: dst, Budget: netstackBudget,
		QuickWait: 2 * time.Millisecond, Failed: failed, Exchange: HTTPExchange(path, h.Host, dst)})
	return attempt{result: d.Result, pod: d.Pod, node: d.Node, seen: d.Seen, reason: d.Reason, status: d.Status, body: d.Body}
}

// The virtual time a netstack attempt gets before it counts as dropped.
const (
	netstackBudget    = 10 * time.Second
	netstackBudgetUDP = 3 * time.Second
)

func failed(err error) Dialed {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Dialed{Result: netsim.ResultRefused, Reason: "connection refused"}
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Dialed{Result: netsim.ResultRefused, Reason: "host unreachable"}
	case errors.Is(err, context.Canceled), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, net.ErrClosed):
		return Dialed{Result: netsim.ResultDropped, Reason: "no answer"}
	}
	return Dialed{Result: netsim.ResultDropped, Reason: err.Error()}
}

// checkTraffic evaluates a connect or send step's expectations.
func (r *runner) checkTraffic(e *Expect, tr *TrafficResult, atts []attempt, client netip.Addr) []Expectation {
	var out []Expectation
	add := func(field, want, got string, ok bool) {
		out = append(out, Expectation{Field: field, Want: want, Got: got, OK: ok})
	}
	okCount := 0
	for _, a := range atts {
		if okResult(a.result) {
			okCount++
		}
	}
	if e.Result != "" {
		good := 0
		for _, a := range atts {
			if resultMatches(e.Result, a.result) {
				good++
			}
		}
		add("result", fmt.Sprintf("every attempt %s", e.Result), summaryCounts(tr.Results), good == len(atts))
	}
	if e.Status != nil {
		good := 0
		for _, a := range atts {
			if a.status == *e.Status {
				good++
			}
		}
		add("status", fmt.Sprintf("every answer HTTP %d", *e.Status), httpGot(tr), good == len(atts))
	}
	if e.Body != "" {
		good := 0
		var bodies []string
		for _, a := range atts {
			if a.status != 0 && strings.Contains(a.body, e.Body) {
				good++
			} else if a.status != 0 && len(bodies) < 3 {
				bodies = append(bodies, strconv.Quote(strings.TrimSpace(a.body)))
			}
		}
		got := fmt.Sprintf("%d of %d", good, len(atts))
		if len(bodies) > 0 {
			got += "; other bodies: " + strings.Join(bodies, ", ")
		}
		add("body", fmt.Sprintf("every answer's body contains %q", e.Body), got, good == len(atts))
	}
	if e.MinSuccess != nil {
		frac := float64(okCount) / float64(len(atts))
		add("min_success", fmt.Sprintf("at least %.0f%% ok", *e.MinSuccess*100), fmt.Sprintf("%.0f%% (%d of %d)", frac*100, okCount, len(atts)), frac+1e-9 >= *e.MinSuccess)
	}
	backends := map[string]int{}
	for k, v := range tr.Backends {
		backends[k] = v
	}
	if e.Reaches != nil {
		ok := true
		var missing, extra []string
		for _, pat := range e.Reaches {
			if !anyMatch(pat, backends) {
				ok = false
				missing = append(missing, pat)
			}
		}
		for b := range backends {
			matched := false
			for _, pat := range e.Reaches {
				if podMatch(pat, b) {
					matched = true
				}
			}
			if !matched {
				ok = false
				extra = append(extra, b)
			}
		}
		sort.Strings(extra)
		got := "{" + strings.Join(sortedKeys(backends), ", ") + "}"
		if len(missing) > 0 {
			got += "; nothing from " + strings.Join(missing, ", ")
		}
		if len(extra) > 0 {
			got += "; unexpected " + strings.Join(extra, ", ")
		}
		add("reaches", "{"+strings.Join(e.Reaches, ", ")+"}", got, ok)
	}
	if e.NotReaches != nil {
		var hit []string
		for b := range backends {
			for _, pat := range e.NotReaches {
				if podMatch(pat, b) {
					hit = append(hit, b)
					break
				}
			}
		}
		sort.Strings(hit)
		got := "none of them"
		if len(hit) > 0 {
			got = strings.Join(hit, ", ")
		}
		add("not_reaches", "none of {"+strings.Join(e.NotReaches, ", ")+"}", got, len(hit) == 0)
	}
	if e.Backends != nil {
		add("backends", fmt.Sprintf("%d distinct backends", *e.Backends), fmt.Sprintf("%d (%s)", len(backends), countsText(backends)), len(backends) == *e.Backends)
	}
	if e.Spread != nil {
		n := len(backends)
		if e.Backends != nil {
			n = *e.Backends
		}
		ok := n > 0 && okCount > 0 && len(backends) == n
		even := 0.0
		if n > 0 {
			even = float64(okCount) / float64(n)
		}
		for _, v := range backends {
			if float64(v) < even*(1-*e.Spread)-1e-9 || float64(v) > even*(1+*e.Spread)+1e-9 {
				ok = false
			}
		}
		add("spread", fmt.Sprintf("each of %d backends within ±%.0f%% of %.1f", n, *e.Spread*100, even), countsText(backends), ok)
	}
	if e.SeenSource != "" {
		want, ok := e.SeenSource, true
		seen := tr.SeenSources
		for cls, v := range seen {
			if v == 0 {
				continue
			}
			switch {
			case want == "client":
				ok = ok && cls == "client"
			case want == "not-client":
				ok = ok && cls != "client"
			case want == "node":
				// A node's own connection: the client's address is the node's.
				ok = ok && (strings.HasPrefix(cls, "node:") || cls == "client" && r.nodeOf(client) != "")
			case strings.HasPrefix(want, "node:"):
				ok = ok && (cls == want || cls == "client" && r.nodeOf(client) == want)
			default:
				a, _ := netip.ParseAddr(want)
				ok = ok && (cls == a.String() || cls == "client" && client == a || r.classify(a, client) == cls)
			}
		}
		if len(seen) == 0 {
			ok = false
		}
		got := "nothing answered"
		if len(seen) > 0 {
			got = countsText(seen)
		}
		add("seen_source", want, got, ok)
	}
	return out
}

func summaryCounts(m map[string]int) string {
	if len(m) == 0 {
		return "no attempts"
	}
	return countsText(m)
}

func podMatch(pat, pod string) bool {
	pat = strings.TrimPrefix(pat, "pod:")
	if !strings.Contains(pat, "/") && !strings.HasPrefix(pat, "node:") {
		pat = "default/" + pat
	}
	ok, _ := path.Match(pat, pod)
	return ok
}

func anyMatch(pat string, backends map[string]int) bool {
	for b := range backends {
		if podMatch(pat, b) {
			return true
		}
	}
	return false
}

// ---- DNS steps ----

func (r *runner) dnsStep(ctx context.Context, st *Step, res *StepResult) error {
	q := st.DNS
	typ := strings.ToUpper(q.Type)
	if typ == "" {
		typ = "A"
	}
	dr := &DNSResult{Name: q.Name, Type: typ, Answers: []string{}}
	res.DNS = dr
	if typ == "BOTH" || len(q.Options) > 0 {
		if typ == "BOTH" {
			dr.Type = "A+AAAA"
		}
		if err := r.glibcLookup(ctx, q, typ, dr, res); err != nil {
			return err
		}
	} else if typ == "A" || typ == "AAAA" {
		fam := dns.FamilyIPv4
		if typ == "AAAA" {
			fam = dns.FamilyIPv6
		}
		stub, err := r.res.podStub(q.From)
		if err != nil {
			return err
		}
		result, err := stub.Lookup(ctx, q.Name, fam)
		var logs []dns.QueryLog
		if result != nil {
			logs = result.Log
		}
		var le *dns.LookupError
		switch {
		case err == nil:
			dr.Rcode, dr.FQDN = "NOERROR", result.Name
			for _, a := range result.Addrs {
				dr.Answers = append(dr.Answers, a.String())
			}
		case errors.As(err, &le):
			dr.Rcode = map[dns.ErrorKind]string{dns.HostNotFound: "NXDOMAIN", dns.NoData: "NOERROR", dns.TryAgain: "SERVFAIL", dns.NoRecovery: "REFUSED"}[le.Kind]
			res.Details = append(res.Details, "resolver: "+err.Error())
		default:
			return err
		}
		for _, l := range logs {
			dr.Queries = append(dr.Queries, l.String())
		}
	} else {
		qt := mdns.StringToType[typ]
		name := q.Name
		if a, err := netip.ParseAddr(name); err == nil && qt == mdns.TypePTR {
			// An address asks for its reverse name, as dig -x does.
			if rev, err := mdns.ReverseAddr(a.String()); err == nil {
				name = rev
			}
		}
		msg, fqdn, log, err := r.res.query(ctx, q.From, name, qt)
		dr.Queries = log
		if err != nil {
			return err
		}
		dr.FQDN, dr.Rcode = fqdn, mdns.RcodeToString[msg.Rcode]
		for _, rr := range msg.Answer {
			dr.Answers = append(dr.Answers, rdata(rr))
		}
	}
	res.Summary = fmt.Sprintf("%s %s: %s", dr.Type, q.Name, dr.Rcode)
	if len(dr.Answers) > 0 {
		res.Summary += " " + strings.Join(dr.Answers, ", ")
	}
	if dr.FQDN != "" && strings.TrimSuffix(dr.FQDN, ".") != strings.TrimSuffix(q.Name, ".") {
		res.Details = append(res.Details, "answered for "+dr.FQDN)
	}
	if len(dr.Queries) > 1 {
		res.Details = append(res.Details, "queries: "+strings.Join(dr.Queries, "; "))
	}
	for i, f := range dr.InFlight {
		res.Details = append(res.Details, fmt.Sprintf("in flight together, packet %d: %s", i, f))
	}
	if r.res.mode == "direct" {
		res.Details = append(res.Details, "answered in-process by the cluster DNS server code (dns: direct)")
	}
	if e := st.Expect; e != nil {
		if e.Rcode != "" {
			res.Expectations = append(res.Expectations, Expectation{Field: "rcode", Want: strings.ToUpper(e.Rcode), Got: dr.Rcode, OK: strings.EqualFold(e.Rcode, dr.Rcode)})
		}
		if e.Answer != nil {
			want, err := r.expandAnswers(e.Answer)
			if err != nil {
				return err
			}
			got := append([]string(nil), dr.Answers...)
			sort.Strings(want)
			sort.Strings(got)
			res.Expectations = append(res.Expectations, Expectation{Field: "answer", Want: "{" + strings.Join(want, ", ") + "}", Got: "{" + strings.Join(got, ", ") + "}", OK: strings.Join(want, "\n") == strings.Join(got, "\n")})
		}
		if err := r.glibcExpect(e, dr, res); err != nil {
			return err
		}
	}
	return nil
}

// rdata is a record's data as zone-file text ("10.96.0.10", "0 100 80 web.default.svc.cluster.local.").
func rdata(rr mdns.RR) string {
	s := rr.String()
	h := rr.Header().String()
	return strings.TrimSpace(strings.TrimPrefix(s, h))
}

// expandAnswers turns service:NS/NAME and pod:NS/NAME into their addresses.
func (r *runner) expandAnswers(in []string) ([]string, error) {
	var out []string
	for _, a := range in {
		switch {
		case strings.HasPrefix(a, "service:"):
			ns, n := splitKey(strings.TrimPrefix(a, "service:"))
			svc, ok := r.c.Store().GetService(ns, n)
			if !ok {
				return nil, fmt.Errorf("answer %q: no service %s/%s", a, ns, n)
			}
			ips := svc.Spec.ClusterIPs
			if len(ips) == 0 && svc.Spec.ClusterIP != "" {
				ips = []string{svc.Spec.ClusterIP}
			}
			for _, ip := range ips {
				if ip != "None" {
					out = append(out, ip)
				}
			}
		case strings.HasPrefix(a, "pod:"):
			ns, n := splitKey(strings.TrimPrefix(a, "pod:"))
			pod, ok := r.c.Store().GetPod(ns, n)
			if !ok {
				return nil, fmt.Errorf("answer %q: no pod %s/%s", a, ns, n)
			}
			for _, ip := range pod.Status.PodIPs {
				out = append(out, ip.IP)
			}
		default:
			out = append(out, a)
		}
	}
	return out, nil
}

// httpGot describes the HTTP answers of a step, and the attempts without one.
func httpGot(tr *TrafficResult) string {
	var parts []string
	if len(tr.HTTPStatuses) > 0 {
		parts = append(parts, "HTTP "+countsText(tr.HTTPStatuses))
	}
	n := 0
	for _, v := range tr.HTTPStatuses {
		n += v
	}
	if n < tr.Attempts {
		parts = append(parts, fmt.Sprintf("%d without an answer (%s)", tr.Attempts-n, summaryCounts(tr.Results)))
	}
	return strings.Join(parts, "; ")
}
