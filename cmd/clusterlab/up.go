package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/hostlink"
	"github.com/clusterlab/clusterlab/scenario"
)

const upLong = `Run a scenario's cluster and keep it running in real time, open to programs on this
machine, until Ctrl-C or SIGTERM (exit 0; everything it opened is closed).

The cluster is built as "clusterlab run" builds it (nodes, kube-proxy mode, manifests,
cluster DNS), but its clock follows the wall clock and its steps are not run. Opened,
each on loopback unless an address says otherwise:

  --dns 127.0.0.1:5353   the cluster's kube-dns, asked from --from's place (UDP, TCP):
                         dig @127.0.0.1 -p 5353 my-service.default.svc.cluster.local
  --socks ADDR           a SOCKS5 proxy (CONNECT, no authentication; IPv4, IPv6 and
                         names, resolved with --from's resolver):
                         curl --socks5-hostname 127.0.0.1:1080 http://my-service.default.svc.cluster.local
  --http-proxy ADDR      an HTTP proxy (CONNECT, and GET/POST/... with an absolute URI):
                         curl -x http://127.0.0.1:3128 http://my-service/

With --tun (Linux, root or CAP_NET_ADMIN) a TUN device (--tun-name, default clab0) is
bridged into the cluster as the external host of its name, with routes for the service
CIDRs, the pod CIDRs and the node addresses (or only --routes CIDR,...): curl
http://CLUSTER-IP/, curl http://NODE-IP:NODE-PORT/ and "dig @10.96.0.10" work from any
program on this machine, through --via's node and its kube-proxy. Routes that
overlap the host's own are refused unless --force. The device carries the alias
clusterlab-up; it is not persistent, so it and its routes go when clusterlab up ends,
even by a crash, and a start that finds one left (made persistent) removes it, saying
so; a device of that name that is not clusterlab up's is an error.

Proxied connections start at --from: pod:NAMESPACE/NAME, node:NAME or
external:NAME; by default external:local, a host added on the external network that
routes the service network through --via (default the first node), as a machine next to
a cluster with "ip route add 10.96.0.0/12 via NODE-IP" would. They cross that node's
datapath like any simulated packet: kube-proxy's rules decide the backend, conntrack
and masquerade apply (a backend sees a node's address for traffic from outside the pod
network), and pcap captures and traces see them: --pcap FILE writes a pcapng file of
the added hosts' links and every node's eth0 and cbr0 until clusterlab up stops.

A scenario's host_services (a list of {name, address: IP:PORT, target: HOST:PORT}) let
pods reach real servers on this machine: a pod's TCP connection to the address leaves
its node through the datapath and is relayed to target (default 127.0.0.1 and the
address's port). Only the addresses and ports listed are reachable.

Exit codes: 0 stopped by a signal; 1 an address cannot be bound, or the TUN device
cannot be made (no permission, overlapping routes); 2 a bad scenario or flag.`

func init() {
	var (
		mode, from, via string
		dnsAddr         string
		socks, httpProx string
		tun, force      bool
		tunName         string
		routes          []string
		pcap            string
	)
	cmd := &cobra.Command{
		Use:   "up SCENARIO.yaml [--dns 127.0.0.1:5353] [--socks 127.0.0.1:1080] [--http-proxy 127.0.0.1:3128] [--from pod:NS/NAME] [--tun [--tun-name clab0] [--routes CIDR,...] [--force]]",
		Short: "Run a scenario's cluster in real time, open to real programs (DNS, SOCKS5, HTTP proxy)",
		Long:  upLong,
		Example: `  clusterlab up testdata/scenarios/quickstart.yaml --socks 127.0.0.1:1080 --http-proxy 127.0.0.1:3128
  curl --socks5-hostname 127.0.0.1:1080 http://web.default.svc.cluster.local/
  curl -x http://127.0.0.1:3128 http://web/
  dig @127.0.0.1 -p 5353 web.default.svc.cluster.local
  clusterlab up testdata/scenarios/quickstart.yaml --mode ipvs --socks 127.0.0.1:1080 --from pod:default/client
  sudo clusterlab up testdata/scenarios/quickstart.yaml --tun && curl http://10.106.83.202/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkModeFlag("--mode", mode); err != nil {
				return err
			}
			for _, a := range []struct{ flag, v string }{{"--dns", dnsAddr}, {"--socks", socks}, {"--http-proxy", httpProx}} {
				if a.v == "" {
					continue
				}
				ap, err := netip.ParseAddrPort(a.v)
				if err != nil {
					return badInput(fmt.Errorf("%s: want IP:PORT, got %q", a.flag, a.v))
				}
				if !ap.Addr().IsLoopback() {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s %s is not a loopback address: other machines can reach the cluster through it\n", a.flag, a.v)
				}
			}
			var tunRoutes []netip.Prefix
			for _, r := range routes {
				p, err := netip.ParsePrefix(strings.TrimSpace(r))
				if err != nil {
					return badInput(fmt.Errorf("--routes: want CIDR,..., got %q", r))
				}
				tunRoutes = append(tunRoutes, p.Masked())
			}
			if !tun && (len(routes) > 0 || force || cmd.Flags().Changed("tun-name")) {
				return badInput(fmt.Errorf("--routes, --force and --tun-name go with --tun"))
			}
			s, err := scenario.Load(args[0])
			if err != nil {
				return badInput(err)
			}
			live, err := scenario.Start(s, scenario.Options{Mode: mode})
			if err != nil {
				return scenarioErr(err)
			}
			defer live.Close()
			link, err := hostlink.Open(live, hostlink.Config{From: from, Via: via, DNS: dnsAddr, SOCKS: socks, HTTPProxy: httpProx, Log: cmd.ErrOrStderr()})
			if err != nil {
				if strings.HasPrefix(err.Error(), "--from") || strings.HasPrefix(err.Error(), "adding the host") {
					return badInput(err)
				}
				return err
			}
			defer link.Close()
			var dev *hostlink.TUN
			if tun {
				logf := func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
				if dev, err = hostlink.OpenTUN(live, hostlink.TUNConfig{Name: tunName, Routes: tunRoutes, Force: force, Via: via}, logf); err != nil {
					return fmt.Errorf("--tun: %w", err)
				}
				defer dev.Close()
			}
			if pcap != "" {
				stopCap, points, err := upCapture(live, link, dev, pcap)
				if err != nil {
					return fmt.Errorf("--pcap: %w", err)
				}
				defer stopCap()
				fmt.Fprintf(cmd.OutOrStdout(), "capturing %s to %s (pcapng)\n", strings.Join(points, ", "), pcap)
			}
			ctx, stop := signal.NotifyContext(cmdContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			printUp(cmd.OutOrStdout(), live, link, dev, len(s.Steps))
			<-ctx.Done()
			fmt.Fprintln(cmd.OutOrStdout(), "stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "", "kube-proxy mode (default: the scenario's)")
	f.StringVar(&from, "from", "", "where proxied connections start: pod:NS/NAME, node:NAME or external:NAME (default external:local)")
	f.StringVar(&via, "via", "", "the node external:local routes the service network through (default the first node)")
	f.StringVar(&dnsAddr, "dns", "127.0.0.1:5353", "address to serve the cluster DNS on (\"\" for none)")
	f.StringVar(&socks, "socks", "", "address of a SOCKS5 proxy into the cluster, such as 127.0.0.1:1080")
	f.StringVar(&httpProx, "http-proxy", "", "address of an HTTP proxy into the cluster, such as 127.0.0.1:3128")
	f.StringVar(&pcap, "pcap", "", "write a pcapng file of the proxies' and the TUN's host links and every node's eth0 and cbr0")
	f.BoolVar(&tun, "tun", false, "make a TUN device routing the cluster's networks into it (Linux, CAP_NET_ADMIN)")
	f.StringVar(&tunName, "tun-name", hostlink.DefaultTUNName, "the TUN device's name")
	f.StringSliceVar(&routes, "routes", nil, "with --tun: route only these CIDRs (default the service CIDRs, pod CIDRs and node addresses)")
	f.BoolVar(&force, "force", false, "with --tun: install routes that overlap the host's own")
	cmd.RegisterFlagCompletionFunc("mode", completeModes(false))
	rootCmd.AddCommand(cmd)
}

// printUp says what runs and what is open.
func printUp(w io.Writer, live *scenario.Live, link *hostlink.Link, dev *hostlink.TUN, steps int) {
	rep := live.Report()
	fmt.Fprintf(w, "cluster %q up: kube-proxy %s %s, DNS %s, seed %d\n", rep.Name, rep.Mode, rep.Version, rep.DNS, rep.Seed)
	for _, n := range rep.Nodes {
		fmt.Fprintf(w, "  node %s %s pods %s\n", n.Name, n.IP, n.PodCIDR)
	}
	for _, s := range rep.Services {
		fmt.Fprintf(w, "  service %s %s %s: %s\n", s.Name, s.Type, s.ClusterIP, strings.Join(s.Ports, "; "))
	}
	for _, p := range rep.Pods {
		fmt.Fprintf(w, "  pod %s on %s at %s\n", p.Name, p.Node, p.IP)
	}
	for _, hs := range live.HostServices() {
		fmt.Fprintf(w, "  host service %s\n", hs)
	}
	if steps > 0 {
		fmt.Fprintf(w, "  (the scenario's %d steps are not run: clusterlab run runs them)\n", steps)
	}
	for _, line := range link.Opened() {
		fmt.Fprintln(w, line)
	}
	if dev != nil {
		for _, line := range dev.Opened() {
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintln(w, "Ctrl-C stops it.")
}

// upCapture captures, into one pcapng file, the links of the hosts that stand for this
// machine and every node's uplink and pod bridge.
func upCapture(live *scenario.Live, link *hostlink.Link, dev *hostlink.TUN, file string) (stop func(), points []string, err error) {
	c := live.Cluster()
	if from := link.From(); strings.HasPrefix(from, "external:") {
		points = append(points, "external/"+strings.TrimPrefix(from, "external:"))
	}
	if dev != nil {
		points = append(points, "external/"+dev.Name())
	}
	for _, n := range c.Nodes() {
		points = append(points, n.Name()+"/eth0", n.Name()+"/cbr0")
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, nil, err
	}
	stopCap, err := c.CaptureNG(points, f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return func() { stopCap(); f.Close() }, points, nil
}
