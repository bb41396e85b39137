package netpol

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Matrix is a reachability truth table over pods, as the upstream
// network-policy e2e suite prints it: rows are sources, columns
// destinations.
type Matrix struct {
	Port    uint16
	Proto   corev1.Protocol
	Pods    []string // NS/NAME, sorted
	Allowed [][]bool // [from][to]
}

// Matrix computes the truth table of every ordered pod pair (hostNetwork
// pods included, as their node's address) at their first addresses.
func (ix *Index) Matrix(port uint16, proto corev1.Protocol) Matrix {
	pods := ix.Pods()
	m := Matrix{Port: port, Proto: proto, Pods: make([]string, len(pods)), Allowed: make([][]bool, len(pods))}
	for i, a := range pods {
		m.Pods[i] = a.Key()
		m.Allowed[i] = make([]bool, len(pods))
		for j, b := range pods {
			m.Allowed[i][j] = ix.Allowed(PodPeer(a), PodPeer(b), port, proto)
		}
	}
	return m
}

// String prints the table in the upstream style: a header row of
// destinations, then one row per source, "." allowed and "X" denied,
// tab-separated.
func (m Matrix) String() string {
	var b strings.Builder
	b.WriteString("-")
	for _, to := range m.Pods {
		b.WriteString("\t" + to)
	}
	b.WriteString("\n")
	for i, from := range m.Pods {
		b.WriteString(from)
		for j := range m.Pods {
			if m.Allowed[i][j] {
				b.WriteString("\t.")
			} else {
				b.WriteString("\tX")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
