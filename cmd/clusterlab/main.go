// Command clusterlab is the command-line face of the clusterlab library: demos, scenario
// runs, packet traces through iptables-save dumps, an ipvsadm emulator and a cluster DNS
// server. Each subcommand lives in its own file of this package and registers itself
// with the root command in an init function.
//
// Exit codes: 0 success, 1 a check or expectation failed (or the command's work failed),
// 2 bad usage or bad input (a flag, a file that does not parse).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// usageError marks errors caused by the caller's input; they exit with code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// badInput wraps err so that main exits with code 2.
func badInput(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

var rootCmd = &cobra.Command{
	Use:   "clusterlab",
	Short: "A userspace virtual network for Kubernetes Service networking",
	Long: `clusterlab models Kubernetes nodes, pods and Service VIPs in userspace, runs
kube-proxy's proxy modes (iptables, IPVS, userspace) as packet handlers, serves
cluster DNS, runs scenario files with expectations, and traces packets through
simulated clusters and through real iptables-save and ipvsadm dumps.

Start with: clusterlab demo`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badInput(err) })
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "clusterlab:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
