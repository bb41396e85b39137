package main

import (
	"os"
	"testing"

	"github.com/clusterlab/clusterlab/kernel"
)

// Network namespaces the tests make are deleted on SIGINT, SIGTERM and SIGHUP too, and
// any a test leaves are deleted after the tests (kernel.RunTests).
// With CLUSTERLAB_TEST_AS_CLI=1 the test binary is the CLI (its arguments the CLI's):
// how TestKernelRunKilled runs `clusterlab run --backend kernel` to kill it.
func TestMain(m *testing.M) {
	if os.Getenv("CLUSTERLAB_TEST_AS_CLI") == "1" {
		main()
	}
	os.Exit(kernel.RunTests(m))
}
