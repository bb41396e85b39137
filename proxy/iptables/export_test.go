package iptables

// Test helpers the external test package (iptables_test) uses.
var (
	BenchCluster   = benchCluster
	UpstreamConfig = upstreamConfig
)
