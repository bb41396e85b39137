package scenario

import (
	"fmt"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// Scenario is one scenario file: a cluster, the Kubernetes objects in it, and timed steps
// that act on it and check what happens. The YAML field names are the `yaml` tags; every
// field is optional except where a comment says otherwise.
type Scenario struct {
	// Name is a one-line title; Description says what the scenario shows.
	Name        string `yaml:"name,omitempty"`
	Description string `yaml:"description,omitempty"`
	// Cluster describes the nodes, networks, proxy mode and DNS.
	Cluster Cluster `yaml:"cluster,omitempty"`
	// Manifests are applied before the first step, all at once (Apply orders them by kind:
	// namespaces, nodes, services, endpoints, slices, pods). Deployments and ReplicaSets
	// are expanded into pods.
	// Their Services are checked when the file is loaded as the API server checks
	// them: defaulted and allocated in a scratch API server configured as the
	// cluster, then validated (so healthCheckNodePort and clusterIPs need not be
	// written, and a node port collision is an error at its line).
	Manifests []Manifest `yaml:"manifests,omitempty"`
	// Steps run in order.
	Steps []Step `yaml:"steps,omitempty"`
	// HostServices are real servers on this machine that pods reach at addresses of
	// the simulated network (see HostService).
	HostServices []HostService `yaml:"host_services,omitempty"`

	// File is the file the scenario was read from ("" when built in Go); manifest paths
	// are relative to its directory.
	File string `yaml:"-"`
	// Dir is the directory manifest paths are relative to (default: File's directory, or
	// the working directory).
	Dir string `yaml:"-"`

	src   []byte         // the file's text (for inline manifest positions)
	lines map[string]int // field path → line, from the loader
}

// Cluster describes the simulated cluster.
type Cluster struct {
	// Seed drives every random choice (iptables probabilities, IPVS, ports, pod name
	// suffixes). Default 1.
	Seed uint64 `yaml:"seed,omitempty"`
	// Nodes lists the nodes. Default: three nodes node-a, node-b, node-c.
	Nodes []Node `yaml:"nodes,omitempty"`
	// NodeCIDR is the network node IPs come from (default 172.18.0.0/16; node i gets .2+i).
	// For a dual-stack cluster, two CIDRs of different families separated by a comma
	// (the first family primary), here and in PodCIDR and ServiceCIDR alike.
	NodeCIDR string `yaml:"node_cidr,omitempty"`
	// PodCIDR is the pod network (--cluster-cidr; default 10.244.0.0/16; node i gets the
	// i-th /24, and the i-th /64 of an IPv6 range).
	PodCIDR string `yaml:"pod_cidr,omitempty"`
	// ServiceCIDR is the service cluster IP range (default 10.96.0.0/12).
	ServiceCIDR string `yaml:"service_cidr,omitempty"`
	// ExternalCIDR is the network of external hosts (default 203.0.113.0/24).
	ExternalCIDR string `yaml:"external_cidr,omitempty"`
	// LoadBalancerCIDR is the pool load-balancer IPs come from (default 198.51.100.0/24).
	LoadBalancerCIDR string `yaml:"load_balancer_cidr,omitempty"`
	// LoadBalancerMode is how the cloud load balancer forwards: "nodeport" (default: to a
	// node's IP and the node port, keeping the client's address) or "vip" (the packet
	// unchanged to a node, which handles the load-balancer IP itself).
	LoadBalancerMode string `yaml:"load_balancer_mode,omitempty"`
	// PodIPAllocation is how a node gives pods addresses: "round-robin" (default, as
	// host-local IPAM: each new pod gets the next free address after the last one given,
	// so a deleted pod's address is not reused at once) or "lowest-free" (the lowest
	// free address: a new pod gets the address of the pod just deleted).
	PodIPAllocation string `yaml:"pod_ip_allocation,omitempty"`
	// Endpoints says what becomes of the EndpointSlices (and Endpoints) the manifests
	// give for Services with a selector, as a `kubectl get -A -o yaml` dump has them:
	// "keep" (the default) keeps the cluster's state they describe: an endpoint whose
	// Pod is not in the manifests gets a stand-in pod (its name from the targetRef, at
	// the endpoint's address on its nodeName, labelled with the Service's selector,
	// serving the slice's ports, ready as the endpoint says), from which the
	// EndpointSlice controller derives the same endpoints; "derive" ignores them and
	// the controller derives the endpoints from the Pods in the manifests only. The
	// report's notes say what was stood in or ignored.
	Endpoints string `yaml:"endpoints,omitempty"`
	// NodePortRange is the node port range, "30000-32767" by default.
	NodePortRange string `yaml:"node_port_range,omitempty"`
	// Proxy is kube-proxy's configuration on every node.
	Proxy Proxy `yaml:"proxy,omitempty"`
	// NodeSettings are kernel settings for every node (each node's own settings override
	// them field by field).
	NodeSettings *NodeSettings `yaml:"node_settings,omitempty"`
	// DNS is how names are resolved: "kube-dns" (a cluster DNS service inside the
	// simulation, queried over the network through kube-proxy), "direct" (the cluster DNS
	// server code answers each pod's stub resolver in-process, no packets), or "off".
	// Default: kube-dns when this build has it, else direct (the run says which).
	DNS string `yaml:"dns,omitempty"`
	// ExternalHosts are machines outside the cluster (clients on the internet).
	ExternalHosts []ExternalHost `yaml:"external_hosts,omitempty"`
}

// Proxy is the kube-proxy configuration of every node.
type Proxy struct {
	// Mode is the proxy mode: iptables (default), ipvs, nftables or userspace. A mode this build does
	// not have is an error naming it.
	Mode string `yaml:"mode,omitempty"`
	// Scheduler is the IPVS scheduler (--ipvs-scheduler): rr (default), wrr, lc, wlc, sed,
	// nq, dh, sh, mh, lblc, lblcr, fo, ovf.
	Scheduler string `yaml:"scheduler,omitempty"`
	// Version is the kube-proxy version modelled, "1.N" (default: the mode's default
	// release). See VersionNotes and docs/VERSIONS.md for what each value changes.
	Version string `yaml:"version,omitempty"`
	// FeatureGates is --feature-gates: gates turned on or off against the version's
	// defaults ({ProxyTerminatingEndpoints: true}).
	FeatureGates map[string]bool `yaml:"feature_gates,omitempty"`
	// SyncDelay is how long after a change every node's proxy syncs (default 0: at once).
	SyncDelay Duration `yaml:"sync_delay,omitempty"`
	// MasqueradeAll is --masquerade-all.
	MasqueradeAll bool `yaml:"masquerade_all,omitempty"`
	// NodePortAddresses is --nodeport-addresses: CIDRs, or "primary".
	NodePortAddresses []string `yaml:"nodeport_addresses,omitempty"`
	// DetectLocalMode is --detect-local-mode: ClusterCIDR (default), NodeCIDR,
	// BridgeInterface or InterfaceNamePrefix.
	DetectLocalMode string `yaml:"detect_local_mode,omitempty"`
	// LocalhostNodePorts is --iptables-localhost-nodeports (default true).
	LocalhostNodePorts *bool `yaml:"localhost_nodeports,omitempty"`
	// Name names every node's proxy (a label value; a node's proxy_name overrides it).
	// Default "": kube-proxy, which ignores the Services labelled
	// service.kubernetes.io/service-proxy-name (any value). A name makes it the
	// alternative proxy of that name: kube-proxy's rules, for only the Services labelled
	// service.kubernetes.io/service-proxy-name: NAME. Either way EndpointSlices labelled
	// service.kubernetes.io/headless are ignored, and before 1.35 Services so labelled
	// too (proxy.NodeConfig.ServiceSelector).
	Name string `yaml:"name,omitempty"`
}

// Node is one node of the cluster.
type Node struct {
	// Name is required.
	Name string `yaml:"name"`
	// Zone is the topology.kubernetes.io/zone label.
	Zone string `yaml:"zone,omitempty"`
	// Labels are extra node labels.
	Labels map[string]string `yaml:"labels,omitempty"`
	// Settings are this node's kernel settings (over Cluster.NodeSettings).
	Settings *NodeSettings `yaml:"settings,omitempty"`
	// SyncDelay overrides the proxy's sync delay on this node.
	SyncDelay *Duration `yaml:"sync_delay,omitempty"`
	// ProxyName overrides cluster.proxy.name on this node: the name of the proxy
	// serving the Services labelled service.kubernetes.io/service-proxy-name with it
	// ("" is kube-proxy, serving the unlabelled ones).
	ProxyName *string `yaml:"proxy_name,omitempty"`
}

// NodeSettings are the kernel settings of a node that change outcomes; unset fields keep
// the default (hairpin on, route_localnet as kube-proxy sets it, ip_forward on, rp_filter 0,
// tcp_be_liberal off, the kernel's conntrack timeouts).
type NodeSettings struct {
	// Hairpin is the bridge's hairpin mode: off, a pod cannot reach itself through its
	// Service.
	Hairpin *bool `yaml:"hairpin,omitempty"`
	// RouteLocalnet is net.ipv4.conf.all.route_localnet (localhost NodePorts need it).
	RouteLocalnet *bool `yaml:"route_localnet,omitempty"`
	// IPForward is net.ipv4.ip_forward.
	IPForward *bool `yaml:"ip_forward,omitempty"`
	// RPFilter is net.ipv4.conf.all.rp_filter: 0 off, 1 strict, 2 loose.
	RPFilter *int `yaml:"rp_filter,omitempty"`
	// TCPBeLiberal is net.netfilter.nf_conntrack_tcp_be_liberal.
	TCPBeLiberal *bool `yaml:"tcp_be_liberal,omitempty"`
	// UDPTimeout and UDPStreamTimeout are nf_conntrack_udp_timeout (default 30s) and
	// nf_conntrack_udp_timeout_stream (default 120s).
	UDPTimeout       *Duration `yaml:"udp_timeout,omitempty"`
	UDPStreamTimeout *Duration `yaml:"udp_stream_timeout,omitempty"`
	// Kernel is the node's Linux release (kernel: {version: "4.19"}; default a current
	// kernel): kernel-behaviour changes and what kube-proxy's IPVS mode writes follow it.
	Kernel *KernelSettings `yaml:"kernel,omitempty"`
	// IPVS are net.ipv4.vs sysctls set over what kube-proxy's IPVS mode writes.
	IPVS *IPVSSettings `yaml:"ipvs,omitempty"`
	// NetworkPolicy is how the node's CNI treats node and hostNetwork traffic under
	// NetworkPolicy: calico (default) or cilium (cluster.PolicyCalico, PolicyCilium).
	NetworkPolicy *string `yaml:"network_policy,omitempty"`
}

// KernelSettings name a node's kernel.
type KernelSettings struct {
	// Version is the Linux release, "5.4" or "6.6.8".
	Version string `yaml:"version"`
}

// IPVSSettings are net.ipv4.vs sysctls; unset ones keep kube-proxy's value (or the
// kernel's default).
type IPVSSettings struct {
	ConnReuseMode           *int `yaml:"conn_reuse_mode,omitempty"`           // 0, 1 or 2
	ExpireNodestConn        *int `yaml:"expire_nodest_conn,omitempty"`        // 0 or 1
	ExpireQuiescentTemplate *int `yaml:"expire_quiescent_template,omitempty"` // 0 or 1
	Conntrack               *int `yaml:"conntrack,omitempty"`                 // 0 or 1
}

// ExternalHost is a machine outside the cluster.
type ExternalHost struct {
	// Name is required; steps name it as external:NAME.
	Name string `yaml:"name"`
	// IP is its address (default: the next free address of the external network).
	IP string `yaml:"ip,omitempty"`
}

// Manifest is an entry of a manifests list: a path to a manifest file or directory
// (relative to the scenario file; a directory contributes its *.yaml, *.yml and *.json
// files), or one Kubernetes object written inline. In YAML an entry is either
// `path: FILE` or the object itself (apiVersion, kind, metadata, ...).
type Manifest struct {
	Path string
	// Object is the inline object as written (a YAML mapping).
	Object *yaml.Node

	line int // where the entry is in the scenario file
}

// MarshalYAML writes the entry as `path: FILE` or as the object.
func (m Manifest) MarshalYAML() (any, error) {
	if m.Object != nil {
		return m.Object, nil
	}
	return map[string]string{"path": m.Path}, nil
}

// Step is one step of a scenario: exactly one action (connect, send, dns, check, apply,
// delete, delete_pod, kill_pod, set_ready, scale, evict, set_phase, set_health, advance, fault, partition, heal,
// kill_node, sync, restart_proxy, node_settings), optionally at a given virtual time, and for connect,
// send, dns and check an expectation.
type Step struct {
	// Name labels the step in the output (default: a description of the action).
	Name string `yaml:"name,omitempty"`
	// At runs the step at this virtual time after the scenario started, advancing the
	// clock to it (it is an error if the clock is already later).
	At *Duration `yaml:"at,omitempty"`

	// Connect makes connections: a TCP handshake, or a UDP request and its reply.
	Connect *Traffic `yaml:"connect,omitempty"`
	// Send sends single packets (a TCP SYN, a UDP datagram) and reports where each ends,
	// without replies.
	Send *Traffic `yaml:"send,omitempty"`
	// DNS asks a pod's resolver for a name.
	DNS *DNSQuery `yaml:"dns,omitempty"`
	// Check looks at state: conntrack entries, endpoints.
	Check *Check `yaml:"check,omitempty"`

	// Apply creates or updates objects (change a Service, add pods): manifests as in the
	// scenario's top-level list.
	Apply []Manifest `yaml:"apply,omitempty"`
	// Delete deletes objects.
	Delete []ObjectRef `yaml:"delete,omitempty"`
	// DeletePod deletes pods through the API (kubectl delete pod).
	DeletePod *PodAction `yaml:"delete_pod,omitempty"`
	// KillPod kills pods' network at once without telling the API: the pod still looks
	// ready, so its endpoint stays until something (delete_pod, set_ready) changes that.
	KillPod *PodAction `yaml:"kill_pod,omitempty"`
	// SetReady sets pods' Ready condition, as a readiness probe would.
	SetReady *SetReady `yaml:"set_ready,omitempty"`
	// Scale sets a Deployment's or ReplicaSet's replicas: new pods are created, or
	// pods deleted as the ReplicaSet controller picks them (not ready first, then by
	// the controller.kubernetes.io/pod-deletion-cost annotation, more restarts, newest),
	// each with its terminationGracePeriodSeconds (default 30 s): terminating, their
	// endpoints serving-but-not-ready, until it passes.
	Scale *Scale `yaml:"scale,omitempty"`
	// Evict evicts pods through the Eviction API: a graceful deletion with each pod's
	// terminationGracePeriodSeconds (default 30 s); a Deployment's or ReplicaSet's pod
	// is replaced at once. There are no PodDisruptionBudgets: evictions always pass.
	Evict *PodAction `yaml:"evict,omitempty"`
	// SetPhase ends pods in a terminal phase (Succeeded or Failed), as their kubelet
	// reports it: their network goes and the EndpointSlice controller drops their
	// endpoints; the pod objects stay. A Deployment's or ReplicaSet's pod is replaced.
	SetPhase *SetPhase `yaml:"set_phase,omitempty"`
	// SetHealth breaks (or mends) pods' health as their probes see it: the HTTP status
	// their health endpoints answer, or their servers closed.
	SetHealth *SetHealth `yaml:"set_health,omitempty"`
	// Advance moves the virtual clock forward (timers fire: syncs, grace periods,
	// conntrack timeouts).
	Advance *Duration `yaml:"advance,omitempty"`
	// Fault sets a link's faults (loss, latency, ...).
	Fault *Fault `yaml:"fault,omitempty"`
	// Partition cuts the cluster network into groups of nodes ("external" names the
	// outside world); it replaces any earlier partition.
	Partition [][]string `yaml:"partition,omitempty"`
	// Heal removes any partition.
	Heal bool `yaml:"heal,omitempty"`
	// KillNode makes a node die (its pods with it); its objects stay in the API.
	KillNode string `yaml:"kill_node,omitempty"`
	// Sync controls the proxies' syncs.
	Sync *Sync `yaml:"sync,omitempty"`
	// RestartProxy restarts kube-proxy on a node ("all" for every node): a full sync
	// by a kube-proxy with no memory of the previous one, and what a restart of the
	// release cleans in conntrack (before 1.32, the UDP entries to every service with
	// endpoints; see proxy.RestartConntrackFilters).
	RestartProxy string `yaml:"restart_proxy,omitempty"`
	// RestartAPIServer restarts the API server ({}: with the same flags). Objects,
	// allocations and watches survive; a new service_cidr or node_port_range makes the
	// repair pass rebuild the allocators from the Services, which keep their values,
	// reporting those outside the new range (expect repair).
	RestartAPIServer *APIServerRestart `yaml:"restart_apiserver,omitempty"`
	// NodeSettings changes kernel settings of running nodes.
	NodeSettings *NodeSettingsChange `yaml:"node_settings,omitempty"`
	// UpdateStatus writes a Service's status (load-balancer ingress).
	UpdateStatus *UpdateStatus `yaml:"update_status,omitempty"`

	// Expect says what a connect, send, dns or check step must see (an apply step:
	// only rejected); a failed expectation fails the run (exit code 1).
	Expect *Expect `yaml:"expect,omitempty"`
}

// Traffic is what a connect or send step sends.
type Traffic struct {
	// From is where the traffic starts (required): pod:NAMESPACE/NAME (or pod:NAME in
	// default), node:NAME (the node's host network) or external:NAME.
	From string `yaml:"from"`
	// To is the destination (required), one of:
	//   IP:PORT, [IPv6]:PORT                 an address
	//   NAME:PORT                            a DNS name, resolved by the source's resolver
	//                                        (my-service, my-service.default.svc.cluster.local)
	//   service:NS/NAME:PORT                 the service's cluster IP (PORT may be a port name)
	//   nodeport:NS/NAME[:PORT]@NODE         NODE's IP and the service port's node port
	//   loadbalancer:NS/NAME:PORT            the service's load-balancer IP
	//   pod:NS/NAME:PORT                     the pod's IP
	//   node:NAME:PORT                       the node's IP
	To string `yaml:"to"`
	// Proto is tcp (default), udp or sctp (sctp only with via: probe).
	Proto string `yaml:"proto,omitempty"`
	// Count is how many connections or packets (default 1), each from a new source port
	// unless SrcPort is set.
	Count int `yaml:"count,omitempty"`
	// SrcPort fixes the source port: every attempt is then the same 5-tuple, so conntrack
	// entries are reused.
	SrcPort int `yaml:"src_port,omitempty"`
	// Via is how traffic is made: "probe" (default: synthetic packets through the same
	// datapath, synchronous and deterministic, with rule-level traces) or "netstack"
	// (real TCP/UDP sockets in the source's network stack talking to the built-in whoami
	// server; concurrent, so only outcomes are checked).
	Via string `yaml:"via,omitempty"`
	// Trace prints the rule-by-rule trace of the first attempt (probe only).
	Trace bool `yaml:"trace,omitempty"`
	// AllBranches follows every random choice of one packet (iptables statistic rules,
	// IPVS random schedulers) and reports each outcome with its probability, changing
	// nothing (send steps only; count is ignored).
	AllBranches bool `yaml:"all_branches,omitempty"`
	// Packet makes a send step send one crafted packet (craft.go) instead of a first
	// packet: a TCP segment with chosen flags, sequence and acknowledgement numbers and
	// window, or an ICMP message (proto: icmp).
	Packet *CraftedPacket `yaml:"packet,omitempty"`
	// HTTP makes each of a connect step's connections an HTTP GET (TCP, via netstack,
	// the default with http), whose status and body expect status and body check:
	// kube-proxy's /healthz (node:NAME:10256), a health-check node port, a pod's
	// whoami server.
	HTTP *HTTPGet `yaml:"http,omitempty"`
}

// HTTPGet is the request of a connect step's HTTP connections.
type HTTPGet struct {
	// Path is the request's path (default /).
	Path string `yaml:"path,omitempty"`
	// Host is its Host header (default: the destination address).
	Host string `yaml:"host,omitempty"`
}

// DNSQuery is a name lookup from a pod.
type DNSQuery struct {
	// From is the pod whose resolver asks (required): pod:NAMESPACE/NAME.
	From string `yaml:"from"`
	// Name is the name asked for (required); short names go through the pod's search list.
	Name string `yaml:"name"`
	// Type is A (default), AAAA, both, SRV, PTR, TXT or CNAME. A and AAAA go through the
	// pod's stub resolver (search list, ndots); both asks A and AAAA for each name as
	// getaddrinfo does (back to back from one UDP socket unless options say otherwise);
	// other types ask the name as written, except that a PTR query for an address asks
	// for its reverse name (as dig -x does).
	Type string `yaml:"type,omitempty"`
	// Options are resolv.conf options added to the pod's (replacing an option of the
	// same name) for this lookup, A, AAAA or both only: single-request,
	// single-request-reopen, use-vc, timeout:N, attempts:N, ndots:N. With options or
	// type both, the resolver's timeouts run on the virtual clock (a lost query costs
	// timeout seconds, 5 by default, and a retry) and the result reports the delay, the
	// answers by query type and each query's source address and port.
	Options []string `yaml:"options,omitempty"`
	// Together has the pod's node hold the lookup's first DNS packets (UDP to port 53
	// from the pod) so that they are in flight together, between conntrack and
	// confirmation at once, as on a real node's CPUs: glibc's A and AAAA queries racing
	// to insert their conntrack entries. Type both or options only, kube-dns mode.
	Together *DNSTogether `yaml:"together,omitempty"`
}

// DNSTogether is how a dns step's packets are in flight together in the pod's node.
type DNSTogether struct {
	// Steps is the explicit interleaving: the packet (0: the first sent) taking each
	// step, a packet's first step taking it from its arrival through conntrack and NAT,
	// its second confirming it. [0, 1, 0, 1]: both pass NAT before either confirms.
	// Empty (and random false): one packet at a time, in order.
	Steps []int `yaml:"steps,omitempty"`
	// Random picks each step's packet at random, and the proxy's choices for them, from
	// a source seeded with Seed.
	Random bool   `yaml:"random,omitempty"`
	Seed   uint64 `yaml:"seed,omitempty"`
	// Count is how many packets are held (default 2); Window how long the first waits
	// for the others on the virtual clock (default 1ms): a packet sent later, after a
	// reply, is not in flight with it.
	Count  int       `yaml:"count,omitempty"`
	Window *Duration `yaml:"window,omitempty"`
}

// APIServerRestart is a restart_apiserver step: the API server's range flags after the
// restart, as cluster.service_cidr and cluster.node_port_range write them ("": as
// before). The IP families cannot change.
type APIServerRestart struct {
	ServiceCIDR   string `yaml:"service_cidr,omitempty"`
	NodePortRange string `yaml:"node_port_range,omitempty"`
}

// Check looks at the state of the cluster. Exactly one field is set.
type Check struct {
	// Conntrack counts conntrack entries on a node.
	Conntrack *ConntrackCheck `yaml:"conntrack,omitempty"`
	// Endpoints counts a service's endpoints in its EndpointSlices.
	Endpoints *EndpointsCheck `yaml:"endpoints,omitempty"`
	// ConntrackStats reads a node's conntrack counters (conntrack -S).
	ConntrackStats *ConntrackStatsCheck `yaml:"conntrack_stats,omitempty"`
	// HealthCheck asks a node's health-check node port of a Service
	// (externalTrafficPolicy Local), as the cloud load balancer does.
	HealthCheck *HealthCheckCheck `yaml:"health_check,omitempty"`
}

// ConntrackStatsCheck selects the node whose conntrack counters are read.
type ConntrackStatsCheck struct {
	// Node is a node name (required), or "all" for the sums over the nodes.
	Node string `yaml:"node"`
}

// HealthCheckCheck selects a Service's health-check node port on a node.
type HealthCheckCheck struct {
	// Service is NAMESPACE/NAME of a LoadBalancer Service with externalTrafficPolicy
	// Local (required).
	Service string `yaml:"service"`
	// Node is the node asked (required).
	Node string `yaml:"node"`
}

// ConntrackCheck selects conntrack entries.
type ConntrackCheck struct {
	// Node is the node whose table is read (required), or "all".
	Node string `yaml:"node"`
	// Proto is tcp, udp, sctp or icmp (default: any).
	Proto string `yaml:"proto,omitempty"`
	// Dst is the original destination, as a connect step's To (names are not resolved;
	// service:, nodeport: and friends are). A port of 0 or none matches any port.
	Dst string `yaml:"dst,omitempty"`
	// ReplySrc is the address the reply comes from (the endpoint a DNAT chose): an IP,
	// IP:PORT or pod:NS/NAME.
	ReplySrc string `yaml:"reply_src,omitempty"`
	// Src is the original source: an IP, pod:NS/NAME or node:NAME; SrcPort its port
	// (with Dst, a whole tuple).
	Src     string `yaml:"src,omitempty"`
	SrcPort int    `yaml:"src_port,omitempty"`
}

// EndpointsCheck selects a service's endpoints.
type EndpointsCheck struct {
	// Service is NAMESPACE/NAME (required).
	Service string `yaml:"service"`
}

// ObjectRef names an object: kind and NAMESPACE/NAME (or NAME for nodes and namespaces).
// Instead of Name, Selector (a label selector, app=web) with Namespace (default
// "default") names every Service, Pod, Endpoints, EndpointSlice or NetworkPolicy of the kind that
// matches (a collection delete, as kubectl delete -l or DeleteCollection; none
// matching is no error).
type ObjectRef struct {
	Kind      string `yaml:"kind"`
	Name      string `yaml:"name,omitempty"`
	Selector  string `yaml:"selector,omitempty"`
	Namespace string `yaml:"namespace,omitempty"`
}

// UpdateStatus writes a Service's status through the API's status subresource, as a
// controller does (Service must exist). Fields not set are left as they are.
type UpdateStatus struct {
	// Service is NAMESPACE/NAME (required).
	Service string `yaml:"service"`
	// LoadBalancerIngress replaces status.loadBalancer.ingress: each an IP, or
	// IP/MODE with MODE VIP or Proxy (the ipMode). The simulated cloud load balancer
	// owns the status of the LoadBalancer Services it serves (no loadBalancerClass)
	// and sets it back; with a loadBalancerClass, nothing else writes it, as when
	// Kubernetes' e2e tests stand in for a load-balancer controller.
	LoadBalancerIngress []string `yaml:"load_balancer_ingress"`
}

// PodAction selects pods for delete_pod and kill_pod (and evict, set_phase, set_health).
type PodAction struct {
	// Pod is NAMESPACE/NAME, or a pattern with * (default/web-*), or "" with Selector.
	Pod string `yaml:"pod,omitempty"`
	// Selector is a label selector (app=web) in Namespace (default "default").
	Selector  string `yaml:"selector,omitempty"`
	Namespace string `yaml:"namespace,omitempty"`
	// Count limits how many of the matching pods (sorted by name) are affected; 0: all.
	Count int `yaml:"count,omitempty"`
	// Grace is the deletion grace period (delete_pod only; default 0: gone at once).
	// During it the pod is terminating: its endpoints stay serving-but-not-ready.
	Grace Duration `yaml:"grace,omitempty"`
}

// SetReady sets the Ready condition of the pods a PodAction selects.
type SetReady struct {
	PodAction `yaml:",inline"`
	// Ready is the new value of the condition.
	Ready bool `yaml:"ready"`
}

// SetPhase ends the pods a PodAction selects in a terminal phase.
type SetPhase struct {
	PodAction `yaml:",inline"`
	// Phase is Succeeded or Failed (required).
	Phase string `yaml:"phase"`
}

// SetHealth sets the health of the pods a PodAction selects, as the kubelet's probes
// see it (see cluster.PodHealth). A container restart (a liveness or startup probe's
// failure) mends it.
type SetHealth struct {
	PodAction `yaml:",inline"`
	// HTTPStatus is what the pods' health endpoints answer httpGet (and grpc) probes:
	// 200 healthy, 500 (anything outside 200-399) failing. Default 200.
	HTTPStatus int `yaml:"http_status,omitempty"`
	// Listening false closes the pods' servers (probes and connections are refused);
	// true (or unset) opens them again.
	Listening *bool `yaml:"listening,omitempty"`
}

// Scale changes a workload's replicas.
type Scale struct {
	// Deployment or ReplicaSet is NAMESPACE/NAME of a workload from the manifests.
	Deployment string `yaml:"deployment,omitempty"`
	ReplicaSet string `yaml:"replicaset,omitempty"`
	// Replicas is the new count.
	Replicas int `yaml:"replicas"`
}

// Fault sets the faults of one link: a pod's veth (pod:NS/NAME), a node's uplink
// (node:NAME) or an external host's link (external:NAME). All zero clears them.
type Fault struct {
	Link      string   `yaml:"link"`
	Loss      float64  `yaml:"loss,omitempty"`
	Latency   Duration `yaml:"latency,omitempty"`
	Jitter    Duration `yaml:"jitter,omitempty"`
	Duplicate float64  `yaml:"duplicate,omitempty"`
	Reorder   float64  `yaml:"reorder,omitempty"`
}

// Sync controls kube-proxy syncs. Exactly one field is set.
type Sync struct {
	// Pause stops a node's proxy from syncing ("all" for every node).
	Pause string `yaml:"pause,omitempty"`
	// Resume lets it sync again (at once if anything changed).
	Resume string `yaml:"resume,omitempty"`
	// Now syncs every live node's proxy at once.
	Now bool `yaml:"now,omitempty"`
	// Delay sets a node's sync delay.
	Delay *SyncDelay `yaml:"delay,omitempty"`
	// RulesOnly syncs a node's proxy now ("all" for every node) but keeps back the
	// conntrack cleanup the sync would do (stale UDP entries stay) until
	// clean_conntrack.
	RulesOnly string `yaml:"rules_only,omitempty"`
	// HoldConntrack keeps back the conntrack cleanup of every sync of a node's proxy
	// from now on, until clean_conntrack (rules are updated as usual).
	HoldConntrack string `yaml:"hold_conntrack,omitempty"`
	// CleanConntrack carries out the conntrack cleanup kept back on a node (by
	// rules_only or hold_conntrack), and lets later syncs clean at once again.
	CleanConntrack string `yaml:"clean_conntrack,omitempty"`
}

// SyncDelay is a node's proxy sync delay.
type SyncDelay struct {
	Node     string   `yaml:"node"` // a node name or "all"
	Duration Duration `yaml:"duration"`
}

// NodeSettingsChange sets kernel settings on running nodes.
type NodeSettingsChange struct {
	// Node is a node name or "all".
	Node         string `yaml:"node"`
	NodeSettings `yaml:",inline"`
}

// Expect is what a step must see. Fields that are not set are not checked.
//
// For connect and send steps, over all attempts:
//   - result: every attempt ended so: connected, replied (UDP), delivered (send),
//     refused, dropped; "ok" means connected, replied or delivered; "failed" means
//     refused or dropped (timed out), for a test that needs only the connection to
//     fail, where modes differ (REJECT or DROP).
//   - min_success: at least this fraction of attempts were ok.
//   - reaches: the pods that answered are exactly these (NS/NAME or patterns with *;
//     each pattern answered at least once, every answer matched a pattern).
//   - not_reaches: no answer came from these.
//   - backends: this many distinct pods answered.
//   - spread: each pod that answered got an even share within this tolerance (0.25:
//     within ±25% of count/backends).
//   - seen_source: the source address the backend saw: "client" (the client's own
//     address), "not-client" (translated), "node" (any node's IP), node:NAME, or an IP.
//     A node's own connections (from: node:NAME) keep its address: both client and
//     node:NAME (and node) hold for them.
//
// For dns steps: rcode (NOERROR, NXDOMAIN, ...), answer (the set of answers: IPs,
// service:NS/NAME for a service's cluster IPs, pod:NS/NAME for a pod's IPs, or record
// data for other types such as SRV "0 100 80 my-service.default.svc.cluster.local.").
//
// For check steps: count (conntrack entries, endpoints), ready (ready endpoints);
// endpoints and endpoints_include (check endpoints): the endpoints by address or pod,
// port, node and conditions, exactly or at least (see EndpointExpect).
//
// More, for the facts a bug report states:
//   - probabilities (send with all_branches): each outcome's probability over every
//     branch, within tolerance (default 0.001): {default/web-0: 0.5, dropped: 0.5}; keys
//     are pods (NS/NAME), node:NAME, or a result (dropped, refused, ...) for branches
//     that reached no pod; outcomes not named must have probability 0.
//   - decided_by (connect, send): what decided the first attempt's fate: a rule
//     ({chain, rule (a part of its text) or line}), a chain's policy ({policy: CHAIN}),
//     an existing conntrack entry ({conntrack: true}) or an IPVS persistence template
//     ({ipvs_template: true}).
//   - present, nat_destination (check conntrack): some entry matches (or none does);
//     every matching entry's NAT destination (its reply source) is this IP, IP:PORT or
//     pod:NS/NAME.
//   - counters (check conntrack_stats): conntrack -S figures ({insert_failed: 0,
//     drop: 0, early_drop: 0, insert: 3}).
//   - status, local_endpoints (check health_check): the HTTP status of the health-check
//     node port's answer and its localEndpoints.
//   - status, body (connect with http): every answer's HTTP status, and a text every
//     answer's body contains.
type Expect struct {
	// Repair (restart_apiserver): each entry a substring of one problem the repair
	// pass reported, in any order, every problem matched; [] for none.
	Repair *[]string `yaml:"repair,omitempty"`

	Result     string   `yaml:"result,omitempty"`
	MinSuccess *float64 `yaml:"min_success,omitempty"`
	Reaches    []string `yaml:"reaches,omitempty"`
	NotReaches []string `yaml:"not_reaches,omitempty"`
	Backends   *int     `yaml:"backends,omitempty"`
	Spread     *float64 `yaml:"spread,omitempty"`
	SeenSource string   `yaml:"seen_source,omitempty"`

	Rcode  string   `yaml:"rcode,omitempty"`
	Answer []string `yaml:"answer,omitempty"`
	// Answers are a dns step's answers by query type (A, AAAA), as answer's; Delay
	// bounds the time its resolver waited for replies that did not come (type both
	// or options only).
	Answers map[string][]string `yaml:"answers,omitempty"`
	Delay   *DelayRange         `yaml:"delay,omitempty"`

	Count *int `yaml:"count,omitempty"`
	Ready *int `yaml:"ready,omitempty"`
	// Serving and Terminating (check endpoints) count the endpoints whose serving or
	// terminating condition is true.
	Serving     *int `yaml:"serving,omitempty"`
	Terminating *int `yaml:"terminating,omitempty"`

	Probabilities map[string]float64 `yaml:"probabilities,omitempty"`
	Tolerance     *float64           `yaml:"tolerance,omitempty"`
	DecidedBy     *DecisionPoint     `yaml:"decided_by,omitempty"`

	Present        *bool          `yaml:"present,omitempty"`
	NATDestination string         `yaml:"nat_destination,omitempty"`
	Counters       map[string]int `yaml:"counters,omitempty"`

	Status         *int `yaml:"status,omitempty"`
	LocalEndpoints *int `yaml:"local_endpoints,omitempty"`
	// Body (connect with http): every answer's body contains this text. Status is
	// then every answer's HTTP status.
	Body string `yaml:"body,omitempty"`

	// CtState (send with packet): the conntrack state the packet got at nodes, by
	// node name: NEW, ESTABLISHED, RELATED, INVALID or UNTRACKED.
	CtState map[string]string `yaml:"ctstate,omitempty"`
	// AnsweredWith (send with packet): what the stack the packet reached sent back to
	// its source: nothing, ICMP, or TCP flags (RST, ACK, "RST,ACK", ...).
	AnsweredWith string `yaml:"answered_with,omitempty"`

	// Rejected (apply): the API server must reject the step's manifests, with a message
	// that contains this text ("provided port is already allocated", "must be a valid
	// IP address"). The message is reported; the store is left as it was (an apply is
	// all or nothing) and the run goes on. An apply that is accepted fails the step.
	// The step's Services are then validated by the API server only, when it is run
	// (not when the file is loaded), and it may not hold Deployments or ReplicaSets.
	Rejected string `yaml:"rejected,omitempty"`

	// Endpoints (check endpoints): the Service's endpoints are exactly these: each
	// entry matches an endpoint of its EndpointSlices (address or pod, and the port,
	// node and conditions it sets), and each endpoint matches an entry.
	// EndpointsInclude: each entry matches an endpoint (others may be there too).
	Endpoints        []EndpointExpect `yaml:"endpoints,omitempty"`
	EndpointsInclude []EndpointExpect `yaml:"endpoints_include,omitempty"`
}

// DecisionPoint is what decided a packet's fate: one of a rule (Chain with Rule or
// Line), a chain's policy, an existing conntrack entry, an IPVS persistence template.
type DecisionPoint struct {
	// Chain is the rule's chain, CHAIN or TABLE/CHAIN (KUBE-SERVICES, filter/KUBE-SERVICES).
	Chain string `yaml:"chain,omitempty"`
	// Rule is a part of the rule's text; Line its line in the node's dump.
	Rule string `yaml:"rule,omitempty"`
	Line int    `yaml:"line,omitempty"`
	// Policy is a chain, CHAIN or TABLE/CHAIN, whose policy decided.
	Policy string `yaml:"policy,omitempty"`
	// Conntrack: an existing conntrack entry decided (no rule was asked).
	Conntrack bool `yaml:"conntrack,omitempty"`
	// IPVSTemplate: an IPVS persistence template decided (the scheduler was not asked).
	IPVSTemplate bool `yaml:"ipvs_template,omitempty"`
	// NetworkPolicy is a NetworkPolicy, NAMESPACE/NAME, that decided: for a packet the
	// NetworkPolicy handler dropped, one of the policies isolating the pod; for one it
	// let through, the policy whose rule allowed it (egress or ingress); Rule then is a
	// part of that rule's text ("rule 0" or "podSelector").
	NetworkPolicy string `yaml:"network_policy,omitempty"`
}

// Duration is a time.Duration written as "30s", "1m30s", "250ms".
type Duration time.Duration

// DelayRange bounds a delay: at least Min, at most AtMost (each optional).
type DelayRange struct {
	Min    *Duration `yaml:"min,omitempty"`
	AtMost *Duration `yaml:"at_most,omitempty"`
}

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalYAML writes the duration as Go's time.Duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// String returns the duration as Go's time.Duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// Action returns the name of the step's action (its YAML key), or "" if none is set.
func (s *Step) Action() string {
	as := s.actions()
	if len(as) == 0 {
		return ""
	}
	return as[0]
}

func (s *Step) actions() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(s.Connect != nil, "connect")
	add(s.Send != nil, "send")
	add(s.DNS != nil, "dns")
	add(s.Check != nil, "check")
	add(s.Apply != nil, "apply")
	add(s.Delete != nil, "delete")
	add(s.DeletePod != nil, "delete_pod")
	add(s.KillPod != nil, "kill_pod")
	add(s.SetReady != nil, "set_ready")
	add(s.Scale != nil, "scale")
	add(s.Evict != nil, "evict")
	add(s.SetPhase != nil, "set_phase")
	add(s.SetHealth != nil, "set_health")
	add(s.Advance != nil, "advance")
	add(s.Fault != nil, "fault")
	add(s.Partition != nil, "partition")
	add(s.Heal, "heal")
	add(s.KillNode != "", "kill_node")
	add(s.Sync != nil, "sync")
	add(s.RestartProxy != "", "restart_proxy")
	add(s.RestartAPIServer != nil, "restart_apiserver")
	add(s.NodeSettings != nil, "node_settings")
	add(s.UpdateStatus != nil, "update_status")
	return out
}

// Title is the step's name, or a one-line description of its action.
func (s *Step) Title() string {
	if s.Name != "" {
		return s.Name
	}
	switch {
	case s.Connect != nil:
		return fmt.Sprintf("connect %s -> %s%s", s.Connect.From, s.Connect.To, trafficSuffix(s.Connect))
	case s.Send != nil:
		return fmt.Sprintf("send %s -> %s%s", s.Send.From, s.Send.To, trafficSuffix(s.Send))
	case s.DNS != nil:
		t := s.DNS.Type
		if t == "" {
			t = "A"
		}
		return fmt.Sprintf("dns %s %s from %s", t, s.DNS.Name, s.DNS.From)
	case s.Check != nil && s.Check.Conntrack != nil:
		c := s.Check.Conntrack
		parts := []string{"conntrack on " + c.Node}
		if c.Proto != "" {
			parts = append(parts, c.Proto)
		}
		if c.Src != "" {
			from := "from " + c.Src
			if c.SrcPort != 0 {
				from += fmt.Sprintf(" port %d", c.SrcPort)
			}
			parts = append(parts, from)
		}
		if c.Dst != "" {
			parts = append(parts, "to "+c.Dst)
		}
		if c.ReplySrc != "" {
			parts = append(parts, "replied by "+c.ReplySrc)
		}
		return "check " + strings.Join(parts, " ")
	case s.Check != nil && s.Check.Endpoints != nil:
		return "check endpoints of " + s.Check.Endpoints.Service
	case s.Check != nil && s.Check.ConntrackStats != nil:
		return "check conntrack counters on " + s.Check.ConntrackStats.Node
	case s.Check != nil && s.Check.HealthCheck != nil:
		return "check the health-check node port of " + s.Check.HealthCheck.Service + " on " + s.Check.HealthCheck.Node
	case s.Apply != nil:
		return fmt.Sprintf("apply %d manifest(s)", len(s.Apply))
	case s.Delete != nil:
		var names []string
		for _, r := range s.Delete {
			if r.Selector != "" {
				ns := r.Namespace
				if ns == "" {
					ns = "default"
				}
				names = append(names, r.Kind+" "+ns+"/{"+r.Selector+"}")
				continue
			}
			names = append(names, r.Kind+" "+r.Name)
		}
		return "delete " + strings.Join(names, ", ")
	case s.DeletePod != nil:
		t := "delete pod " + s.DeletePod.describe()
		if s.DeletePod.Grace > 0 {
			t += " (grace " + s.DeletePod.Grace.String() + ")"
		}
		return t
	case s.KillPod != nil:
		return "kill pod " + s.KillPod.describe()
	case s.SetReady != nil:
		return fmt.Sprintf("set ready=%v on %s", s.SetReady.Ready, s.SetReady.describe())
	case s.Scale != nil:
		w := s.Scale.Deployment
		if w == "" {
			w = s.Scale.ReplicaSet
		}
		return fmt.Sprintf("scale %s to %d", w, s.Scale.Replicas)
	case s.Evict != nil:
		return "evict pod " + s.Evict.describe()
	case s.SetPhase != nil:
		return fmt.Sprintf("set phase %s on %s", s.SetPhase.Phase, s.SetPhase.describe())
	case s.SetHealth != nil:
		return "set health of " + s.SetHealth.describe()
	case s.Advance != nil:
		return "advance " + s.Advance.String()
	case s.Fault != nil:
		return "fault on " + s.Fault.Link
	case s.Partition != nil:
		var gs []string
		for _, g := range s.Partition {
			gs = append(gs, "["+strings.Join(g, " ")+"]")
		}
		return "partition " + strings.Join(gs, " ")
	case s.Heal:
		return "heal the partition"
	case s.KillNode != "":
		return "kill node " + s.KillNode
	case s.Sync != nil:
		switch {
		case s.Sync.Pause != "":
			return "pause kube-proxy on " + s.Sync.Pause
		case s.Sync.Resume != "":
			return "resume kube-proxy on " + s.Sync.Resume
		case s.Sync.Now:
			return "sync every proxy now"
		case s.Sync.Delay != nil:
			return fmt.Sprintf("sync delay %s on %s", s.Sync.Delay.Duration, s.Sync.Delay.Node)
		case s.Sync.RulesOnly != "":
			return "sync the rules on " + s.Sync.RulesOnly + ", conntrack cleanup kept back"
		case s.Sync.HoldConntrack != "":
			return "keep back kube-proxy's conntrack cleanup on " + s.Sync.HoldConntrack
		case s.Sync.CleanConntrack != "":
			return "run kube-proxy's kept-back conntrack cleanup on " + s.Sync.CleanConntrack
		}
	case s.RestartProxy != "":
		return "restart kube-proxy on " + s.RestartProxy
	case s.RestartAPIServer != nil:
		return "restart the API server"
	case s.NodeSettings != nil:
		return "node settings on " + s.NodeSettings.Node
	case s.UpdateStatus != nil:
		return "update the status of service " + s.UpdateStatus.Service
	}
	return "(no action)"
}

func trafficSuffix(t *Traffic) string {
	var parts []string
	if t.Proto != "" && !strings.EqualFold(t.Proto, "tcp") {
		parts = append(parts, strings.ToLower(t.Proto))
	}
	if t.Count > 1 {
		parts = append(parts, fmt.Sprintf("x%d", t.Count))
	}
	if t.Via == "netstack" {
		parts = append(parts, "via netstack")
	}
	if t.HTTP != nil {
		p := t.HTTP.Path
		if p == "" {
			p = "/"
		}
		parts = append(parts, "http GET "+p)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func (p *PodAction) describe() string {
	s := p.Pod
	if s == "" {
		ns := p.Namespace
		if ns == "" {
			ns = "default"
		}
		s = ns + "/{" + p.Selector + "}"
	}
	if p.Count > 0 {
		s += fmt.Sprintf(" (first %d)", p.Count)
	}
	return s
}
