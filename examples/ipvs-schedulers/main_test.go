package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

func TestIPVSSchedulers(t *testing.T) {
	if !hasMode(kubeproxy.IPVS) {
		t.Skip("the IPVS mode is not in this build")
	}
	var out bytes.Buffer
	if err := run(&out, []string{"rr", "sh", "lc", "mh"}); err != nil {
		t.Fatal(err)
	}
	rr, err := measure("rr")
	if err != nil {
		t.Fatal(err)
	}
	if rr.perBackend != [3]int{20, 20, 20} {
		t.Errorf("rr takes the backends in turn: want 20 each, got %v", rr.perBackend)
	}
	sh, err := measure("sh")
	if err != nil {
		t.Fatal(err)
	}
	if sh.pinned != clients {
		t.Errorf("sh hashes the client's address: every client should stick to one backend, %d of %d did", sh.pinned, clients)
	}
	// kube-proxy gives mh the mh-port flag: the source port is hashed too.
	mh, err := measure("mh")
	if err != nil {
		t.Fatal(err)
	}
	if mh.pinned == clients || mh.failed != 0 {
		t.Errorf("mh with mh-port hashes the source port too: clients should not all stick (%d of %d did)", mh.pinned, clients)
	}
	lc, err := measure("lc")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range lc.perBackend {
		if n != 20 {
			t.Errorf("lc counts the closed connections' inactive entries: it should spread evenly, got %v", lc.perBackend)
		}
	}
	if !strings.Contains(out.String(), "rr        20   20   20       0  0 of 6") {
		t.Errorf("table:\n%s", out.String())
	}
}

func hasMode(m kubeproxy.Mode) bool {
	for _, x := range kubeproxy.Modes() {
		if x == m {
			return true
		}
	}
	return false
}
