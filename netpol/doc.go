// Package netpol is the semantics of Kubernetes NetworkPolicy
// (networking.k8s.io/v1), indexed: given policies, namespaces and pods, it
// decides whether a connection (after kube-proxy's DNAT: pod addresses and
// target ports) is allowed, and names the policy and rule that decided.
//
// The full package documentation (semantics and the choices made) is being
// written; see Index, Reference and Decision.
package netpol
