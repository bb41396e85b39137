package kubeproxy

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// Every registered mode passes the basic checks: a ClusterIP reaches a backend from a
// pod, a NodePort from outside, and a service without endpoints answers nothing. A new
// mode gets them by registering its descriptor.
func TestEveryModeBasics(t *testing.T) {
	if len(Registered()) < 3 {
		t.Fatalf("registered modes %v", ModeNames())
	}
	for _, m := range Registered() {
		t.Run(string(m.Mode), func(t *testing.T) {
			c := newCluster(t, m.Mode)
			backends(t, c)
			if err := c.Apply(
				service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("http", 80, 9376), service.NodePort()),
				service.NewService("default/empty", service.Selector("app=nothing"), service.Port("http", 80, 9376)),
			); err != nil {
				t.Fatal(err)
			}
			client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-b")))
			if err != nil {
				t.Fatal(err)
			}
			if w := ask(t, client.Net(), vipOf(t, c, "my-service", 80).String()); !strings.HasPrefix(w.Pod, "default/web-") {
				t.Errorf("ClusterIP from a pod: answered by %q", w.Pod)
			}
			svc, _ := c.Store().GetService("default", "my-service")
			ext, err := c.AddExternalHost("outside", netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			np := netip.AddrPortFrom(c.Node("node-a").IP(), uint16(svc.Spec.Ports[0].NodePort))
			if w := ask(t, ext.Net(), np.String()); !strings.HasPrefix(w.Pod, "default/web-") {
				t.Errorf("NodePort %s from outside: answered by %q", np, w.Pod)
			}
			empty := vipOf(t, c, "empty", 80)
			if w, err := tryAsk(client.Net(), empty.String()); err == nil {
				t.Errorf("a service without endpoints answered: %+v", w)
			}
			if !m.Semantics.Terminates {
				r, err := c.ProbeOne(netsim.Probe{From: "pod:default/client", Proto: netfilter.ProtoTCP, Dst: empty, Mode: netsim.ProbeConnect})
				if err != nil || r.Result != netsim.ResultRefused {
					t.Errorf("a service without endpoints: %s %v, want refused", r.Outcome, err)
				}
			}
			if errs := c.Errors(); len(errs) > 0 {
				t.Errorf("background errors: %v", errs)
			}
		})
	}
}

// tryAsk is ask that reports failure instead of failing the test.
func tryAsk(n *netsim.Net, addr string) (netsim.Whoami, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := n.DialContext(ctx, "tcp", addr)
	if err != nil {
		return netsim.Whoami{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(conn, "hi")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return netsim.Whoami{}, err
	}
	return netsim.ParseWhoami(line)
}

// The table: one reference mode, the descriptors complete, Lookup and Modes agree.
func TestModeTable(t *testing.T) {
	ref := Reference()
	if ref.Mode != IPTables || !ref.Reference {
		t.Errorf("reference mode %s", ref.Mode)
	}
	refs := 0
	for i, m := range Registered() {
		if m.Reference {
			refs++
		}
		if got, ok := Lookup(m.Mode); !ok || got.Mode != m.Mode {
			t.Errorf("Lookup(%s) = %v %v", m.Mode, got.Mode, ok)
		}
		if ModeNames()[i] != string(m.Mode) || Modes()[i] != m.Mode {
			t.Errorf("order: %v / %v at %d", ModeNames(), Modes(), i)
		}
		if m.Summary == "" || m.New == nil || len(m.Demo) == 0 || len(m.KernelNeeds) == 0 || m.Semantics.Name != string(m.Mode) {
			t.Errorf("%s: incomplete descriptor %+v", m.Mode, m)
		}
		for _, v := range []string{m.Versions.First, m.Versions.Last, m.Versions.Default} {
			if _, err := Minor(v); err != nil {
				t.Errorf("%s: version %q: %v", m.Mode, v, err)
			}
		}
		if m.Reference && len(m.Differences) > 0 {
			t.Errorf("the reference mode has differences from itself: %v", m.Differences)
		}
		for _, d := range m.Differences {
			if !strings.HasPrefix(d.Name, string(m.Mode)+"-") || d.Doc == "" {
				t.Errorf("%s: difference %+v", m.Mode, d)
			}
		}
	}
	if refs != 1 {
		t.Errorf("%d reference modes", refs)
	}
	if _, ok := Lookup("nosuch"); ok {
		t.Error("Lookup of an unknown mode")
	}
	if s := SemanticsOf("my-cni"); s != ref.Semantics {
		t.Errorf("an unknown mode's semantics %+v, want the reference's", s)
	}
	ipvsInfo, _ := Lookup(IPVS)
	if ipvsInfo.Scheduler(Options{}) != "rr" || ipvsInfo.Scheduler(Options{Scheduler: "mh"}) != "mh" || ref.Scheduler(Options{Scheduler: "mh"}) != "" {
		t.Error("Scheduler")
	}
}

// Register refuses what would make the table ambiguous.
func TestRegisterRefuses(t *testing.T) {
	newFn := func(*cluster.Node, Options, proxy.NodeConfig) (cluster.Proxy, error) { return nil, nil }
	for name, m := range map[string]ModeInfo{
		"no name":          {New: newFn},
		"no constructor":   {Mode: "x"},
		"twice":            {Mode: IPTables, New: newFn},
		"second reference": {Mode: "x-ref", New: newFn, Reference: true},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Register accepted %+v", m)
				}
			}()
			Register(m)
		})
	}
	if slices.Contains(ModeNames(), "x-ref") || slices.Contains(ModeNames(), "x") {
		t.Errorf("a refused mode was registered: %v", ModeNames())
	}
}

// Factory refuses an unknown mode and another mode's flags, naming the modes it has.
func TestFactoryRefuses(t *testing.T) {
	_, err := cluster.New(cluster.Config{Proxy: Factory(Options{Mode: "nosuch"})})
	if err == nil || !strings.Contains(err.Error(), `kube-proxy mode "nosuch" is not available (have iptables, ipvs, nftables, userspace`) {
		t.Errorf("unknown mode: %v", err)
	}
	_, err = cluster.New(cluster.Config{Proxy: Factory(Options{Mode: IPTables, ModeConfig: IPVSConfig{}})})
	if err == nil || !strings.Contains(err.Error(), "the iptables mode does not take kubeproxy.IPVSConfig") {
		t.Errorf("another mode's flags: %v", err)
	}
}

// A mode is built only on nodes of its families, with the node settings it needs.
func TestBuildFamiliesAndSettings(t *testing.T) {
	c, err := cluster.New(cluster.Config{
		NodeCIDRs:    []netip.Prefix{netip.MustParsePrefix("fd00:18::/64")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:244::/56")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:96::/108")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n := c.Node("node-a")
	built := false
	v4only := ModeInfo{Mode: "v4only", Families: []corev1.IPFamily{corev1.IPv4Protocol},
		New: func(*cluster.Node, Options, proxy.NodeConfig) (cluster.Proxy, error) { built = true; return nil, nil }}
	if _, err := v4only.build(n, Options{}); err == nil || built || !strings.Contains(err.Error(), "the v4only mode does not serve IPv6 (node address fd00:18::2)") {
		t.Errorf("an IPv6 node: %v (built %v)", err, built)
	}
	both := v4only
	both.Families = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	both.Settings = func(_ proxy.NodeConfig, s *netsim.NodeSettings) { s.Hairpin = !s.Hairpin }
	before := n.Settings().Hairpin
	if _, err := both.build(n, Options{}); err != nil || !built || n.Settings().Hairpin == before {
		t.Errorf("build: %v, built %v, settings applied %v", err, built, n.Settings().Hairpin != before)
	}
}
