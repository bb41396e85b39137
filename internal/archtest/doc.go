// Package archtest holds the test that keeps clusterlab's packages a clean stack (see
// docs/ARCHITECTURE.md): which package may import which. It has no code of its own.
package archtest
