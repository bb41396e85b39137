// Package service is clusterlab's model of the Kubernetes objects that
// Service networking depends on — core/v1 Service, Pod, Node, Namespace and
// Endpoints, and discovery/v1 EndpointSlice — kept as the real k8s.io/api
// types, and the small API server that holds them.
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
//	    │  Validate: the API server's rules and messages (field.ErrorList)
//	    ▼
//	Store (the simulation's API server)
//	    │  Create/Update/Delete: default, allocate clusterIPs and node ports
//	    │  through package alloc (all or nothing), validate, commit
//	    │  endpoints controller: Services + Pods (+ Nodes) → EndpointSlices;
//	    │  mirroring: hand-written Endpoints → EndpointSlices
//	    ▼
//	watchers (Watch): proxies, DNS, the simulated kubelet — events in commit
//	order, delivered synchronously after the store's lock is released
//
// EnvVars computes the environment variables the kubelet gives a container
// for the services it can see.
//
// Objects returned by the Store are its own; callers must treat them as
// read-only and pass copies to Update.
package service
