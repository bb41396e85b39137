package kubeproxy

// kube-proxy's health servers on the simulated node, shared by every mode (as kube-proxy
// shares them between its proxiers):
//
//	node host network (netsim Net.Listen, so every packet crosses the node's datapath)
//	  :<healthCheckNodePort>  one HTTP server per LoadBalancer Service with
//	                          externalTrafficPolicy Local (pkg/proxy/healthcheck's service
//	                          health server): any method, any path →
//	                            200 with a local ready endpoint and a healthy proxy, else 503
//	                            Content-Type: application/json
//	                            X-Content-Type-Options: nosniff
//	                            X-Load-Balancing-Endpoint-Weight: <local endpoints>
//	                            {"service": {"namespace": .., "name": ..},
//	                             "localEndpoints": N, "serviceProxyHealthy": bool}
//	  :10256 /healthz /livez  the proxy's own health (--healthz-bind-address): 503 once an
//	                          update has waited longer than the health timeout for a sync
//	                          (/healthz also when the Node is being deleted or carries the
//	                          ToBeDeletedByClusterAutoscaler taint)
//
// The servers answer from the proxy's last sync: each Sync opens the health check node
// ports of the services it now has, closes those of services gone, and sets each
// service's count of local ready endpoints (kube-proxy's SyncServices and
// SyncEndpoints). So a node whose proxy has not synced a change yet (a sync delay, a
// paused proxy) keeps answering what it last knew, as a lagging kube-proxy does, until
// the change has waited for the health timeout (2 × the 30 s sync period): then the
// proxy counts as unhealthy and every service's answer is 503.
//
// As releases did (proxy.ChangeHCProxyHealth, proxy.ChangeHealthzDraining): before 1.26
// a service's answer ignores the proxy's health (and its body has no
// serviceProxyHealthy); without KubeProxyDrainingTerminatingNodes /healthz ignores the
// node's state (no nodeEligible) and /livez is not found.
//
// Differences from kube-proxy: the servers listen on every address of the node (kube-
// proxy listens only on the --nodeport-addresses IPs when that flag is set); a dual-stack
// node runs one set of servers fed by both families' proxiers (ports united, the larger
// count of local endpoints), where kube-proxy's two proxiers take turns writing theirs.

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/proxy"
)

// HealthzPort is kube-proxy's healthz port (--healthz-bind-address 0.0.0.0:10256).
const HealthzPort = 10256

// DefaultHealthTimeout is how long an update may wait for a sync before kube-proxy
// reports itself unhealthy: twice the default --iptables-sync-period (30 s).
const DefaultHealthTimeout = 60 * time.Second

// toBeDeletedTaint marks a node the cluster autoscaler is about to remove.
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// healthServer is kube-proxy's service health server and healthz server on one node.
type healthServer struct {
	n       *cluster.Node
	timeout time.Duration

	mu          sync.Mutex
	services    map[types.NamespacedName]*hcInstance
	local       map[types.NamespacedName]int // every service's local ready endpoints, last sync
	lastUpdated time.Time
	eligible    bool
	behaviour   healthBehaviour
	healthz     *http.Server
	healthzErr  error // why the healthz server did not start (reported by the next Sync)
}

// healthBehaviour is what the node's kube-proxy release answers (rows 33-34 of the
// reference table; the zero value is the newest release's).
type healthBehaviour struct {
	// hcIgnoresProxyHealth: before 1.26 a service health check answers 200 with a local
	// endpoint however stale the proxy is, and its body has no serviceProxyHealthy.
	hcIgnoresProxyHealth bool
	// noDraining: without KubeProxyDrainingTerminatingNodes /healthz ignores the node's
	// state (no nodeEligible) and there is no /livez.
	noDraining bool
}

func behaviourOf(node *proxy.NodeConfig) healthBehaviour {
	if node == nil {
		return healthBehaviour{}
	}
	return healthBehaviour{
		hcIgnoresProxyHealth: !node.Has(proxy.ChangeHCProxyHealth),
		noDraining:           !node.Has(proxy.ChangeHealthzDraining),
	}
}

// hcInstance is the health check server of one service.
type hcInstance struct {
	port      uint16
	endpoints int
	srv       *http.Server
}

func newHealthServer(n *cluster.Node) *healthServer {
	hs := &healthServer{n: n, timeout: DefaultHealthTimeout, services: map[types.NamespacedName]*hcInstance{}, eligible: true}
	ln, err := n.HostNet().Listen("tcp", fmt.Sprintf(":%d", HealthzPort))
	if err != nil {
		hs.healthzErr = fmt.Errorf("failed to start proxy healthz on 0.0.0.0:%d: %w", HealthzPort, err)
		return hs
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", hs.serveHealthz)
	mux.HandleFunc("/livez", hs.serveLivez)
	hs.healthz = &http.Server{Handler: mux, ErrorLog: discardLog}
	go hs.healthz.Serve(ln) //nolint:errcheck // ends when the node's stack closes
	return hs
}

// sync is what a proxy's sync ends with: the services with a health check node port
// (their servers opened or closed), each service's local ready endpoints, the node's
// eligibility, and the time of the update, answered as the node's release does. Errors
// are listens that failed (kube-proxy logs them and an event; the service stays without
// a server until a later sync).
func (hs *healthServer) sync(ports map[types.NamespacedName]uint16, local map[types.NamespacedName]int, node *proxy.NodeConfig) error {
	obj, _ := hs.n.Cluster().Store().GetNode(hs.n.Name())
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var errs []error
	if hs.healthzErr != nil {
		errs = append(errs, hs.healthzErr)
		hs.healthzErr = nil
	}
	for nn, inst := range hs.services {
		if p, ok := ports[nn]; !ok || p != inst.port {
			inst.srv.Close()
			delete(hs.services, nn)
		}
	}
	names := make([]types.NamespacedName, 0, len(ports))
	for nn := range ports {
		if hs.services[nn] == nil {
			names = append(names, nn)
		}
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	for _, nn := range names {
		port := ports[nn]
		ln, err := hs.n.HostNet().Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s failed to start healthcheck %q on port %d: %w", hs.n.Name(), nn.String(), port, err))
			continue
		}
		srv := &http.Server{Handler: hcHandler{hs: hs, nn: nn}, ErrorLog: discardLog}
		hs.services[nn] = &hcInstance{port: port, srv: srv}
		go srv.Serve(ln) //nolint:errcheck // ends at Close
	}
	hs.local = local
	for nn, inst := range hs.services {
		inst.endpoints = local[nn]
	}
	hs.behaviour = behaviourOf(node)
	hs.eligible = obj == nil || nodeEligible(obj)
	hs.lastUpdated = hs.n.Cluster().Clock().Now()
	return errors.Join(errs...)
}

// nodeEligible is kube-proxy's SyncNode: a node being deleted, or tainted for the cluster
// autoscaler to remove it, fails /healthz.
func nodeEligible(n *corev1.Node) bool {
	if n.DeletionTimestamp != nil {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == toBeDeletedTaint {
			return false
		}
	}
	return true
}

// proxyHealthy is kube-proxy's IsHealthy: no update has waited for a sync longer than the
// health timeout. It also returns the last update and the current time.
func (hs *healthServer) proxyHealthy() (bool, time.Time, time.Time) {
	now := hs.n.Cluster().Clock().Now()
	since, pending := hs.n.ProxyQueuedSince()
	hs.mu.Lock()
	last := hs.lastUpdated
	hs.mu.Unlock()
	return !pending || now.Sub(since) < hs.timeout, last, now
}

// hcHandler answers the health checks of one service.
type hcHandler struct {
	hs *healthServer
	nn types.NamespacedName
}

func (h hcHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.hs.mu.Lock()
	inst := h.hs.services[h.nn]
	count := 0
	if inst != nil {
		count = inst.endpoints
	}
	old := h.hs.behaviour.hcIgnoresProxyHealth
	h.hs.mu.Unlock()
	if inst == nil {
		return // a request for a closed health check: kube-proxy writes nothing either
	}
	healthy, _, _ := h.hs.proxyHealthy()
	if old {
		healthy = true // before 1.26 the answer does not look at the proxy
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
	if count != 0 && healthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if old {
		fmt.Fprint(w, hcBodyBefore126(h.nn, count))
		return
	}
	fmt.Fprint(w, hcBody(h.nn, count, healthy))
}

// hcBodyBefore126 is the body before the proxy's health was part of the answer.
func hcBodyBefore126(nn types.NamespacedName, count int) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d\n}",
		nn.Namespace, nn.Name, count)
}

// hcBody is the service health check's JSON, laid out as kube-proxy writes it.
func hcBody(nn types.NamespacedName, count int, healthy bool) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
		nn.Namespace, nn.Name, count, healthy)
}

func (hs *healthServer) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	healthy, last, now := hs.proxyHealthy()
	hs.mu.Lock()
	eligible, noDraining := hs.eligible, hs.behaviour.noDraining
	hs.mu.Unlock()
	if !noDraining {
		healthy = healthy && eligible
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if healthy {
		last = now
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if noDraining {
		fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q}`, last, now)
		return
	}
	fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q, "nodeEligible": %v}`, last, now, eligible)
}

func (hs *healthServer) serveLivez(w http.ResponseWriter, r *http.Request) {
	hs.mu.Lock()
	noDraining := hs.behaviour.noDraining
	hs.mu.Unlock()
	if noDraining {
		http.NotFound(w, r) // /livez came with KubeProxyDrainingTerminatingNodes
		return
	}
	healthy, last, now := hs.proxyHealthy()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if healthy {
		last = now
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q}`, last, now)
}

// localEndpoints returns the service's local ready endpoints as of the last sync.
func (hs *healthServer) localEndpoints(namespace, name string) int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.local[types.NamespacedName{Namespace: namespace, Name: name}]
}

// ports returns the health check node ports being served, by service.
func (hs *healthServer) ports() map[types.NamespacedName]uint16 {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	out := make(map[types.NamespacedName]uint16, len(hs.services))
	for nn, inst := range hs.services {
		out[nn] = inst.port
	}
	return out
}

// healthState gathers what the health server serves from a proxier's state after a
// sync: its services' health check node ports, and its local ready endpoints (the
// larger count when both families have the service), and the node's configuration
// (whose release decides the answers).
func healthState(states ...*proxy.SyncState) (map[types.NamespacedName]uint16, map[types.NamespacedName]int, *proxy.NodeConfig) {
	ports := map[types.NamespacedName]uint16{}
	local := map[types.NamespacedName]int{}
	var node *proxy.NodeConfig
	for _, st := range states {
		if st == nil {
			continue
		}
		if node == nil {
			node = st.Node
		}
		hcPorts, hcLocal := st.HealthView()
		for nn, p := range hcPorts {
			ports[nn] = p
		}
		for nn, k := range hcLocal {
			local[nn] = max(local[nn], k)
		}
	}
	return ports, local, node
}

// HealthCheckNodePorts returns the health check node ports a node's kube-proxy serves, by
// service ("namespace/name"), or nil when the node does not run one of this package's
// modes.
func HealthCheckNodePorts(n *cluster.Node) map[string]uint16 {
	hs := healthServerOf(n)
	if hs == nil {
		return nil
	}
	out := map[string]uint16{}
	for nn, p := range hs.ports() {
		out[nn.String()] = p
	}
	return out
}

func healthServerOf(n *cluster.Node) *healthServer {
	switch p := n.Proxy().(type) {
	case *iptablesProxy:
		return p.hs
	case *ipvsProxy:
		return p.hs
	case *userspaceProxy:
		return p.hs
	}
	return nil
}

// discardLog silences net/http's server log (a health check that went away half way).
var discardLog = log.New(io.Discard, "", 0)
