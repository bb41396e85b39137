package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestNetworkPolicyClusterIPIPBlock(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"egress ipBlock 10.96.0.80/32 port 80, client -> web's ClusterIP: dropped (dropped by NetworkPolicy at POSTROUTING: pod default/client is isolated for egress (policies: default/client-egress); no rule allows it)",
		"egress podSelector app=web port 8080, client -> web's ClusterIP: connected to default/web-0",
		"laptop -> NodePort on node-b: connected to default/web-0 (it saw 10.244.1.1)",
		"laptop -> NodePort on node-a: dropped (dropped by NetworkPolicy at POSTROUTING: pod default/web-0 is isolated for ingress (policies: default/web-from-laptop); no rule allows it)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}
