package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/dns"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

// A dns step of type both, or with resolv.conf options, resolves as glibc's
// getaddrinfo does in the pod: A and AAAA back to back from one UDP socket by
// default (single-request, single-request-reopen and use-vc change that), the
// reply timeouts and attempts of resolv.conf on the virtual clock.

// resolvFlags are the resolv.conf options without a value a dns step takes.
var resolvFlags = []string{"single-request", "single-request-reopen", "use-vc", "edns0", "rotate", "no-aaaa", "trust-ad"}

// checkResolvOption validates one resolv.conf option of a dns step.
func checkResolvOption(o string) error {
	name, val, hasVal := strings.Cut(o, ":")
	switch name {
	case "timeout", "attempts", "ndots":
		n, err := strconv.Atoi(val)
		if !hasVal || err != nil || n < 0 {
			return fmt.Errorf("want %s:N with N a whole number, got %q", name, o)
		}
		return nil
	}
	for _, f := range resolvFlags {
		if name == f && !hasVal {
			return nil
		}
	}
	return fmt.Errorf("want single-request, single-request-reopen, use-vc, timeout:N, attempts:N, ndots:N, edns0, rotate, no-aaaa or trust-ad, got %q", o)
}

// glibcLookup resolves q as getaddrinfo would, with q's options added to the pod's
// resolv.conf, a fresh resolver state (a new process's) and the timeouts on the
// virtual clock (kube-dns mode; in direct mode nothing is lost and nothing waits).
func (r *runner) glibcLookup(ctx context.Context, q *DNSQuery, typ string, dr *DNSResult, res *StepResult) error {
	pod, err := r.res.podStub(q.From)
	if err != nil {
		return err
	}
	conf := pod.Conf
	conf.Options = append(append([]string(nil), conf.Options...), q.Options...)
	stub := dns.NewStub(conf, pod.Dial)
	if _, ok := conf.Option("timeout"); !ok {
		stub.Timeout = pod.Timeout
	}
	fam := dns.FamilyAny
	switch typ {
	case "A":
		fam = dns.FamilyIPv4
	case "AAAA":
		fam = dns.FamilyIPv6
	}
	var gather *netsim.Gathering
	if q.Together != nil {
		if gather, err = r.holdTogether(q, res); err != nil {
			return err
		}
	}
	var result *dns.Result
	if r.res.mode == "direct" || r.res.dpDial != nil { // real time on a data path
		result, err = stub.Lookup(ctx, q.Name, fam)
	} else {
		result, err = dns.LookupOnClock(ctx, r.c, stub, q.Name, fam)
	}
	if result == nil {
		result = &dns.Result{}
	}
	if gather != nil {
		gather.Cancel() // fewer packets than held came: they run now
		<-gather.Done()
		fl, _, ilErr := gather.Results()
		for _, f := range fl {
			s := f.Verdict + " " + f.Packet
			if f.Reason != "" {
				s += ": " + f.Reason
			}
			dr.InFlight = append(dr.InFlight, s)
		}
		count, window := q.Together.Count, time.Millisecond
		if count == 0 {
			count = 2
		}
		if q.Together.Window != nil {
			window = q.Together.Window.D()
		}
		switch {
		case len(fl) < count:
			res.Details = append(res.Details, fmt.Sprintf("together: %d of %d packets came within the %s window; they went through without the others", len(fl), count, window))
		case ilErr != nil:
			res.Details = append(res.Details, "together: "+ilErr.Error()+"; the rest went one at a time")
		}
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
	for _, l := range result.Log {
		s := l.String()
		if l.Local.IsValid() {
			s += " from " + l.Local.String()
		}
		dr.Queries = append(dr.Queries, s)
	}
	dr.Delay = result.Waited.String()
	dr.ByType = byType(result, fam)
	res.Details = append(res.Details, "delay "+dr.Delay+" (reply timeouts on the virtual clock)")
	return nil
}

// holdTogether has the node of q's pod hold the pod's next DNS packets (UDP to port
// 53) so that they are in flight together as q.Together says.
func (r *runner) holdTogether(q *DNSQuery, res *StepResult) (*netsim.Gathering, error) {
	pl, err := parsePlace(q.From, true)
	if err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(pl.name, "/")
	p := r.c.Pod(ns, name)
	if p == nil {
		return nil, fmt.Errorf("no running pod %s", pl.name)
	}
	tg := q.Together
	t := netsim.Together{Count: tg.Count, Interleaving: netsim.Interleaving{Steps: tg.Steps, Random: tg.Random, Seed: tg.Seed}}
	if tg.Window != nil {
		t.Window = tg.Window.D()
	}
	ips := p.IPs()
	t.Match = func(pk *netsim.Packet) bool {
		return pk.Proto == netfilter.ProtoUDP && pk.DstPort == 53 && slices.Contains(ips, pk.Src)
	}
	how := "one at a time"
	switch {
	case tg.Random:
		how = fmt.Sprintf("at random (seed %d)", tg.Seed)
	case len(tg.Steps) > 0:
		how = fmt.Sprintf("steps %v", tg.Steps)
	}
	res.Details = append(res.Details, fmt.Sprintf("node %s holds the pod's first DNS packets in flight together, %s", p.Node().Name(), how))
	return p.Node().HoldTogether(t), nil
}

// byType is the outcome of each query type: the last query of the type sent for the
// name that answered (or the last name tried), and the addresses of its family.
func byType(res *dns.Result, fam dns.Family) []DNSTypeResult {
	var out []DNSTypeResult
	for _, qt := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		if fam == dns.FamilyIPv4 && qt != mdns.TypeA || fam == dns.FamilyIPv6 && qt != mdns.TypeAAAA {
			continue
		}
		t := DNSTypeResult{Type: mdns.TypeToString[qt], Answers: []string{}}
		for _, l := range res.Log {
			if l.Type != qt || (res.Name != "" && !strings.EqualFold(l.Name, res.Name)) {
				continue
			}
			t.Answered, t.Rcode = l.Rcode >= 0, ""
			if l.Rcode >= 0 {
				t.Rcode = mdns.RcodeToString[l.Rcode]
			}
		}
		for _, a := range res.Addrs {
			if a.Is4() == (qt == mdns.TypeA) {
				t.Answers = append(t.Answers, a.String())
			}
		}
		out = append(out, t)
	}
	return out
}

// glibcExpect checks a dns step's answers by type and its delay.
func (r *runner) glibcExpect(e *Expect, dr *DNSResult, res *StepResult) error {
	for _, k := range slices.Sorted(mapKeys(e.Answers)) {
		want, err := r.expandAnswers(e.Answers[k])
		if err != nil {
			return err
		}
		typ := strings.ToUpper(k)
		v6 := typ == "AAAA"
		var wantFam []string
		for _, w := range want {
			if a, err := netip.ParseAddr(w); err == nil && a.Is6() != v6 {
				continue // a service's or pod's address of the other family
			}
			wantFam = append(wantFam, w)
		}
		var got []string
		for _, t := range dr.ByType {
			if t.Type == typ {
				got = append(got, t.Answers...)
			}
		}
		sort.Strings(wantFam)
		sort.Strings(got)
		res.Expectations = append(res.Expectations, Expectation{Field: "answers." + typ, Want: "{" + strings.Join(wantFam, ", ") + "}", Got: "{" + strings.Join(got, ", ") + "}", OK: strings.Join(wantFam, "\n") == strings.Join(got, "\n")})
	}
	if d := e.Delay; d != nil {
		got, _ := time.ParseDuration(dr.Delay)
		if d.Min != nil {
			res.Expectations = append(res.Expectations, Expectation{Field: "delay.min", Want: d.Min.String(), Got: dr.Delay, OK: got >= d.Min.D()})
		}
		if d.AtMost != nil {
			res.Expectations = append(res.Expectations, Expectation{Field: "delay.at_most", Want: d.AtMost.String(), Got: dr.Delay, OK: got <= d.AtMost.D()})
		}
	}
	return nil
}
