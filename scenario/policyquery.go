package scenario

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netpol"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
)

// The engine of `clusterlab policy explain` and `clusterlab policy matrix`: both build
// the cluster of a set of manifest files (as a scenario with those manifests and no
// steps: three nodes, the pods placed by the scheduler, kube-proxy in the given mode,
// DNS answered in-process so that no DNS pods join the matrix)
// and answer by probing through the simulated datapath, so the answer is the
// simulation's: kube-proxy's DNAT (every backend a Service's rules can pick, each with
// its probability) and the NetworkPolicy handler on the nodes, with the nodes'
// NetworkPolicy flavour.

// PolicyQuery is what the policy commands are asked about.
type PolicyQuery struct {
	// Manifests are the manifest files (YAML or JSON; kubectl get -o yaml output too).
	Manifests []string
	// Mode is the kube-proxy mode ("" the default).
	Mode string
	// Flavour is the nodes' NetworkPolicy flavour ("" calico).
	Flavour string
}

// policyScenario is the scenario of the query's manifests.
func (q PolicyQuery) policyScenario() (*Scenario, error) {
	if len(q.Manifests) == 0 {
		return nil, &Error{Msg: "no manifests: give --manifests FILE"}
	}
	if err := cluster.CheckPolicyFlavour(q.Flavour); err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	var b strings.Builder
	// No DNS pods: the matrix is of the manifests' pods (names resolve in-process).
	b.WriteString("name: clusterlab policy\ncluster:\n  dns: direct\n")
	if q.Flavour != "" {
		fmt.Fprintf(&b, "  node_settings: {network_policy: %s}\n", q.Flavour)
	}
	b.WriteString("manifests:\n")
	for _, m := range q.Manifests {
		abs, err := filepath.Abs(m)
		if err != nil {
			return nil, &Error{File: m, Msg: err.Error()}
		}
		fmt.Fprintf(&b, "  - path: %s\n", strconv.Quote(abs))
	}
	s, err := Parse("", []byte(b.String()))
	if err != nil && IsInputError(err) {
		// The errors are the files' (file:line): not the generated scenario's lines.
		return nil, &Error{Msg: generatedPrefix.ReplaceAllString(err.Error(), "")}
	}
	return s, err
}

// generatedPrefix is where an error of policyScenario's generated scenario names it.
var generatedPrefix = regexp.MustCompile(`(?m)^line \d+: manifests\[\d+\](\.path)?: `)

// start builds and starts the query's cluster.
func (q PolicyQuery) start() (*Live, error) {
	s, err := q.policyScenario()
	if err != nil {
		return nil, err
	}
	return Start(s, Options{Mode: q.Mode})
}

// PolicyRef is a NetworkPolicy that decided, in a policy command's answer: for an
// allowed connection the policy whose rule allowed it (Rule is that rule, "rule N:
// TEXT", Index its index); for a denied one each policy isolating the pod (Rule empty:
// no rule of theirs allowed it).
type PolicyRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Direction string `json:"direction"`
	Rule      string `json:"rule"`
	Index     *int   `json:"index,omitempty"`
	// Pod is the pod the policy is for (NS/NAME); Allowed what it decided.
	Pod     string `json:"pod"`
	Allowed bool   `json:"allowed"`
}

// policyRefs are the decisive policies of a branch's decisions.
func policyRefs(ds []*netpol.Decision) []PolicyRef {
	var out []PolicyRef
	for _, d := range ds {
		if !d.Isolated {
			continue
		}
		if d.Allowed && d.Rule != nil {
			i := d.Rule.Index
			out = append(out, PolicyRef{Namespace: d.Rule.Policy.Namespace, Name: d.Rule.Policy.Name, Direction: d.Direction.String(),
				Rule: fmt.Sprintf("rule %d: %s", d.Rule.Index, d.Rule.Text), Index: &i, Pod: d.Pod, Allowed: true})
			continue
		}
		for _, r := range d.Selecting {
			out = append(out, PolicyRef{Namespace: r.Namespace, Name: r.Name, Direction: d.Direction.String(), Pod: d.Pod})
		}
	}
	return out
}

// PolicyBackend is one way a connection can go (one backend of a Service) and its fate.
type PolicyBackend struct {
	// Pod is the backend (NS/NAME) or "" when the destination is no pod; Addr its
	// address and port after DNAT.
	Pod         string  `json:"pod,omitempty"`
	Addr        string  `json:"addr,omitempty"`
	Probability float64 `json:"probability"`
	Allowed     bool    `json:"allowed"`
	// Result is the probe's (delivered, dropped, refused); Reason why it did not arrive.
	Result   string      `json:"result"`
	Reason   string      `json:"reason"`
	Policies []PolicyRef `json:"policies"`
}

// PolicyExplanation answers `policy explain`.
type PolicyExplanation struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Protocol string `json:"protocol"`
	Mode     string `json:"mode"`
	// Allowed is true when the connection reaches its destination whichever way it
	// goes: for a Service, when every backend kube-proxy can pick is reachable (a
	// connection that some backends refuse by policy fails some of the time, which is
	// not "allowed"); Backends gives each.
	Allowed  bool            `json:"allowed"`
	Reason   string          `json:"reason"`
	Policies []PolicyRef     `json:"policies"`
	Backends []PolicyBackend `json:"backends"`
}

// ExplainPolicy answers whether from reaches to: from is pod:NS/NAME or ip:ADDR (a
// node's address is that node; another address an external host); to is
// service:NS/NAME:PORT, pod:NS/NAME:PORT or ip:ADDR:PORT; proto tcp (default), udp or
// sctp.
func ExplainPolicy(q PolicyQuery, from, to, proto string) (*PolicyExplanation, error) {
	pr, err := policyProtoNum(proto)
	if err != nil {
		return nil, err
	}
	if err := checkPolicyFrom(from); err != nil {
		return nil, err
	}
	if _, _, err := splitPolicyTo(to); err != nil {
		return nil, err
	}
	live, err := q.start()
	if err != nil {
		return nil, err
	}
	defer live.Close()
	c := live.Cluster()
	place, err := policyPlace(live, from)
	if err != nil {
		return nil, err
	}
	dst, err := policyDst(c, to, pr)
	if err != nil {
		return nil, err
	}
	res, err := c.Probe(netsim.Probe{From: place, Proto: pr, Dst: dst, Mode: netsim.ProbePacket, AllBranches: true, Trace: true})
	if err != nil {
		return nil, fmt.Errorf("probe from %s to %s: %w", place, dst, err)
	}
	ex := &PolicyExplanation{From: from, To: to, Protocol: strings.ToLower(netsim.ProtoName(pr)), Mode: string(live.r.p.mode), Allowed: len(res) > 0, Policies: []PolicyRef{}}
	ix := c.NetworkPolicyIndex()
	seen := map[string]bool{}
	for _, r := range res {
		b := policyBranch(ix, r)
		ex.Backends = append(ex.Backends, b)
		if !b.Allowed {
			ex.Allowed = false
		}
		for _, p := range b.Policies {
			k := fmt.Sprintf("%+v", p)
			if !seen[k] {
				seen[k] = true
				ex.Policies = append(ex.Policies, p)
			}
		}
	}
	ex.Reason = explainReason(ex)
	return ex, nil
}

// policyBranch is one probe outcome as a backend's fate.
func policyBranch(ix *netpol.Index, r netsim.ProbeResult) PolicyBackend {
	b := PolicyBackend{Probability: r.Probability, Result: r.Result, Reason: r.Reason, Pod: r.Pod}
	if r.Addr.IsValid() {
		b.Addr = r.Addr.String()
	}
	ds := policyDecisions(r.Trace)
	b.Policies = policyRefs(ds)
	if b.Policies == nil {
		b.Policies = []PolicyRef{}
	}
	b.Allowed = r.Result == netsim.ResultDelivered
	if b.Pod == "" || b.Addr == "" {
		// Dropped on the way: the packet as the last policy decision saw it (after DNAT).
		for i := len(r.Trace.Steps) - 1; i >= 0; i-- {
			s := r.Trace.Steps[i]
			if s.Handler != cluster.PolicyHandlerName || s.Packet == "" {
				continue
			}
			if ap, ok := packetDst(s.Packet); ok {
				b.Addr = ap.String()
				if p := ix.PodByIP(ap.Addr()); p != nil {
					b.Pod = p.Key()
				}
			}
			break
		}
	}
	if b.Allowed {
		var parts []string
		for _, d := range ds {
			parts = append(parts, d.String())
		}
		if len(parts) == 0 {
			b.Reason = "no NetworkPolicy applies"
		} else {
			b.Reason = strings.Join(parts, "; ")
		}
	}
	return b
}

// packetDst reads the destination of a packet's one-line text ("tcp A:P -> B:Q [S]").
func packetDst(s string) (netip.AddrPort, bool) {
	_, after, ok := strings.Cut(s, " -> ")
	if !ok {
		return netip.AddrPort{}, false
	}
	f := strings.Fields(after)
	if len(f) == 0 {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(f[0])
	return ap, err == nil
}

func explainReason(ex *PolicyExplanation) string {
	if len(ex.Backends) == 0 {
		return "the probe had no outcome"
	}
	if len(ex.Backends) == 1 {
		b := ex.Backends[0]
		if b.Allowed {
			return "allowed: " + b.Reason
		}
		return "denied: " + b.Reason
	}
	var denied []string
	for _, b := range ex.Backends {
		if !b.Allowed {
			denied = append(denied, fmt.Sprintf("%s (%s)", orAddr(b), b.Reason))
		}
	}
	if len(denied) == 0 {
		return fmt.Sprintf("allowed to every one of the %d backends", len(ex.Backends))
	}
	return fmt.Sprintf("denied to %d of the %d backends: %s", len(denied), len(ex.Backends), strings.Join(denied, "; "))
}

func orAddr(b PolicyBackend) string {
	if b.Pod != "" {
		return b.Pod
	}
	return b.Addr
}

func checkPolicyFrom(from string) error {
	kind, rest, _ := strings.Cut(from, ":")
	switch kind {
	case "pod":
		if ns, n, ok := strings.Cut(rest, "/"); ok && ns != "" && n != "" {
			return nil
		}
	case "ip":
		if _, err := netip.ParseAddr(rest); err == nil {
			return nil
		}
	}
	return &Error{Msg: fmt.Sprintf("--from %q: want pod:NS/NAME or ip:ADDR", from)}
}

func splitPolicyTo(to string) (kind, rest string, err error) {
	kind, rest, _ = strings.Cut(to, ":")
	bad := &Error{Msg: fmt.Sprintf("--to %q: want service:NS/NAME:PORT, pod:NS/NAME:PORT or ip:ADDR:PORT", to)}
	switch kind {
	case "service", "pod":
		key, port, ok := strings.Cut(rest, ":")
		ns, n, ok2 := strings.Cut(key, "/")
		if !ok || !ok2 || ns == "" || n == "" || port == "" {
			return "", "", bad
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			if kind == "pod" {
				return "", "", bad
			}
		}
	case "ip":
		if _, err := netip.ParseAddrPort(rest); err != nil {
			return "", "", bad
		}
	default:
		return "", "", bad
	}
	return kind, rest, nil
}

// policyPlace is a probe's From for the query's --from.
func policyPlace(l *Live, from string) (string, error) {
	kind, rest, _ := strings.Cut(from, ":")
	c := l.Cluster()
	if kind == "pod" {
		ns, n, _ := strings.Cut(rest, "/")
		if c.Pod(ns, n) == nil {
			return "", &Error{Msg: fmt.Sprintf("--from %s: no running pod %s/%s in the manifests", from, ns, n)}
		}
		return from, nil
	}
	a, _ := netip.ParseAddr(rest)
	for _, n := range c.Nodes() {
		if slices.Contains(n.IPs(), a) {
			return "node:" + n.Name(), nil
		}
	}
	if p := c.NetworkPolicyIndex().PodByIP(a); p != nil {
		return "pod:" + p.Key(), nil
	}
	for _, p := range append(append([]netip.Prefix{}, c.Config().ClusterCIDRs...), c.Config().ServiceCIDRs...) {
		if p.Contains(a) {
			return "", &Error{Msg: fmt.Sprintf("--from %s: no pod has this address of the cluster's networks", from)}
		}
	}
	via := c.Nodes()[0]
	var routes []netsim.ExternalRoute
	for _, p := range c.Config().ServiceCIDRs {
		routes = append(routes, netsim.ExternalRoute{Prefix: p, Via: via.Node})
	}
	if _, err := c.AddExternalHostWith(netsim.ExternalHostConfig{Name: "policy-client", Addrs: []netip.Addr{a}, Routes: routes}); err != nil {
		return "", fmt.Errorf("--from %s: %w", from, err)
	}
	return "external:policy-client", nil
}

// policyProtoNum parses --proto.
func policyProtoNum(proto string) (uint8, error) {
	switch strings.ToLower(proto) {
	case "", "tcp":
		return netfilter.ProtoTCP, nil
	case "udp":
		return netfilter.ProtoUDP, nil
	case "sctp":
		return netfilter.ProtoSCTP, nil
	}
	return 0, &Error{Msg: fmt.Sprintf("--proto %q: want tcp, udp or sctp", proto)}
}

// policyDst resolves --to in the running cluster.
func policyDst(c *cluster.Cluster, to string, proto uint8) (netip.AddrPort, error) {
	kind, rest, _ := strings.Cut(to, ":")
	switch kind {
	case "ip":
		return netip.ParseAddrPort(rest)
	case "pod":
		key, port, _ := strings.Cut(rest, ":")
		ns, n, _ := strings.Cut(key, "/")
		p := c.Pod(ns, n)
		if p == nil {
			return netip.AddrPort{}, &Error{Msg: fmt.Sprintf("--to %s: no running pod %s in the manifests", to, key)}
		}
		pn, _ := strconv.ParseUint(port, 10, 16)
		return netip.AddrPortFrom(p.IP(), uint16(pn)), nil
	}
	key, port, _ := strings.Cut(rest, ":")
	ns, n, _ := strings.Cut(key, "/")
	svc, ok := c.Store().GetService(ns, n)
	if !ok {
		return netip.AddrPort{}, &Error{Msg: fmt.Sprintf("--to %s: no Service %s in the manifests", to, key)}
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return netip.AddrPort{}, &Error{Msg: fmt.Sprintf("--to %s: Service %s has no clusterIP (%s)", to, key, svc.Spec.ClusterIP)}
	}
	want := policyProto(proto)
	var ports []string
	for _, sp := range svc.Spec.Ports {
		spProto := sp.Protocol
		if spProto == "" {
			spProto = corev1.ProtocolTCP
		}
		if spProto == want && (strconv.Itoa(int(sp.Port)) == port || sp.Name == port) {
			return netip.AddrPortFrom(ip, uint16(sp.Port)), nil
		}
		ports = append(ports, fmt.Sprintf("%s/%d", spProto, sp.Port))
	}
	return netip.AddrPort{}, &Error{Msg: fmt.Sprintf("--to %s: Service %s has no %s port %s (it has %s)", to, key, want, port, strings.Join(ports, ", "))}
}

func policyProto(p uint8) corev1.Protocol {
	switch p {
	case netfilter.ProtoUDP:
		return corev1.ProtocolUDP
	case netfilter.ProtoSCTP:
		return corev1.ProtocolSCTP
	}
	return corev1.ProtocolTCP
}

// MatrixCell is one pod pair of a reachability matrix.
type MatrixCell struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Allowed  bool   `json:"allowed"`
	// Reason says why a denied cell is denied (the NetworkPolicy decision, or what
	// else stopped the packet).
	Reason string `json:"reason,omitempty"`
}

// PolicyMatrix is the reachability of every pod pair on one port: Cells row by row
// (from), each row in Pods' order (to).
type PolicyMatrix struct {
	Pods     []string
	Port     int
	Protocol string
	Cells    []MatrixCell
}

// Cell returns the cell from → to.
func (m *PolicyMatrix) Cell(from, to string) MatrixCell {
	i, j := slices.Index(m.Pods, from), slices.Index(m.Pods, to)
	return m.Cells[i*len(m.Pods)+j]
}

// Text renders the matrix as the upstream network-policy e2e tests print their truth
// tables (netpol.Matrix's String): a header of the destinations, a row per source, "."
// allowed, "X" denied, tab-separated.
func (m *PolicyMatrix) Text() string {
	nm := netpol.Matrix{Port: uint16(m.Port), Proto: corev1.Protocol(strings.ToUpper(m.Protocol)), Pods: m.Pods, Allowed: make([][]bool, len(m.Pods))}
	for i := range m.Pods {
		nm.Allowed[i] = make([]bool, len(m.Pods))
		for j := range m.Pods {
			nm.Allowed[i][j] = m.Cells[i*len(m.Pods)+j].Allowed
		}
	}
	return nm.String()
}

// PolicyMatrices computes the reachability matrix of every pod pair of the query's
// manifests on port, by sending a packet (a TCP SYN, a UDP or SCTP packet) from each
// pod to each pod's address through the datapath: allowed when it is delivered.
// With other set (a manifest file of NetworkPolicies), the second matrix is the same
// cluster's after its NetworkPolicies are replaced by other's (new connections
// only, as in a real cluster).
func PolicyMatrices(q PolicyQuery, port int, proto string, other string) (*PolicyMatrix, *PolicyMatrix, error) {
	pr, err := policyProtoNum(proto)
	if err != nil {
		return nil, nil, err
	}
	if port < 1 || port > 65535 {
		return nil, nil, &Error{Msg: fmt.Sprintf("--port %d: want 1-65535", port)}
	}
	var otherMs []service.Manifest
	if other != "" {
		if otherMs, err = service.LoadPaths(other); err != nil {
			return nil, nil, &Error{Msg: "--diff: " + err.Error()}
		}
	}
	live, err := q.start()
	if err != nil {
		return nil, nil, err
	}
	defer live.Close()
	c := live.Cluster()
	first := policyMatrix(c, uint16(port), pr)
	if other == "" {
		return first, nil, nil
	}
	for _, obj := range c.Store().List(service.KindNetworkPolicy) {
		key := service.ObjectKey(obj)
		ns, n, _ := strings.Cut(key, "/")
		if err := c.Store().Delete(service.KindNetworkPolicy, ns, n); err != nil {
			return nil, nil, err
		}
	}
	if err := c.Store().ApplyManifests(otherMs); err != nil {
		return nil, nil, &Error{Msg: "--diff: " + err.Error()}
	}
	c.SyncProxies()
	return first, policyMatrix(c, uint16(port), pr), nil
}

func policyMatrix(c *cluster.Cluster, port uint16, proto uint8) *PolicyMatrix {
	m := &PolicyMatrix{Port: int(port), Protocol: strings.ToLower(netsim.ProtoName(proto))}
	var pods []*netsim.Pod
	for _, p := range c.NetworkPolicyIndex().Pods() {
		if p.HostNetwork {
			continue
		}
		if np := c.Pod(p.Namespace, p.Name); np != nil {
			m.Pods = append(m.Pods, p.Key())
			pods = append(pods, np)
		}
	}
	for i := range pods {
		for j, to := range pods {
			cell := MatrixCell{From: m.Pods[i], To: m.Pods[j], Port: int(port), Protocol: m.Protocol}
			res, err := c.Probe(netsim.Probe{From: "pod:" + m.Pods[i], Proto: proto, Dst: netip.AddrPortFrom(to.IP(), port), Mode: netsim.ProbePacket})
			switch {
			case err != nil:
				cell.Reason = err.Error()
			case len(res) == 1 && res[0].Result == netsim.ResultDelivered:
				cell.Allowed = true
			case len(res) == 1:
				cell.Reason = res[0].Outcome.String()
			}
			m.Cells = append(m.Cells, cell)
		}
	}
	return m
}
