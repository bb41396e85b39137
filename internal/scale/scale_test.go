package scale

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// TestTwin: examples/scale's 2-node configuration gives the probed Services as many pods
// as the large cluster's, within 2,000 pods.
func TestTwin(t *testing.T) {
	for _, c := range []struct {
		nodes, services, pods  int
		tPods, tServed, probed int
	}{
		{50, 1000, 3000, 1998, 666, 666},
		{5000, 10000, 150000, 1995, 133, 133},
		{1000, 10000, 30000, 1998, 666, 666},
		{4, 20, 40, 40, 20, 20},
		{4, 20, 10, 10, 10, 10}, // fewer pods than Services: those with one
		{4, 20, 0, 0, 0, 20},
	} {
		cfg := Config{Nodes: c.nodes, Services: c.services, Pods: c.pods, Seed: 1, ShareRules: true}
		tw, probed := cfg.Twin()
		if tw.Nodes != 2 || tw.Services != c.services || tw.Pods != c.tPods || tw.Served != c.tServed || probed != c.probed || !tw.ShareRules {
			t.Errorf("%d/%d/%d: twin %d/%d/%d served %d, probed %d; want 2/%d/%d served %d, probed %d",
				c.nodes, c.services, c.pods, tw.Nodes, tw.Services, tw.Pods, tw.Served, probed, c.services, c.tPods, c.tServed, c.probed)
		}
		if err := tw.Validate(); err != nil {
			t.Errorf("%d/%d/%d: twin invalid: %v", c.nodes, c.services, c.pods, err)
		}
	}
	if err := (Config{Nodes: 1, Services: 2, Served: 3}).Validate(); err == nil {
		t.Error("served 3 of 2 services validated")
	}
}

// TestServedAndPodNodes: with Served the pods select only the first Served Services (the
// store's EndpointSlices say so), and PodNodes names the nodes the store bound each
// Service's pods to.
func TestServedAndPodNodes(t *testing.T) {
	b, err := Build(Config{Nodes: 3, Services: 10, Pods: 12, Served: 4, Seed: 1, Mode: kubeproxy.IPTables, ShareRules: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := b.Store()
	want := make([][]int32, 10)
	for _, p := range st.ListPods() {
		k, _ := strconv.Atoi(strings.TrimPrefix(p.Labels["app"], "svc-"))
		n, _ := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "node-"))
		if !slices.Contains(want[k], int32(n)) {
			want[k] = append(want[k], int32(n))
		}
	}
	for k := range want {
		slices.Sort(want[k])
		if !slices.Equal(want[k], b.PodNodes[k]) {
			t.Errorf("service %d: PodNodes %v, the store's pods are on %v", k, b.PodNodes[k], want[k])
		}
		eps := 0
		for _, sl := range st.EndpointSlicesFor("ns-0", "svc-"+strconv.Itoa(k)) {
			eps += len(sl.Endpoints)
		}
		if wantEps := map[bool]int{true: 3, false: 0}[k < 4]; eps != wantEps {
			t.Errorf("service %d: %d endpoints, want %d", k, eps, wantEps)
		}
	}
}

// TestProberRemote: a Remote prober's client is never on a node holding the Service's
// pods when another node has a client; a plain one is, sometimes; Services limits the
// Services probed; every probe reaches a pod.
func TestProberRemote(t *testing.T) {
	b, err := Build(Config{Nodes: 2, Services: 6, Pods: 8, Served: 4, Seed: 1, Mode: kubeproxy.IPTables, ShareRules: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, remote := range []bool{false, true} {
		p := b.NewProber(1)
		p.Services, p.Remote = 4, remote
		local := 0
		for i := 0; i < 400; i++ {
			node, svc := p.pick()
			if svc >= 4 {
				t.Fatalf("remote %v: service %d picked, want < 4", remote, svc)
			}
			if slices.Contains(b.PodNodes[svc], int32(node)) {
				local++
			}
		}
		if remote && local > 0 || !remote && local == 0 {
			t.Errorf("remote %v: %d of 400 probes from a node with the service's pods", remote, local)
		}
		if _, _, err := p.Rate(200); err != nil {
			t.Errorf("remote %v: %v", remote, err)
		}
	}
	am := b.NewProber(1)
	am.Among = []int{1, 3}
	for i := 0; i < 100; i++ {
		if _, svc := am.pick(); svc != 1 && svc != 3 {
			t.Fatalf("Among [1 3]: service %d", svc)
		}
	}
	// One node: no remote node exists; the prober uses the one there is.
	one, err := Build(Config{Nodes: 1, Services: 2, Pods: 2, Seed: 1, Mode: kubeproxy.IPTables})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	p := one.NewProber(1)
	p.Remote = true
	if _, _, err := p.Rate(50); err != nil {
		t.Error(err)
	}
}

// TestProberWithin: a Within prober's clients and the pods of the Services it probes are
// on the first Within nodes, and a Remote one's client is on none of those pods' nodes.
func TestProberWithin(t *testing.T) {
	b, err := Build(Config{Nodes: 6, Services: 12, Pods: 24, Seed: 1, Mode: kubeproxy.IPTables, ShareRules: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := b.NewProber(1)
	p.Remote, p.Within = true, 3
	seen := map[int]bool{}
	for i := 0; i < 300; i++ {
		node, svc := p.pick()
		seen[svc] = true
		if node >= 3 || b.PodNodes[svc][len(b.PodNodes[svc])-1] >= 3 {
			t.Fatalf("probe from node %d to service %d (pods on %v): want both within 3 nodes", node, svc, b.PodNodes[svc])
		}
		if slices.Contains(b.PodNodes[svc], int32(node)) {
			t.Fatalf("remote probe from node %d to service %d on %v", node, svc, b.PodNodes[svc])
		}
	}
	// Service k's pods are on node k mod 6: those of 0-2 and 6-8 are within.
	if len(seen) != 6 {
		t.Errorf("services probed %v, want the 6 within", seen)
	}
	if _, _, err := p.Rate(100); err != nil {
		t.Error(err)
	}
	q := b.NewProber(1)
	q.Services, q.Within = 1, 6 // service 0 is on node 0: within
	if _, svc := q.pick(); svc != 0 {
		t.Errorf("service %d, want 0", svc)
	}
	r := b.NewProber(1)
	r.Within = 1 // only services 0 and 6 are within node 0; from node 0 (not remote)
	for i := 0; i < 50; i++ {
		if node, svc := r.pick(); node != 0 || svc%6 != 0 {
			t.Fatalf("within 1: node %d service %d", node, svc)
		}
	}
}

// TestProberAdvance: every expireEvery probes the prober advances the cluster's clock by
// an hour (conntrack entries expire), and Rate counts that time apart.
func TestProberAdvance(t *testing.T) {
	b, err := Build(Config{Nodes: 2, Services: 2, Pods: 2, Seed: 1, Mode: kubeproxy.IPTables, ShareRules: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := b.NewProber(1)
	p.expireEvery = 10
	t0 := b.Clock().Now()
	if _, _, err := p.Rate(25); err != nil {
		t.Fatal(err)
	}
	if got := b.Clock().Now().Sub(t0); got < 2*time.Hour || p.advances != 2 {
		t.Errorf("after 25 probes: clock moved %v in %d advances, want 2h in 2", got, p.advances)
	}
	if p.advWall <= 0 {
		t.Errorf("advances took %v of wall time, want it counted", p.advWall)
	}
}
