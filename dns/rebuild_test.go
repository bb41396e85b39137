package dns

import (
	"context"
	"sync"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/clusterlab/clusterlab/service"
)

// TestConcurrentQueriesAfterChange: queries arriving together after a change
// (A and AAAA sent back to back by a stub) all see the change; none is
// answered from the index being replaced while another query rebuilds it.
func TestConcurrentQueriesAfterChange(t *testing.T) {
	src := NewStaticSource()
	s, err := New(src, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 200; round++ {
		src.Set(service.NewService("default/svc", service.ClusterIP("10.96.0.50"), service.Port("http", 80, 80)))
		var wg sync.WaitGroup
		rcodes := make([]int, 4)
		for i := range rcodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := new(mdns.Msg)
				m.SetQuestion("svc.default.svc.cluster.local.", mdns.TypeA)
				rcodes[i] = s.Handle(context.Background(), m, "udp").Rcode
			}()
		}
		wg.Wait()
		for i, rc := range rcodes {
			if rc != mdns.RcodeSuccess {
				t.Fatalf("round %d: query %d after the service appeared: %s", round, i, mdns.RcodeToString[rc])
			}
		}
		src.Set() // gone again
	}
}
