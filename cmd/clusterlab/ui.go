package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/scenario"
	"github.com/clusterlab/clusterlab/ui"
)

const uiLong = `Serve a local web view of a scenario's cluster (with no file, the demo's): a map of
its nodes, pods (labels, IPs) and Services (ClusterIP, NodePort, load balancer and
external IPs, the pods behind them); pick a source (a pod, a node, an external host)
and a destination (a Service's port, a pod, a DNS name) and see the packet's way drawn
top to bottom, node by node and hook by hook, with every rule that matched, the
conntrack entries, DNAT and masquerade, beside the same trace as text; every branch
with its probability; the answer's way; every kube-proxy mode side by side; the
scenario's steps on a timeline with the endpoints and conntrack entries after each, and
the live packets of the steps as they are traced. The picture exports as SVG or PNG,
and the address bar holds a permalink to the view.

Everything the page needs is in the binary (no network needed). The server listens on
127.0.0.1:8080 by default; an address that is not a loopback one needs --allow-remote
(anyone who reaches it can run traces). It reads no file but the scenario.`

func init() {
	var listen string
	var allowRemote bool
	cmd := &cobra.Command{
		Use:   "ui [SCENARIO.yaml] [--listen 127.0.0.1:8080]",
		Short: "Watch a packet cross the cluster in a browser (a local web view)",
		Long:  uiLong,
		Example: `  clusterlab ui
  clusterlab ui testdata/scenarios/clusterip-trace.yaml --listen 127.0.0.1:9090`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return badInput(fmt.Errorf("--listen %q: want HOST:PORT, such as 127.0.0.1:8080", listen))
			}
			if !isLoopback(host) {
				if !allowRemote {
					return badInput(fmt.Errorf("--listen %s: not a loopback address; give --allow-remote to serve other machines too (anyone who reaches it can run traces)", listen))
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: warning: serving on %s, beyond this machine: anyone who reaches it can see the scenario and run traces\n", listen)
			}
			var s *scenario.Scenario
			if len(args) == 1 {
				s, err = scenario.Load(args[0])
			} else {
				s, err = scenario.DemoScenario()
			}
			if err != nil {
				return badInput(err)
			}
			srv, err := ui.New(s)
			if err != nil {
				return scenarioErr(err)
			}
			srv.AnyHost = allowRemote
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmdContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
			name := s.Name
			if name == "" {
				name = s.File
			}
			fmt.Fprintf(cmd.OutOrStdout(), "clusterlab ui: %s\nopen http://%s/ (Ctrl-C stops)\n", name, ln.Addr())
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "HOST:PORT to serve on (port 0: any free port)")
	cmd.Flags().BoolVar(&allowRemote, "allow-remote", false, "allow a --listen address that is not a loopback one (prints a warning)")
	rootCmd.AddCommand(cmd)
}

// isLoopback says whether host (an IP address or "localhost") is this machine only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
