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
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/spf13/cobra"
	gvlog "gvisor.dev/gvisor/pkg/log"
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
kube-proxy's proxy modes (%s) as packet handlers, serves
cluster DNS, runs scenario files with expectations, and traces packets through
simulated clusters and through real iptables-save and ipvsadm dumps.

Start with: clusterlab demo

Exit codes, for every subcommand: 0 success; 1 a check or expectation failed, or the
work itself failed (an address in use, a kernel call refused); 2 bad usage or bad
input (an unknown command or flag, a file that does not parse). Errors go to stderr.

The simulated network runs on gVisor's netstack, whose own log (warnings such as a
listener's "handleListenSegment() failed" when a simulated connection is torn down)
is about the simulation's internals; it is shown on stderr only with --netstack-log.`,
	Example: `  clusterlab demo
  clusterlab run testdata/scenarios/quickstart.yaml
  clusterlab run --modes iptables,ipvs,userspace testdata/scenarios/session-affinity.yaml
  clusterlab trace testdata/scenarios/clusterip-trace.yaml --from pod:default/client --to my-service:80 --svg path.svg
  clusterlab dns serve --manifests testdata/dns/my-service.yaml --listen 127.0.0.1:5353`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

// usageArgs makes every command's argument errors usage errors (exit 2), and makes a
// command group (clusterlab, clusterlab dns, ...) refuse an unknown subcommand with
// exit 2 where cobra would print the group's help and exit 0.
func usageArgs(cmd *cobra.Command) {
	if v := cmd.Args; v != nil {
		cmd.Args = func(c *cobra.Command, args []string) error { return badInput(v(c, args)) }
	}
	if cmd.HasSubCommands() {
		if cmd.Args == nil {
			cmd.Args = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return nil
				}
				msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
				if c.SuggestionsMinimumDistance <= 0 {
					c.SuggestionsMinimumDistance = 2
				}
				if s := c.SuggestionsFor(args[0]); len(s) > 0 {
					msg += fmt.Sprintf(" (did you mean %q?)", s[0])
				}
				return badInput(errors.New(msg))
			}
		}
		if !cmd.Runnable() {
			cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

// netstackLog is --netstack-log: whether gVisor's log reaches stderr.
var netstackLog boolFlag

// boolFlag is a boolean flag read atomically: netstack goroutines of an earlier run may
// log while the flags of the next are parsed (in tests).
type boolFlag struct{ atomic.Bool }

func (b *boolFlag) String() string { return strconv.FormatBool(b.Load()) }
func (b *boolFlag) Type() string   { return "bool" }
func (b *boolFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.Store(v)
	return nil
}

// gvisorLog is gVisor's log target: it drops everything unless --netstack-log is on,
// and then writes gVisor's usual lines to out.
type gvisorLog struct{ out gvlog.Emitter }

func newGvisorLog(w io.Writer) gvisorLog {
	return gvisorLog{gvlog.GoogleEmitter{Writer: &gvlog.Writer{Next: w}}}
}

func (l gvisorLog) Emit(depth int, level gvlog.Level, ts time.Time, format string, v ...any) {
	if netstackLog.Load() {
		l.out.Emit(depth+1, level, ts, format, v...)
	}
}

var setupOnce sync.Once

// setupRoot finishes the command tree once every subcommand has registered itself.
func setupRoot() {
	setupOnce.Do(func() {
		rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badInput(err) })
		rootCmd.Long = fmt.Sprintf(rootCmd.Long, strings.Join(kubeproxy.ModeNames(), ", "))
		gvlog.SetTarget(newGvisorLog(os.Stderr))
		rootCmd.PersistentFlags().Var(&netstackLog, "netstack-log", "show gVisor netstack's own log (warnings about the simulation's internals) on stderr")
		rootCmd.PersistentFlags().Lookup("netstack-log").NoOptDefVal = "true"
		usageArgs(rootCmd)
	})
}

// exitCode is the process exit code for what Execute returned.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

func main() {
	setupRoot()
	err := rootCmd.Execute()
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterlab:", err)
	}
	os.Exit(exitCode(err))
}
