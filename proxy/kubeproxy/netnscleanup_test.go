package kubeproxy

import (
	"os"
	"testing"

	"github.com/clusterlab/clusterlab/kernel"
)

// Network namespaces the tests make are deleted on SIGINT, SIGTERM and SIGHUP too, and
// any a test leaves are deleted after the tests (kernel.RunTests).
func TestMain(m *testing.M) { os.Exit(kernel.RunTests(m)) }
