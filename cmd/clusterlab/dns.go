package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/dns"
)

func init() {
	dnsCmd := &cobra.Command{
		Use:   "dns",
		Short: "Cluster DNS per the Kubernetes DNS specification",
	}
	dnsCmd.AddCommand(newDNSServeCmd())
	rootCmd.AddCommand(dnsCmd)
}

func newDNSServeCmd() *cobra.Command {
	var (
		cfg  dns.ServeConfig
		pods string
	)
	cmd := &cobra.Command{
		Use:   "serve --manifests FILE_OR_DIR... [--listen 127.0.0.1:5353] [--zone cluster.local]... [--ttl 5] [--pods disabled|insecure|verified] [--upstream ADDR]",
		Short: "Serve cluster DNS for the objects in manifest files, reloading when they change",
		Long: `Serve answers DNS over UDP and TCP for the Services, EndpointSlices, Endpoints,
Pods and Namespaces in the manifests, as CoreDNS's kubernetes plugin would:

  dig @127.0.0.1 -p 5353 my-service.default.svc.cluster.local

--zone may repeat: the first is the cluster domain, further ones are reverse
zones such as 0.10.in-addr.arpa served for PTR; without any, PTR answers come
from in-addr.arpa and ip6.arpa. Names outside the zones go to --upstream, or
are REFUSED without one. Cluster IPs are served as the manifests give them.
Runs until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := dns.ParsePodMode(pods)
			if err != nil {
				return badInput(err)
			}
			cfg.Pods = mode
			cfg.Log = cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(cmdContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := dns.Serve(ctx, cfg); err != nil {
				if dns.IsInputError(err) {
					return badInput(err)
				}
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&cfg.Manifests, "manifests", nil, "manifest file or directory (repeatable)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:5353", "address to serve UDP and TCP on")
	f.StringArrayVar(&cfg.Zones, "zone", nil, "cluster domain (first), then reverse zones (repeatable; default cluster.local)")
	f.Uint32Var(&cfg.TTL, "ttl", dns.DefaultTTL, "TTL of the records, seconds (0-3600)")
	f.StringVar(&pods, "pods", "disabled", "pod records: disabled, insecure or verified")
	f.StringVar(&cfg.Upstream, "upstream", "", "upstream resolver for names outside the zones (IP or host:port)")
	return cmd
}

func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
