package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// maxLookups bounds the lookups a PodResolver remembers (the oldest go first).
const maxLookups = 4096

// Lookup is one name a pod resolved: where the answer came from and every
// DNS query the stub sent for it.
type Lookup struct {
	At      time.Time // virtual time the lookup started
	Name    string    // as the program asked
	Type    uint16    // 0: addresses (A and AAAA); else the type asked through NetResolver
	Source  string    // "files" (the pod's /etc/hosts), "dns", or "" on failure
	FQDN    string    // the name that answered (DNS), or the hosts-file name
	Addrs   []netip.Addr
	Err     error
	Queries []QueryLog
	// Waited is the time spent on reply timeouts (Result.Waited).
	Waited time.Duration
}

// PodResolver is a pod's name resolution as the simulated kubelet set it up:
// its /etc/resolv.conf and /etc/hosts, and a glibc-like stub resolver
// (nsswitch "files dns": the hosts file first, then DNS) talking to the
// resolv.conf nameservers over the pod's own network. Resolve is what the
// pod's netsim.Net uses to turn names into addresses, so Dial and HTTP
// clients in the pod resolve through it. It keeps a log of its lookups.
type PodResolver struct {
	// Pod is "namespace/name", or "node:NAME" for a node's own resolver.
	Pod string
	// Conf is the pod's resolv.conf; Warnings the kubelet's events about it.
	Conf     ResolvConf
	Warnings []string
	// Stub sends the queries. Its Timeout may be changed between lookups.
	Stub *Stub

	hosts []hostsEntry
	now   func() time.Time

	mu      sync.Mutex
	lookups ring[Lookup]
}

type hostsEntry struct {
	ip    netip.Addr
	names []string
	line  string // as written in the file
}

// ResolvConf returns the pod's /etc/resolv.conf text.
func (r *PodResolver) ResolvConf() string { return r.Conf.String() }

// Hosts returns the pod's /etc/hosts text as the kubelet writes it.
func (r *PodResolver) Hosts() string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file.\n")
	for _, e := range r.hosts {
		b.WriteString(e.line + "\n")
	}
	return b.String()
}

// Resolve resolves host as getaddrinfo would in the pod (A and AAAA): the
// hosts file, then the stub's search-list walk. Errors are *net.DNSError
// (wrapping the stub's *LookupError), as Go's resolver reports them.
func (r *PodResolver) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	lk := r.lookup(ctx, host)
	if lk.Err != nil {
		return nil, r.dnsError(host, lk.Err, lk.Queries)
	}
	return lk.Addrs, nil
}

// lookup resolves host (hosts file, then the stub) and records the lookup.
func (r *PodResolver) lookup(ctx context.Context, host string) Lookup {
	lk := Lookup{At: r.now(), Name: host}
	if addrs, name := r.fromHosts(host); len(addrs) > 0 {
		lk.Source, lk.FQDN, lk.Addrs = "files", name, addrs
		r.record(lk)
		return lk
	}
	res, err := r.Stub.Lookup(ctx, host, FamilyAny)
	if res != nil {
		lk.Queries = res.Log
		lk.Waited = res.Waited
		lk.FQDN = res.Name
		lk.Addrs = res.Addrs
	}
	if err != nil {
		lk.Err = err
		r.record(lk)
		return lk
	}
	lk.Source = "dns"
	r.record(lk)
	return lk
}

// NetResolver returns a Go *net.Resolver that resolves as the pod does: its
// /etc/hosts, then its stub walking its resolv.conf's search list (see
// Stub.NetResolver), every lookup recorded in Lookups like Resolve's (other
// types than addresses with their Type).
func (r *PodResolver) NetResolver() *GoResolver {
	return newGoResolver(&goAnswerer{
		stub: r.Stub,
		addrs: func(ctx context.Context, name string) (string, []netip.Addr, error) {
			lk := r.lookup(ctx, name)
			return lk.FQDN, lk.Addrs, lk.Err
		},
		record: func(name string, qtype uint16, fqdn string, log []QueryLog, err error) {
			lk := Lookup{At: r.now(), Name: name, Type: qtype, FQDN: fqdn, Queries: log, Err: err}
			if err == nil {
				lk.Source = "dns"
			}
			r.record(lk)
		},
	})
}

// fromHosts looks host up in the hosts file (case-insensitively, a trailing
// dot ignored).
func (r *PodResolver) fromHosts(host string) ([]netip.Addr, string) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	var out []netip.Addr
	name := ""
	for _, e := range r.hosts {
		for _, n := range e.names {
			if strings.ToLower(n) == h {
				out = append(out, e.ip)
				if name == "" {
					name = n
				}
				break
			}
		}
	}
	return out, name
}

func (r *PodResolver) dnsError(host string, err error, log []QueryLog) error {
	de := &net.DNSError{Name: host, UnwrapErr: err}
	if len(r.Conf.Nameservers) > 0 {
		de.Server = nameserverAddr(r.Conf.Nameservers[0])
	}
	var le *LookupError
	if !errors.As(err, &le) {
		de.Err = err.Error()
		return de
	}
	switch le.Kind {
	case HostNotFound, NoData:
		de.Err, de.IsNotFound = "no such host", true
	case TryAgain:
		de.Err, de.IsTemporary = "server misbehaving", true
		if n := len(log); n > 0 && log[n-1].Err != nil {
			var ne net.Error
			if errors.As(log[n-1].Err, &ne) && ne.Timeout() {
				de.Err, de.IsTimeout = "i/o timeout", true
			}
		}
	default:
		de.Err = "server misbehaving"
	}
	return de
}

func (r *PodResolver) record(lk Lookup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups.add(lk)
}

// Lookups returns the lookups so far, oldest first.
func (r *PodResolver) Lookups() []Lookup {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups.list()
}

// Queries returns every DNS query the pod's stub sent, oldest first.
func (r *PodResolver) Queries() []QueryLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []QueryLog
	for _, lk := range r.lookups.list() {
		out = append(out, lk.Queries...)
	}
	return out
}

// Reset forgets the lookups so far.
func (r *PodResolver) Reset() {
	r.mu.Lock()
	r.lookups.reset()
	r.mu.Unlock()
}

// podHosts is the /etc/hosts the kubelet writes for a pod (pkg/kubelet
// managedHostsFileContent): localhost entries, then the pod's IPs with its
// FQDN (hostname.subdomain.ns.svc.domain when it has a subdomain) and
// hostname. hostNetwork pods get only the localhost entries (the kubelet
// copies the node's file, which here has nothing else).
func podHosts(obj *corev1.Pod, ips []netip.Addr, hostNetwork bool, domain string) []hostsEntry {
	var out []hostsEntry
	for _, l := range []string{
		"127.0.0.1\tlocalhost",
		"::1\tlocalhost ip6-localhost ip6-loopback",
		"fe00::0\tip6-localnet",
		"fe00::0\tip6-mcastprefix",
		"fe00::1\tip6-allnodes",
		"fe00::2\tip6-allrouters",
	} {
		f := strings.Fields(l)
		out = append(out, hostsEntry{ip: netip.MustParseAddr(f[0]), names: f[1:], line: l})
	}
	if hostNetwork {
		return out
	}
	hostname := obj.Spec.Hostname
	if hostname == "" {
		hostname = obj.Name
	}
	if len(hostname) > 63 {
		hostname = strings.TrimRight(hostname[:63], "-.")
	}
	names := []string{hostname}
	if obj.Spec.Subdomain != "" && domain != "" {
		names = []string{fmt.Sprintf("%s.%s.%s.svc.%s", hostname, obj.Spec.Subdomain, obj.Namespace, domain), hostname}
	}
	for _, ip := range ips {
		out = append(out, hostsEntry{ip: ip, names: names, line: ip.String() + "\t" + strings.Join(names, "\t")})
	}
	return out
}
