// Package service is clusterlab's model of the Kubernetes objects that
// Service networking depends on — core/v1 Service, Pod, Node, Namespace and
// Endpoints, discovery/v1 EndpointSlice, and networking.k8s.io/v1
// NetworkPolicy (stored, defaulted and validated here; its semantics are
// package netpol's) — kept as the real k8s.io/api types, and the small API
// server that holds them.
//
// Data flows in one direction:
//
//	manifests (YAML/JSON, multi-document, kind: List, kubectl get -o yaml)
//	    │  Load / LoadPaths: strict decoding; errors name file, line, document, field
//	    ▼
//	runtime.Objects ──────────────── or built in Go: NewService, NewPod, ...
//	    │  Default: what the API server's defaulting sets (type, protocol,
//	    │           targetPort, sessionAffinity, traffic policies, ...)
//	    ▼
//	    │  Validate: the API server's rules and messages (field.ErrorList;
//	    │            InvalidError makes the 422 "Service "web" is invalid: [...]")
//	    ▼
//	Store (the simulation's API server)
//	    │  Create/Update/Delete: default, allocate clusterIPs and node ports
//	    │  through package alloc (all or nothing), validate, canonicalize
//	    │  (Endpoints subsets repacked: RepackSubsets), commit
//	    │  endpoints controller: Services + Pods (+ Nodes) → EndpointSlices
//	    │  (≤ MaxEndpointsPerSlice each, one set per address family);
//	    │  mirroring: hand-written Endpoints of selectorless Services →
//	    │  EndpointSlices (one per subset and family, ≤ 1000 endpoints)
//	    ▼
//	watchers (Watch): proxies, DNS, the simulated kubelet — events in commit
//	order, delivered synchronously after the store's lock is released
//
// EnvVars computes the environment variables the kubelet gives a container
// for the services it can see; Store.ServiceEnv applies the "services that
// existed before the pod" rule.
//
// Objects returned by the Store are its own; callers must treat them as
// read-only and pass copies to Update.
//
// # Where the Store differs from a real cluster
//
// It is a simulation's API server, so some things are simpler or chosen for
// reproducibility:
//
//   - Create keeps a given uid, creationTimestamp, deletionTimestamp and
//     status (the real API server replaces them), so a cluster dump keeps its
//     state and cross-references. Apply is create-or-update, all or nothing,
//     ordered by kind (Namespace, Node, Service, Endpoints, EndpointSlice, Pod).
//   - Namespaces are created on first use unless Config.StrictNamespaces;
//     deleting one deletes its contents at once. A graceful pod deletion
//     (DeletePod with a grace period) leaves the pod terminating until Delete:
//     there is no kubelet to finish it.
//   - Controllers run synchronously inside the mutation that triggers them.
//     Slice names are "<service>-" plus five characters derived from the
//     service, address type, port set and chunk, not random. Pods on a node
//     the store does not know are listed unless Config.StrictNodes. When a
//     service loses its selector or becomes ExternalName its controller slices
//     are deleted, and so are its mirrored slices when it becomes
//     ExternalName (upstream leaves both). trafficDistribution hints are
//     written; topology-aware hints (service.kubernetes.io/topology-mode) and
//     the last-change-trigger-time annotation are not.
//   - Hand-written Endpoints and EndpointSlices may not use a service's
//     cluster IP as an endpoint address (traffic would loop through the VIP).
//   - IP and CIDR fields are validated as the API server does with strict
//     IP validation (no leading zeros, no IPv4-mapped IPv6, any IPv6
//     spelling), but without its ratcheting: an update must fix an invalid
//     address that an older cluster let in.
//   - Pod validation covers what networking uses (metadata, containers and
//     ports, hostname/subdomain, DNS and restart policy, status IPs).
//   - Service environment variables come sorted by service name (the
//     kubelet's order is a map's).
package service
