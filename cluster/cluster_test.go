package cluster

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
)

// Every field of netsim.Config is a field of Config, and Config.network copies it: a
// field added to the network is offered by the cluster too (or this test says so).
func TestConfigCoversTheNetwork(t *testing.T) {
	ct := reflect.TypeOf(Config{})
	var cfg Config
	cv := reflect.ValueOf(&cfg).Elem()
	nt := reflect.TypeOf(netsim.Config{})
	for i := 0; i < nt.NumField(); i++ {
		f := nt.Field(i)
		switch f.Name {
		case "Nodes", "NonMasqueradeCIDRs": // from Config.Nodes and the service CIDRs
			continue
		}
		cf, ok := ct.FieldByName(f.Name)
		if !ok || cf.Type != f.Type {
			t.Errorf("netsim.Config.%s (%s) has no counterpart in cluster.Config", f.Name, f.Type)
			continue
		}
		// A value that is not the zero value, to see it copied.
		v := cv.FieldByName(f.Name)
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(1280 + i))
		case reflect.Uint64:
			v.SetUint(uint64(7 + i))
		case reflect.Slice:
			v.Set(reflect.ValueOf([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}))
		case reflect.Struct:
			v.Set(reflect.ValueOf(netip.MustParsePrefix("192.0.2.0/24")))
		default:
			t.Fatalf("field %s: kind %s not handled by the test", f.Name, v.Kind())
		}
	}
	cfg.Nodes = []NodeConfig{{Name: "n", Zone: "z", Labels: map[string]string{"a": "b"}}}
	svc := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	nc := cfg.network(svc)
	nv := reflect.ValueOf(nc)
	for i := 0; i < nt.NumField(); i++ {
		name := nt.Field(i).Name
		if name == "Nodes" || name == "NonMasqueradeCIDRs" {
			continue
		}
		if !reflect.DeepEqual(nv.Field(i).Interface(), cv.FieldByName(name).Interface()) {
			t.Errorf("network().%s = %v, want %v", name, nv.Field(i), cv.FieldByName(name))
		}
	}
	if len(nc.Nodes) != 1 || nc.Nodes[0].Name != "n" || !reflect.DeepEqual(nc.NonMasqueradeCIDRs, svc) {
		t.Errorf("network() nodes %+v, non-masquerade %v", nc.Nodes, nc.NonMasqueradeCIDRs)
	}
}

// The cluster's Node objects carry the zone and labels of the configuration, and pod
// traffic to the service CIDRs keeps the pod's address (they are not masqueraded as
// traffic leaving the cluster is).
func TestNodeObjectsAndServiceCIDRs(t *testing.T) {
	st, err := service.NewStore(service.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, Config{Store: st, Nodes: []NodeConfig{{Name: "node-a", Zone: "zone-1", Labels: map[string]string{"tier": "edge"}}}})
	obj, ok := c.Store().GetNode("node-a")
	if !ok || obj.Labels["topology.kubernetes.io/zone"] != "zone-1" || obj.Labels["tier"] != "edge" || obj.Labels["kubernetes.io/hostname"] != "node-a" {
		t.Fatalf("node object %v %v", ok, obj)
	}
	if got := c.Network.Config().NonMasqueradeCIDRs; len(got) != 1 || got[0].String() != "10.100.0.0/16" {
		t.Errorf("the network's non-masquerade CIDRs %v, want the store's service CIDRs", got)
	}
	if c.Node("node-a").Cluster() != c || c.Node("node-a").Config().Zone != "zone-1" {
		t.Errorf("node's cluster and config")
	}
	if _, err := New(Config{LoadBalancerIdleTimeout: -time.Second}); err == nil {
		t.Errorf("a negative idle timeout was accepted")
	}
}

// Config returns the configuration with every default filled in, the network's and the
// store's too: proxies read the cluster CIDRs from it.
func TestConfigDefaultsFilledIn(t *testing.T) {
	c := newTestCluster(t, Config{})
	cfg := c.Config()
	if len(cfg.ClusterCIDRs) != 1 || cfg.ClusterCIDRs[0].String() != "10.244.0.0/16" || len(cfg.NodeCIDRs) != 1 || cfg.MTU != 1500 ||
		cfg.ExternalCIDR.String() != "203.0.113.0/24" || cfg.LoadBalancerCIDR.String() != "198.51.100.0/24" {
		t.Errorf("network defaults: %+v", cfg)
	}
	if len(cfg.ServiceCIDRs) != 1 || cfg.ServiceCIDRs[0].String() != "10.96.0.0/12" || cfg.NodePortRange.Size == 0 || cfg.LoadBalancerMode != "nodeport" {
		t.Errorf("store defaults: %v %+v %s", cfg.ServiceCIDRs, cfg.NodePortRange, cfg.LoadBalancerMode)
	}
}
