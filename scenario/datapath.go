package scenario

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// Datapath is another data path for a run's traffic than the simulation's: the real
// Linux kernel in network namespaces (package kernelrun). The simulated cluster stays
// the control plane (API server, controllers, kubelets, each node's kube-proxy
// configuration and the clock); after it is built and after every step the data path
// is brought to its state (Sync: pods started and stopped, each node's rules
// re-programmed), and the steps' traffic, conntrack checks and waits go to the data
// path instead of the simulation. Steps the data path cannot carry out are refused or
// adapted with a message in the step's result (Verdict), never skipped in silence.
type Datapath interface {
	// Name names the data path in messages ("kernel").
	Name() string
	// Start builds the data path for the started cluster; opts are the run's.
	Start(ctx context.Context, c *cluster.Cluster, info DatapathInfo) error
	// Verdict says how the data path takes a step, before it runs.
	Verdict(st *Step) DatapathVerdict
	// Sync brings the data path to the cluster's state (after the cluster started and
	// after each step that was carried out).
	Sync(ctx context.Context, c *cluster.Cluster) error
	// Dial makes one connection (connect) or one datagram and its answer (send).
	Dial(ctx context.Context, d DatapathDial) Dialed
	// Conntrack lists a node's connection tracking entries.
	Conntrack(ctx context.Context, node string) ([]netsim.Conn, error)
	// Advance is an advance step of d (or a step's at) on the data path: a short one
	// is waited for for real; it returns a note for the step's details.
	Advance(ctx context.Context, d time.Duration) string
	// DNSDialer returns how a pod's resolver reaches its nameserver on the data path
	// (a dial from the pod), or nil when the data path has no DNS of its own: the
	// simulation's answers are used then.
	DNSDialer(from string) func(ctx context.Context, network, addr string) (net.Conn, error)
	// State is the data path's state for the report (each node's ruleset and
	// conntrack table), by node.
	State(ctx context.Context) []NodeState
	// Close removes everything the data path made.
	Close() error
}

// DatapathInfo is what a data path needs of the run besides the cluster (whose nodes
// carry their kernel settings: cluster.Node.Settings).
type DatapathInfo struct {
	// Mode and Version are kube-proxy's mode and version on every node; Semantics
	// the mode's.
	Mode    kubeproxy.Mode
	Version string
	// Scheduler is the IPVS scheduler ("" for the default).
	Scheduler string
	// ProxyNode adjusts a node's kube-proxy flags (version, feature gates, the
	// scenario's cluster.proxy flags) after kubeproxy.NodeConfigFor; nil for none.
	ProxyNode func(*proxy.NodeConfig)
	// File is the scenario's file, for messages.
	File string
	// ExternalHosts are the external hosts' addresses by name.
	ExternalHosts map[string]netip.Addr
	// SyncDelays are the nodes' kube-proxy sync delays that are not zero.
	SyncDelays map[string]time.Duration
}

// DatapathVerdict is how a data path takes a step.
type DatapathVerdict struct {
	// Refuse: the step is not carried out, on the data path or in the simulation
	// (its result has status "refused" and the message).
	Refuse bool
	// Message says why it is refused, or how it is adapted ("" when the step runs as
	// it does in the simulation).
	Message string
}

// DatapathDial is one attempt of a connect or send step.
type DatapathDial struct {
	// From is the step's source (pod:NS/NAME, node:NAME, external:NAME); Client the
	// address it sends from.
	From   string
	Client netip.Addr
	// Proto is tcp or udp; Connect says a connect step (a send step otherwise).
	Proto   string
	Connect bool
	SrcPort uint16
	Dst     netip.AddrPort
}

// NodeState is a node's data path state after a step.
type NodeState struct {
	Node string `json:"node"`
	// Rules is the node's ruleset (iptables-save, nft list ruleset, ipvsadm -Ln).
	Rules string `json:"rules"`
	// Conntrack is conntrack -L.
	Conntrack string `json:"conntrack"`
	// Counters are the kernel's nonzero packet counters (/proc/net/snmp and netstat)
	// of the node's namespace and of each of its pods', one line each ("node: ...",
	// "pod NS/NAME: ..."): where a datagram that got no answer was lost (no socket, a
	// full buffer, an IP discard). Only a back end that has them fills it.
	Counters string `json:"counters,omitempty"`
}

// datapathTraffic runs a connect or send step's attempts on the data path.
// The attempts are made one after the other (the order matters: round robin,
// affinity); once two in a row got no answer, the rest go datapathParallel at a time, so
// that a step of many attempts at a destination that drops them does not take a
// timeout each.
func (r *runner) datapathAttempts(ctx context.Context, tp *trafficPlan) []attempt {
	dial := func() attempt {
		d := r.dp.Dial(ctx, DatapathDial{From: tp.t.From, Client: tp.client, Proto: tp.protoName, Connect: tp.connect,
			SrcPort: uint16(tp.t.SrcPort), Dst: tp.dst})
		return attempt{result: d.Result, pod: d.Pod, node: d.Node, seen: d.Seen, reason: d.Reason}
	}
	atts := make([]attempt, 0, tp.count)
	drops := 0
	// A fixed source port cannot be bound twice at once: those go one by one.
	for len(atts) < tp.count && (drops < 2 || tp.t.SrcPort != 0) {
		a := dial()
		atts = append(atts, a)
		if a.result == netsim.ResultDropped {
			drops++
		} else {
			drops = 0
		}
	}
	rest := make([]attempt, tp.count-len(atts))
	var wg sync.WaitGroup
	sem := make(chan struct{}, datapathParallel)
	for i := range rest {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			rest[i] = dial()
			<-sem
		}()
	}
	wg.Wait()
	return append(atts, rest...)
}

// datapathParallel is how many attempts run at once after two went unanswered.
const datapathParallel = 8

// datapathRefused asks the data path how it takes a step: a refused step is recorded
// as such (true); otherwise it returns the message of an adapted step ("" for none).
func (r *runner) datapathRefused(st *Step, res *StepResult) (bool, string) {
	v := r.dp.Verdict(st)
	if !v.Refuse && (st.Connect != nil || st.Send != nil || st.DNS != nil) && len(r.c.NetworkPolicyIndex().Policies()) > 0 {
		// The simulation's NetworkPolicy handler is not programmed into a data path
		// (no CNI's rules there): traffic while policies exist would not be policed.
		v = DatapathVerdict{Refuse: true, Message: "NetworkPolicy: the API server holds NetworkPolicies, which only the simulation enforces (no CNI programs them here)"}
	}
	if v.Refuse {
		res.Status = "refused"
		res.Summary = fmt.Sprintf("refused on the %s: %s", r.dp.Name(), v.Message)
		r.rep.Refused++
		return true, ""
	}
	return false, v.Message
}

// startDatapath starts the data path on the built cluster and brings it to the
// cluster's state.
func (r *runner) startDatapath(ctx context.Context, dp Datapath) error {
	p := r.p
	info := DatapathInfo{Mode: p.mode, Version: p.version, Scheduler: p.info.Scheduler(p.proxyOpts), ProxyNode: p.proxyOpts.Node, File: r.s.File,
		ExternalHosts: map[string]netip.Addr{}, SyncDelays: map[string]time.Duration{}}
	for _, h := range r.s.Cluster.ExternalHosts {
		if eh := r.c.ExternalHost(h.Name); eh != nil {
			info.ExternalHosts[h.Name] = eh.IP()
		}
	}
	for name, d := range p.delays {
		if d > 0 {
			info.SyncDelays[name] = d
		}
	}
	if err := dp.Start(ctx, r.c, info); err != nil {
		return fmt.Errorf("%s: %w", dp.Name(), err)
	}
	if err := dp.Sync(ctx, r.c); err != nil {
		return fmt.Errorf("%s: %w", dp.Name(), err)
	}
	r.dp = dp
	r.rep.Backend = dp.Name()
	if r.res != nil && r.res.mode == "kube-dns" {
		r.res.dpDial = dp.DNSDialer
	}
	return nil
}

// datapathAfter brings the data path to the cluster's state after a step, adds the
// step's adaptation note, and keeps the data path's state when asked.
func (r *runner) datapathAfter(ctx context.Context, st *Step, res *StepResult, note string, err error) error {
	if note != "" {
		res.Details = append(res.Details, "on the "+r.dp.Name()+": "+note)
	}
	if serr := r.dp.Sync(ctx, r.c); serr != nil {
		serr = fmt.Errorf("%s: bringing it to the cluster's state: %w", r.dp.Name(), serr)
		if err == nil {
			return serr
		}
		return fmt.Errorf("%w; %w", err, serr)
	}
	if r.keepState && (st.Connect != nil || st.Send != nil || st.Check != nil) {
		res.DatapathState = r.dp.State(ctx)
	}
	return err
}

// datapathConntrack lists the conntrack entries of a node (or "all") on the data
// path that pass f, with a line for each of the first ten.
func (r *runner) datapathConntrack(node string, f netsim.CtFilter) ([]netsim.Conn, []string, error) {
	var entries []netsim.Conn
	var lines []string
	var err error
	r.forNodes(node, func(n *cluster.Node) {
		if err != nil {
			return
		}
		var all []netsim.Conn
		if all, err = r.dp.Conntrack(context.Background(), n.Name()); err != nil {
			return
		}
		for i := range all {
			if f.Match(&all[i]) {
				entries = append(entries, all[i])
				if len(lines) < 10 {
					lines = append(lines, n.Name()+": "+all[i].String())
				}
			}
		}
	})
	return entries, lines, err
}
