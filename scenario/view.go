package scenario

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// ClusterView is a scenario's cluster as a picture needs it (`clusterlab ui`'s map):
// nodes, pods with their labels, Services with every address they answer on and the
// pods behind them, external hosts, and the scenario's steps.
type ClusterView struct {
	Name        string `json:"name,omitempty"`
	File        string `json:"file,omitempty"`
	Description string `json:"description,omitempty"`
	// Mode is the kube-proxy mode the cluster runs; Modes every mode this build has.
	Mode     string         `json:"mode"`
	Modes    []string       `json:"modes"`
	Nodes    []NodeInfo     `json:"nodes"`
	Pods     []PodView      `json:"pods"`
	Services []ServiceView  `json:"services"`
	External []ExternalView `json:"external_hosts"`
	Steps    []StepView     `json:"steps"`
	// AfterStep is how many of the steps had run when the view was taken.
	AfterStep int `json:"after_step"`
}

// PodView is a pod on the map.
type PodView struct {
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	Node        string            `json:"node"`
	IP          string            `json:"ip"`
	Labels      map[string]string `json:"labels,omitempty"`
	HostNetwork bool              `json:"host_network,omitempty"`
	Phase       string            `json:"phase,omitempty"`
	Terminating bool              `json:"terminating,omitempty"`
}

// ServiceView is a Service on the map.
type ServiceView struct {
	Namespace       string            `json:"namespace"`
	Name            string            `json:"name"`
	Type            string            `json:"type"`
	ClusterIP       string            `json:"cluster_ip,omitempty"`
	ExternalName    string            `json:"external_name,omitempty"`
	ExternalIPs     []string          `json:"external_ips,omitempty"`
	LoadBalancerIPs []string          `json:"load_balancer_ips,omitempty"`
	Selector        map[string]string `json:"selector,omitempty"`
	Ports           []ServicePortView `json:"ports"`
	// Backends are the pods (NS/NAME) in the Service's EndpointSlices, sorted; Endpoints
	// the endpoints as `check: endpoints` lists them ("10.244.1.3 default/web-0 (ready,
	// serving)").
	Backends  []string `json:"backends"`
	Endpoints []string `json:"endpoints"`
}

// ServicePortView is one port of a Service.
type ServicePortView struct {
	Name       string `json:"name,omitempty"`
	Port       int32  `json:"port"`
	Protocol   string `json:"protocol"`
	TargetPort string `json:"target_port"`
	NodePort   int32  `json:"node_port,omitempty"`
}

// ExternalView is an external host.
type ExternalView struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
}

// StepView names one step of the scenario.
type StepView struct {
	Index  int    `json:"index"` // 1-based
	Title  string `json:"title"`
	Action string `json:"action"`
	Line   int    `json:"line,omitempty"`
}

// StepState is one step's result and the cluster's state after it (a timeline).
type StepState struct {
	Result StepResult `json:"result"`
	// Endpoints is Service (NS/NAME) → its endpoints, as ServiceView.Endpoints.
	Endpoints map[string][]string `json:"endpoints"`
	// Conntrack is node → its conntrack entries (`conntrack -L` lines), at most
	// MaxStateLines a node.
	Conntrack map[string][]string `json:"conntrack"`
	// ConntrackTotal is node → how many entries it has.
	ConntrackTotal map[string]int `json:"conntrack_total"`
	// IPVS is node → its IPVS connection table (`ipvsadm -Lnc` rows: protocol, time
	// left, state, client, virtual, destination; templates too), at most MaxStateLines a
	// node, in the IPVS mode only; IPVSTotal how many it has.
	IPVS      map[string][]string `json:"ipvs,omitempty"`
	IPVSTotal map[string]int      `json:"ipvs_total,omitempty"`
	Time      string              `json:"time"`
}

// MaxStateLines is how many conntrack entries a StepState lists per node.
const MaxStateLines = 50

// Session is a scenario's cluster kept running so that its steps can be run one at a
// time and the cluster looked at between them. It is not safe for concurrent use.
type Session struct {
	r    *runner
	next int
}

// Open builds the scenario's cluster (its manifests applied, every proxy synced) under
// mode ("" keeps the scenario's), ready to run its steps one by one.
func Open(s *Scenario, mode string) (*Session, error) {
	p, err := s.prepare(mode)
	if err != nil {
		return nil, err
	}
	r, err := p.start()
	if err != nil {
		return nil, err
	}
	return &Session{r: r}, nil
}

// Close stops the cluster.
func (ss *Session) Close() { ss.r.close() }

// Done says whether every step has run.
func (ss *Session) Done() bool { return ss.next >= len(ss.r.s.Steps) }

// Next is the 0-based index of the next step to run.
func (ss *Session) Next() int { return ss.next }

// Step runs the next step and returns its result and the state after it.
func (ss *Session) Step(ctx context.Context) (StepState, error) {
	if ss.Done() {
		return StepState{}, fmt.Errorf("every one of the %d steps has run", len(ss.r.s.Steps))
	}
	ss.r.runStep(ctx, ss.next)
	ss.next++
	st := StepState{Result: ss.r.rep.Steps[len(ss.r.rep.Steps)-1], Endpoints: map[string][]string{},
		Conntrack: map[string][]string{}, ConntrackTotal: map[string]int{}, Time: fmtElapsed(ss.r.elapsed())}
	for _, svc := range ss.View().Services {
		st.Endpoints[svc.Namespace+"/"+svc.Name] = svc.Endpoints
	}
	for _, n := range ss.r.c.Nodes() {
		es := n.Conntrack().Entries()
		st.ConntrackTotal[n.Name()] = len(es)
		lines := []string{}
		for i := range es {
			if i == MaxStateLines {
				break
			}
			lines = append(lines, es[i].String())
		}
		st.Conntrack[n.Name()] = lines
		if conns, ok := kubeproxy.IPVSConnections(n); ok {
			if st.IPVS == nil {
				st.IPVS, st.IPVSTotal = map[string][]string{}, map[string]int{}
			}
			st.IPVSTotal[n.Name()] = len(conns)
			rows := []string{}
			for i, c := range conns {
				if i == MaxStateLines {
					break
				}
				left := c.Expires.Round(time.Second)
				rows = append(rows, fmt.Sprintf("%-4s %02d:%02d  %-11s %s  %s  %s", c.Protocol, int(left.Minutes()), int(left.Seconds())%60, c.State, c.Client, c.Virtual, c.Dest))
			}
			st.IPVS[n.Name()] = rows
		}
	}
	return st, nil
}

// View returns the cluster as it is now.
func (ss *Session) View() *ClusterView {
	r := ss.r
	v := &ClusterView{Name: r.s.Name, File: r.s.File, Description: strings.TrimSpace(r.s.Description), Mode: string(r.p.mode),
		Modes: kubeproxy.ModeNames(), AfterStep: ss.next, Pods: []PodView{}, Services: []ServiceView{}, External: []ExternalView{}, Steps: []StepView{}}
	v.Nodes = r.newReport().Nodes
	for _, pod := range r.c.Store().ListPods() {
		v.Pods = append(v.Pods, PodView{Namespace: pod.Namespace, Name: pod.Name, Node: pod.Spec.NodeName, IP: pod.Status.PodIP,
			Labels: pod.Labels, HostNetwork: pod.Spec.HostNetwork, Phase: string(pod.Status.Phase), Terminating: pod.DeletionTimestamp != nil})
	}
	for _, svc := range r.c.Store().ListServices() {
		sv := ServiceView{Namespace: svc.Namespace, Name: svc.Name, Type: string(svc.Spec.Type), ClusterIP: svc.Spec.ClusterIP,
			ExternalIPs: svc.Spec.ExternalIPs, Selector: svc.Spec.Selector, Ports: []ServicePortView{}, Backends: []string{}, Endpoints: []string{}}
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			sv.ClusterIP, sv.ExternalName = "", svc.Spec.ExternalName
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				sv.LoadBalancerIPs = append(sv.LoadBalancerIPs, in.IP)
			}
		}
		for _, sp := range svc.Spec.Ports {
			sv.Ports = append(sv.Ports, ServicePortView{Name: sp.Name, Port: sp.Port, Protocol: string(sp.Protocol), TargetPort: sp.TargetPort.String(), NodePort: sp.NodePort})
		}
		seen := map[string]bool{}
		for _, sl := range r.c.Store().EndpointSlicesFor(svc.Namespace, svc.Name) {
			for _, ep := range sl.Endpoints {
				if len(ep.Addresses) == 0 || seen[ep.Addresses[0]] {
					continue
				}
				seen[ep.Addresses[0]] = true
				ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
				sv.Endpoints = append(sv.Endpoints, endpointLine(ep, ready))
				if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
					sv.Backends = append(sv.Backends, ep.TargetRef.Namespace+"/"+ep.TargetRef.Name)
				}
			}
		}
		sort.Strings(sv.Backends)
		sort.Strings(sv.Endpoints)
		v.Services = append(v.Services, sv)
	}
	for _, h := range r.s.Cluster.ExternalHosts {
		ev := ExternalView{Name: h.Name}
		if eh := r.c.ExternalHost(h.Name); eh != nil {
			ev.IP = eh.IP().String()
		}
		v.External = append(v.External, ev)
	}
	for i := range r.s.Steps {
		st := &r.s.Steps[i]
		v.Steps = append(v.Steps, StepView{Index: i + 1, Title: st.Title(), Action: st.Action(), Line: r.s.lineOf(fmt.Sprintf("steps[%d]", i))})
	}
	return v
}

// TraceFlows traces the live packets of the session's cluster that match f (see
// netsim.Network.TraceFlows) while its steps run.
func (ss *Session) TraceFlows(f netsim.FlowFilter) *netsim.FlowTracer { return ss.r.c.TraceFlows(f) }

// LiveTraffic makes the connect steps that do not name their via use real sockets
// (via: netstack) instead of probes, so that TraceFlows sees their packets; the
// results are those of real connections (see the via field).
func (ss *Session) LiveTraffic() { ss.r.liveTraffic = true }
