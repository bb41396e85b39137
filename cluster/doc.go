// Package cluster is a simulated Kubernetes cluster: netsim's virtual network driven by
// an API server (package service's store), with what runs on and around the nodes — a
// kubelet per node, a proxy per node (a kube-proxy mode from proxy/kubeproxy, or your
// own), and the cloud's load balancer with its health checks.
//
//	service.Store (Services, EndpointSlices, Pods, Nodes; ordered watches)
//	   │ events
//	   ▼
//	Cluster
//	   ├─ kubelet: binds pods to nodes, starts their netstacks (Network.StartPod),
//	   │           runs their apps or whoami servers, writes their status
//	   ├─ a proxy per node: Proxy.Sync after every change, after the node's delay
//	   └─ cloud load balancer: a netsim.Middlebox per LoadBalancer Service, health
//	      │                    checks over HTTP from an external host
//	      ▼
//	netsim.Network: nodes, pods, external hosts, fabric, datapaths, probes
//
// A Cluster embeds its *netsim.Network, so everything the network does (Probe, Pod,
// AddExternalHost, Partition, KillNode, Capture, TraceFlows, Quiesce) is a method of the
// cluster; Node, Nodes, AddNode, RemoveNode, Config and Close are the cluster's own. A
// Node embeds its *netsim.Node (handlers, conntrack, settings, host network) and adds
// the proxy's sync controls (SetSyncDelay, PauseProxy, ResumeProxy, ProxySyncs).
//
//	c, err := cluster.New(cluster.Config{
//		Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}},
//		Proxy: kubeproxy.Factory(kubeproxy.Options{Mode: kubeproxy.IPTables}),
//	})
//	defer c.Close()
//	c.Apply(service.NewService("default/web", service.Selector("app=web"), service.Port("http", 80, 8080)))
//	r, _ := c.ProbeOne(netsim.Probe{From: "pod:default/client", Dst: vip, ...})
//
// # The kubelet
//
// Pods in the store become pods in the network: an unscheduled pod is bound to the live
// node with the fewest pods; a pod bound to a live node of this cluster starts (its IPs
// kept from a dump when they fit the node), runs its app (annotation clusterlab.io/app,
// see RegisterApp) or the built-in whoami server on its container ports, and is marked
// Running and Ready (clusterlab.io/ready: "false" keeps it unready). Sidecars (init
// containers with restartPolicy Always) are served too, before the regular containers.
// Startup, readiness and liveness probes run on the virtual clock from the node's host
// network to the pod over the simulated network, with the API defaults and
// pkg/kubelet/prober's thresholds; readiness drives the Ready condition, a failed
// liveness probe restarts the container (containers.go; SetPodHealth breaks a pod's
// health on purpose). A deleted pod terminates for its grace period on the virtual
// clock, then dies; EvictPod deletes with the pod's terminationGracePeriodSeconds;
// SetPodPhase ends a pod Succeeded or Failed (its network and endpoints go).
//
// # Proxies
//
// Config.Proxy builds a proxy per node. Sync runs once at start, then after every change
// of Services, EndpointSlices or Nodes, Config.SyncDelay (or Node.SetSyncDelay) later,
// never concurrently on one node; PauseProxy reproduces a hung kube-proxy.
//
// # NetworkPolicy
//
// The cluster enforces the store's NetworkPolicies (networking.k8s.io/v1) as a CNI plugin
// does, with one more handler on each node's datapath (policy.go, PolicyHandlerName): after
// kube-proxy's DNAT and before masquerade, egress on the source pod's node and ingress on
// the destination pod's node, for a connection's first packets only (conntrack lets the
// rest through), dropping what no rule allows. The decisions come from a netpol.Index the
// cluster keeps in line with the store's policies, pods and namespaces
// (NetworkPolicyIndex); each is traced with the pod, the direction and the policy and rule
// (or the isolating policies), and carried on the trace step as a *netpol.Decision. How a
// node's own traffic and other nodes' addresses count is the node's flavour
// (NodeConfig.NetworkPolicy: PolicyCalico, PolicyCilium). The handler is installed when the
// first NetworkPolicy arrives, so a cluster without policies has none.
//
// # The cloud load balancer
//
// Every LoadBalancer Service (without a loadBalancerClass) gets an ingress address from
// Config.LoadBalancerCIDR (or spec.loadBalancerIP), published in its status. The load
// balancer is a middlebox of the network: it enforces loadBalancerSourceRanges and spreads
// flows over healthy nodes, rewriting the destination to the node port ("nodeport" mode,
// with the replies un-NATed on the fabric) or passing the packet unchanged ("vip" mode).
// For externalTrafficPolicy Local it health-checks each node's healthCheckNodePort over
// the network (see lbhealth.go).
package cluster
