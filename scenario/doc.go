// Package scenario reads, runs and compares clusterlab scenario files: a cluster (nodes,
// networks, kube-proxy mode and version, node kernel settings, DNS), the Kubernetes
// objects in it (inline or by path; Deployments and ReplicaSets expanded into pods), and
// timed steps that send traffic, resolve names, change objects, kill pods and nodes,
// inject faults, steer kube-proxy's syncs and check what happened.
//
//	scenario.yaml ──Load──▶ *Scenario (types.go; errors name file:line: field)
//	                           │ Run(s, Options{Mode})
//	                           ▼
//	      cluster.Cluster + kubeproxy.Factory(mode) + cluster DNS (package dns)
//	                           │ manifests applied, every proxy synced, then each
//	                           │ step in order, at its virtual time
//	                           ▼
//	      Report{Steps: [StepResult{outcomes, expectations}]} ──▶ WriteText / JSON
//	                           │ RunModes: the same scenario under several modes
//	                           ▼
//	      Comparison{Differences: the facts that differ, step by step}
//
// Trace builds a scenario's cluster and follows one packet (DOT, SVG, Mermaid, pcap);
// RunDemo is `clusterlab demo`. A scenario can also be built in Go (the property-testing
// kit writes its shrunk counterexamples that way: InlineObject for objects) and written
// back with Marshal.
//
// # The file
//
//	name: ...                     a title; description: ... says what it shows
//	cluster:
//	  seed: 1                     every random choice (default 1)
//	  nodes:                      default node-a, node-b, node-c
//	    - name: node-a
//	      zone: zone-1            topology.kubernetes.io/zone
//	      labels: {k: v}
//	      settings: {...}         this node's kernel settings (over node_settings)
//	      sync_delay: 2s          this node's kube-proxy sync delay
//	      proxy_name: my-proxy    this node's proxy name (over cluster.proxy.name; "" is
//	                              kube-proxy)
//	  node_cidr, pod_cidr, service_cidr, external_cidr, load_balancer_cidr: CIDRs
//	                              (node, pod and service: "IPv4,IPv6" for dual-stack)
//	  load_balancer_mode: nodeport | vip
//	  node_port_range: 30000-32767
//	  pod_ip_allocation: round-robin | lowest-free
//	                              round-robin (default, host-local IPAM): a new pod gets
//	                              the next free address after the last one given;
//	                              lowest-free: a new pod reuses the address just freed
//	  endpoints: keep | derive    EndpointSlices/Endpoints of selector Services in the
//	                              manifests whose Pods are absent (a kubectl dump): keep
//	                              (default) stands a pod in for each endpoint, at its
//	                              address on its node; derive ignores them (the notes say)
//	  proxy:
//	    mode: iptables | ipvs | nftables | userspace   (a mode this build lacks is an error)
//	    scheduler: rr | wrr | lc | wlc | sed | nq | dh | sh | mh | lblc | lblcr | fo | ovf | twos
//	    version: "1.33"           the kube-proxy version modelled (VersionNotes, docs/VERSIONS.md)
//	    feature_gates: {NAME: true|false}   --feature-gates against the version's defaults
//	    sync_delay: 0s            how long after a change every proxy syncs
//	    masquerade_all, nodeport_addresses: [CIDR|primary], detect_local_mode,
//	    localhost_nodeports       kube-proxy's flags
//	    name: my-proxy            every node's proxy name (a label value; default "":
//	                              kube-proxy). kube-proxy ignores the Services labelled
//	                              service.kubernetes.io/service-proxy-name (any value),
//	                              and before 1.35 those labelled
//	                              service.kubernetes.io/headless too: their cluster IPs
//	                              are dead, as a deleted Service's, while DNS and
//	                              EndpointSlices are as usual. A proxy named N is the
//	                              alternative proxy the label hands Services to:
//	                              kube-proxy's rules, for only the Services labelled
//	                              service-proxy-name: N
//	  node_settings:              hairpin, route_localnet, ip_forward, rp_filter (0/1/2),
//	                              tcp_be_liberal, udp_timeout, udp_stream_timeout,
//	                              kernel: {version: "5.4"} (the node's Linux; default
//	                              current), ipvs: {conn_reuse_mode, expire_nodest_conn,
//	                              expire_quiescent_template, conntrack} (over kube-proxy's),
//	                              network_policy: calico | cilium (how the CNI treats
//	                              node traffic under NetworkPolicy: both let a node reach
//	                              its own pods; calico: other nodes are plain addresses
//	                              ipBlock matches; cilium: nodes are the host/remote-node
//	                              identities, which ipBlock does not select; default
//	                              calico; see cluster.PolicyCalico)
//	  dns: kube-dns | direct | off
//	                              kube-dns: a kube-system/kube-dns Service at the tenth
//	                              service address with CoreDNS-like pods, every pod's
//	                              resolver pointed at it (queries cross kube-proxy);
//	                              direct: the DNS server code answers each pod's stub
//	                              resolver in-process; default kube-dns
//	  external_hosts: [{name: laptop, ip: 203.0.113.50}]
//	host_services:                real servers on this machine that pods reach (TCP):
//	  - name: api                 a pod's connection to address leaves its node through
//	    address: 192.0.2.10:8080  the datapath and is relayed to target (default
//	    target: 127.0.0.1:18080   127.0.0.1:PORT); only the addresses listed are
//	                              reachable; the address lies outside the cluster's
//	                              networks (external hosts host-services, -2, ... own them)
//	manifests:                    applied together before the first step
//	  - path: app.yaml            a file or directory, relative to the scenario file
//	  - apiVersion: v1            or an object inline
//	    kind: Service
//	    ...
//	                              Services are checked when the file is loaded as the
//	                              API server checks them: defaulted and allocated
//	                              (cluster IPs, node ports, the health-check node port)
//	                              in a scratch API server configured as the cluster,
//	                              then validated; a node port taken by another manifest
//	                              or outside node_port_range is an error at its line
//	                              (an apply step's Services are checked on their own)
//	steps:                        in order; each has one action
//	  - name: ...                 optional title
//	    at: 30s                   run at this virtual time since the start
//	    <action>: ...
//	    expect: ...               for connect, send, dns and check (and apply: rejected)
//
// Actions:
//
//	connect: {from, to, proto, count, src_port, via, trace}
//	connect.http: {path: /healthz, host: NAME}
//	                              each connection is an HTTP GET (tcp, via netstack):
//	                              kube-proxy's /healthz (node:NAME:10256), a health-check
//	                              node port, a pod's whoami server; expect status, body
//	                              TCP handshakes, UDP request/replies or ICMP echoes
//	                              (proto icmp: a pod answers; a ClusterIP in the
//	                              iptables mode does not, no rule DNATs ICMP)
//	send: {from, to, proto, count, src_port, trace, all_branches, packet}
//	                              single packets; all_branches: every outcome of one
//	                              packet with its probability
//	send.packet: {tcp_flags: "PSH,ACK", seq: 1234 | next | next+N, ack, window, reply}
//	           | {icmp_type: echo-request | fragmentation-needed | TYPE/CODE, reply}
//	                              one crafted packet (proto tcp or icmp) on the
//	                              connection from src_port to `to`; reply: from its
//	                              server's side (an ICMP error about its last segment);
//	                              deliver: true hands it to the stack it reaches and
//	                              reports that stack's answer (RST, ACK, ICMP, nothing)
//	dns: {from: pod:NS/NAME, name, type, options}   A (stub resolver: search list, ndots),
//	                              AAAA, both, SRV, PTR, TXT, CNAME, NS, SOA; both (A and
//	                              AAAA back to back from one socket, as getaddrinfo) or
//	                              options [single-request, single-request-reopen, use-vc,
//	                              timeout:N, attempts:N, ndots:N]: timeouts on the
//	                              virtual clock, the delay, answers by type, source ports
//	dns.together: {steps: [0, 1, 0, 1]} | {random: true, seed: N}, count, window
//	                              the pod's node holds its first DNS packets (count, 2) in
//	                              flight together: both between conntrack and confirmation
//	                              (the A/AAAA conntrack insert race); each packet's fate
//	check: {conntrack: {node, proto, dst, reply_src, src, src_port}} | {endpoints: {service}}
//	       | {conntrack_stats: {node}}       conntrack -S counters
//	       | {health_check: {service: NS/NAME, node}}   the health-check node port's answer
//	apply: [manifests]            create or update (Deployments roll out or scale)
//	delete: [{kind, name}]
//	      | [{kind: Service | Pod | Endpoints | EndpointSlice | NetworkPolicy, selector: test=e2e,
//	          namespace}]         every object of the kind in the namespace (default
//	                              "default") whose labels match (DeleteCollection)
//	delete_pod: {pod | selector [+ namespace], count, grace}
//	                              a Deployment's or ReplicaSet's pod is replaced at once
//	kill_pod: {pod | selector, count}         the network dies, the API does not know
//	set_ready: {pod | selector, count, ready}
//	scale: {deployment | replicaset: NS/NAME, replicas}
//	                              scaling down deletes pods as the ReplicaSet controller
//	                              ranks them (not ready, lower pod-deletion-cost, more
//	                              restarts, newest first), each with its
//	                              terminationGracePeriodSeconds (default 30s)
//	evict: {pod | selector, count}   the Eviction API: graceful deletion with the pod's
//	                              terminationGracePeriodSeconds; a workload's pod is
//	                              replaced at once (no PodDisruptionBudgets)
//	set_phase: {pod | selector, count, phase: Succeeded | Failed}
//	                              the pod ends: its network goes, its endpoint is
//	                              dropped (terminal pods are left out of
//	                              EndpointSlices), the object stays; a workload's pod
//	                              is replaced
//	set_health: {pod | selector, count, http_status, listening}
//	                              break (or mend) pods' health for their probes:
//	                              http_status (500) is what httpGet/grpc probes get;
//	                              listening: false closes the pods' servers (probes and
//	                              connections refused); a container restart mends it
//	advance: 30s
//	fault: {link: pod:NS/NAME | node:NAME | external:NAME, loss, latency, jitter,
//	        duplicate, reorder}   (all zero clears)
//	partition: [[node-a], [node-b, external]]
//	heal: true
//	kill_node: node-b
//	sync: {pause: NODE|all} | {resume: NODE|all} | {now: true} | {delay: {node, duration}}
//	      | {rules_only: NODE|all}        sync the rules now, keep the conntrack cleanup back
//	      | {hold_conntrack: NODE|all}    from now on, syncs keep their cleanup back
//	      | {clean_conntrack: NODE|all}   run the cleanup kept back
//	restart_proxy: NODE|all       a full sync by a new kube-proxy, and what the release
//	                              cleans at startup (before 1.32: the UDP entries of
//	                              every service with endpoints)
//	restart_apiserver: {service_cidr, node_port_range}   ({}: the same flags)
//	                              objects, allocations and watches survive; new ranges
//	                              make the repair pass rebuild the allocators from the
//	                              Services, which keep their values (expect repair)
//	node_settings: {node: NODE|all, hairpin, rp_filter, ...}
//	update_status: {service: NS/NAME, load_balancer_ingress: [IP | IP/VIP | IP/Proxy]}
//	                              writes status.loadBalancer.ingress (the status
//	                              subresource); the simulated cloud load balancer owns
//	                              the status of Services without a loadBalancerClass
//	                              and sets it back
//
// from is pod:NS/NAME (pod:NAME in default), node:NAME or external:NAME. to is IP:PORT,
// NAME:PORT (a DNS name, resolved by the pod's resolver; pods only),
// service:NS/NAME:PORT (the cluster IP; PORT may be a port name),
// nodeport:NS/NAME[:PORT]@NODE, loadbalancer:NS/NAME:PORT, pod:NS/NAME:PORT or
// node:NAME:PORT.
//
// Expectations (expect:):
//
//	result: connected | replied | delivered | refused | dropped | ok   every attempt
//	                              (failed: refused or dropped, whichever the mode does)
//	min_success: 0.9              at least this fraction ok (or "90%")
//	reaches: [default/web-*]      exactly these pods answered (patterns with *)
//	not_reaches: [...]            none of these answered
//	backends: 3                   this many distinct pods answered
//	spread: 0.25                  each within ±25% of an even share
//	seen_source: client | not-client | node | node:NAME | IP
//	rcode: NXDOMAIN               dns
//	answer: [service:NS/NAME, pod:NS/NAME, 10.0.0.1, "0 50 80 x.default.svc.cluster.local."]
//	answers: {A: [service:NS/NAME], AAAA: []}, delay: {min: 5s, at_most: 5s}
//	                              dns with type both or options: by query type; the
//	                              time spent on reply timeouts
//	count: 1, ready: 1            check (conntrack entries; endpoints, ready endpoints)
//	endpoints: [{address: pod:NS/NAME | IP, port: 8080, node: node-a, ready: true,
//	             serving: true, terminating: false}]
//	                              check endpoints: exactly these endpoints (each entry
//	                              matches one in the EndpointSlices by the fields it
//	                              sets, each endpoint matches an entry; port: a port of
//	                              its slice); endpoints_include: [...] at least these
//	serving: 1, terminating: 1    check endpoints: endpoints serving, terminating
//	probabilities: {default/web-0: 0.5, dropped: 0.5}, tolerance: 0.01
//	                              send with all_branches: each outcome's probability
//	decided_by: {chain: filter/KUBE-SERVICES, rule: "has no endpoints", line: 9}
//	          | {policy: filter/FORWARD} | {conntrack: true} | {ipvs_template: true}
//	          | {network_policy: NS/NAME, rule: "rule 0"}
//	                              what decided the first attempt's fate (probes); a
//	                              NetworkPolicy: one isolating the pod of a dropped
//	                              packet, or the one whose rule let it through
//	present: true, nat_destination: pod:NS/NAME[:PORT] | IP[:PORT]    check conntrack
//	counters: {found, invalid, insert, insert_failed, drop, early_drop, clash_resolve}
//	                              check conntrack_stats: conntrack -S counters
//	status: 200, local_endpoints: 1                                    check health_check
//	status: 200, body: "localEndpoints"   connect with http: every answer's status, and a
//	                              text every answer's body contains
//	ctstate: {node-a: INVALID}    send with packet: the conntrack state it got at nodes
//	answered_with: RST | ACK | "RST,ACK" | ICMP | nothing   send with packet, deliver: true
//	repair: ["... 10.96.0.1 for service default/kubernetes is not within ..."] | []
//	                              restart_apiserver: the repair pass's problems, each
//	                              matched by one substring
//	rejected: "provided port is already allocated"
//	                              apply: the API server must reject the step's objects
//	                              with a message containing this; nothing is applied,
//	                              the message is reported and the run goes on (an
//	                              accepted apply fails the step); its Services are
//	                              validated by the API server when the step runs
//
// # Probes and real sockets
//
// Traffic is made with probes by default: synthetic packets (a SYN, a datagram) or whole
// exchanges walked through the same datapath code real packets take, synchronously, so
// that outcomes are a function of the seed and the state, and traces are rule-level.
// via: netstack opens real sockets in the source's gVisor stack and talks to the
// built-in whoami server, one connection at a time (DialWhoami, which package proptest
// uses too). While it waits, the virtual clock
// moves only when the simulation has nothing left to do (Cluster.Quiesce: every goroutine
// of the cluster is blocked), and then to the next timer (a retransmission, link
// latency, the userspace proxy's dial timeout), so
// outcomes do not depend on how fast or loaded the machine is; a dropped connection
// waits 10 s of virtual time, a UDP one 3 s. In the userspace mode connect steps use
// netstack unless they say otherwise, because the proxy is a program on the node: a probe
// stops at its listener.
//
// # Time
//
// The clock is manual: it moves only with advance, at, and netstack waits. Sync delays,
// grace periods, conntrack and affinity timeouts fire on it.
//
// # Containers and probes
//
// The kubelet runs the built-in whoami server on every TCP and UDP port of a pod's
// containers and sidecars (init containers with restartPolicy: Always, started first),
// and on its probes' numbered ports. It runs the containers' startupProbe,
// readinessProbe and livenessProbe as pkg/kubelet/prober does, on the virtual clock: the
// first probe when the container starts, then every periodSeconds (default 10), skipped
// within initialDelaySeconds; a result counts after successThreshold (1) successes or
// failureThreshold (3) failures in a row; timeoutSeconds (1) bounds the answer. A probe
// is a TCP handshake from the node's host network to the pod's IP over the simulated
// network (NetworkPolicy-like handlers, faults, a dead pod network fail it); httpGet
// and grpc probes that connect get the pod's health status (200 unless set_health says
// otherwise; a pod with clusterlab.io/app answers 200). Readiness starts false and
// drives the pod's Ready condition and its endpoints' ready/serving; a failed liveness
// or startup probe restarts the container (servers down, restartCount + 1, readiness
// false until it passes again; the first restart is at once, later ones after 10s,
// 20s, ... up to 5 minutes). exec probes cannot run in the simulation: they always
// succeed, so manifests from real clusters load and their pods get ready. Probes due at
// the same instant run one after another in a fixed order (the same on every run). The
// clusterlab.io/ready: "false" annotation still keeps a pod unready, and
// set_ready still sets the condition (until the kubelet's next readiness change).
//
// # Where a run differs from a real cluster
//
// Deleting a workload's pod creates its replacement at once (the ReplicaSet controller,
// without scheduling or image pull delay); scaling down ranks pods as the ReplicaSet
// controller does except for its rank by pods sharing a node and by time since ready;
// a new template replaces every pod at once (no rolling update), as deleting a
// Deployment deletes its pods at once. Pod name
// suffixes come from the seed. kill_pod does not restart the container.
//
// The first node is the control plane, as on a kind cluster: default/kubernetes's
// endpoint is its address, port 6443, where the API server (the built-in whoami
// server) answers on the node's host network. A pod named after it is deleted still
// names its last address (reply_src: pod:NS/NAME finds the stale entries that point at
// it; connect to: pod:NS/NAME sends to that address).
package scenario
