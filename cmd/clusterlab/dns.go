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
		Long: `Cluster DNS per the Kubernetes DNS-Based Service Discovery specification (schema
1.1.0), with CoreDNS's kubernetes-plugin conventions where the specification is
silent. "dns serve" answers for the objects in manifest files on a real port.`,
		Example: dnsServeExamples,
	}
	dnsCmd.AddCommand(newDNSServeCmd())
	rootCmd.AddCommand(dnsCmd)
}

func newDNSServeCmd() *cobra.Command {
	var (
		cfg       dns.ServeConfig
		pods      string
		allowRecs []string
	)
	cmd := &cobra.Command{
		Use:     "serve --manifests FILE_OR_DIR... [--listen 127.0.0.1:5353] [--zone cluster.local]... [--ttl 5] [--pods disabled|insecure|verified] [--upstream ADDR [--allow-recursion CIDR,...]]",
		Example: dnsServeExamples,
		Short:   "Serve cluster DNS for the objects in manifest files, reloading when they change",
		Long: `Serve answers DNS over UDP and TCP for the Services, EndpointSlices, Endpoints,
Pods and Namespaces in the manifests, as CoreDNS's kubernetes plugin would:

  dig @127.0.0.1 -p 5353 my-service.default.svc.cluster.local

--zone may repeat: the first is the cluster domain, further ones are reverse
zones such as 0.10.in-addr.arpa served for PTR; without any, PTR answers come
from in-addr.arpa and ip6.arpa. Names outside the zones go to --upstream, or
are REFUSED without one. With --upstream, the server first sends the upstream a probe
for a random name: if it comes back, the upstream forwards to this server (a loop) and
serve stops (exit 2); at most 64 upstream queries are in flight, at most 16 of them
for one client address, more get SERVFAIL at once (counted on the log); an upstream
exchange gets 2s. Only clients in --allow-recursion (CIDR,...; default loopback and the
cluster's pod networks: the manifests' Nodes' podCIDRs, else 10.244.0.0/16) have names
outside the zones forwarded; others get REFUSED, as from CoreDNS's acl or BIND's
allow-recursion. Names in the zones are answered to anyone. With --upstream on a
--listen address that is not loopback, a warning on stderr says the server is an open
forwarder for those networks.

--manifests takes files and directories (their *.yaml, *.yml and *.json files); it
may repeat, and arguments after the flags are more manifests. Namespaces, Services,
EndpointSlices, Endpoints and Pods are served; documents and List items of other
kinds (Deployments, ConfigMaps, ... as "kubectl get all -A -o yaml" prints them)
are skipped, and the log says how many of each. The objects served are validated
as the API server validates them on create (package service's validation,
without the checks that need a cluster's service CIDR or node-port range); each
problem is reported with its file, line and field, and nothing is served. Cluster IPs are served as the manifests give them, whatever
range they are in. Hand-written manifests get what the API server and its
controllers would add, each said on the log: a Service without a clusterIP gets
one (from 10.96.0.0/12, fd00:10:96::/112 for IPv6; the same one on every reload
while no other Service takes it), and a Service with a selector but no
EndpointSlice or Endpoints in the manifests gets the EndpointSlices the controller
would make from the manifests' Pods (their status.podIP and Ready condition).

The files are checked every second and reloaded when their content changes; a
reload that fails to parse or to validate keeps the previous data and says why,
once: a file deleted is logged when it goes and again only when something changes. Runs until
interrupted (exit 0). Exit 2: bad flags or manifests; exit 1: the address cannot
be bound.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Manifests = append(cfg.Manifests, args...)
			mode, err := dns.ParsePodMode(pods)
			if err != nil {
				return badInput(err)
			}
			cfg.Pods = mode
			if cmd.Flags().Changed("allow-recursion") {
				if cfg.AllowRecursion, err = dns.ParseAllowRecursion(allowRecs); err != nil {
					return badInput(err)
				}
			}
			cfg.Log = cmd.OutOrStdout()
			cfg.Warn = cmd.ErrOrStderr()
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
	f.StringSliceVar(&allowRecs, "allow-recursion", nil, "client networks whose outside names go to --upstream, CIDR,... (default: loopback and the manifests' Nodes' podCIDRs, else 10.244.0.0/16)")
	return cmd
}

const dnsServeExamples = `  clusterlab dns serve --manifests testdata/dns/my-service.yaml --listen 127.0.0.1:5353 &
  dig @127.0.0.1 -p 5353 my-service.default.svc.cluster.local
  dig @127.0.0.1 -p 5353 SRV _http._tcp.my-service.default.svc.cluster.local
  dig @127.0.0.1 -p 5353 -x 10.244.1.5
  kubectl get -A -o yaml svc,endpointslices,pods,namespaces > cluster.yaml
  clusterlab dns serve --manifests cluster.yaml --zone cluster.local --zone 0.10.in-addr.arpa --pods insecure --upstream 1.1.1.1`

func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
