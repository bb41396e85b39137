// Package scenario reads, runs and compares clusterlab scenario files: a cluster (nodes,
// networks, kube-proxy mode and version, node kernel settings, DNS), the Kubernetes
// objects in it (inline or by path; Deployments and ReplicaSets expanded into pods), and
// timed steps that send traffic, resolve names, change objects, kill pods and nodes,
// inject faults, steer kube-proxy's syncs and check what happened.
//
//	scenario.yaml ──Load──▶ *Scenario (types.go; errors name file:line: field)
//	                           │ Run(s, Options{Mode})
//	                           ▼
//	      netsim.Cluster + kubeproxy.Factory(mode) + cluster DNS
//	                           │ each step in order, at its virtual time
//	                           ▼
//	      Report{Steps: [StepResult{outcomes, expectations}]} ──▶ Text / JSON
//	                           │ RunModes: the same scenario under several modes
//	                           ▼
//	      Comparison: where the modes' outcomes differ
//
// A scenario can be built in Go too (the property-testing kit writes its shrunk
// counterexamples that way) and written back with Marshal.
package scenario
