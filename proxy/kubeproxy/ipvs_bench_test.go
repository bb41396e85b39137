package kubeproxy

import (
	"bufio"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/service"
)

// Connections per second through the IPVS handler beside the iptables emulator, on the
// same cluster shape in the same run (docs/PERFORMANCE.md, section proxy/kubeproxy
// ipvs): three nodes, a Service with one whoami backend per node, a client pod on
// node-a; one op is a whole connection (dial the VIP, send a line, read the answer,
// close). Every packet of an IPVS connection passes the model (first packets at INPUT,
// the rest at FORWARD), so the IPVS rows include the model's connection table (its
// TIME_WAIT entries accumulate over the run, as in the kernel).
//
//	go test ./proxy/kubeproxy/ -run '^$' -bench 'IPVSModeConnect' -benchtime 2000x -count 3
func BenchmarkIPVSModeConnect(b *testing.B) {
	for _, v := range []struct {
		name     string
		mode     Mode
		sched    string
		affinity bool
	}{
		{"iptables", IPTables, "", false},
		{"ipvs-rr", IPVS, "rr", false},
		{"ipvs-wlc", IPVS, "wlc", false},
		{"ipvs-mh", IPVS, "mh", false},
		{"ipvs-rr-affinity", IPVS, "rr", true},
	} {
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/par=%d", v.name, par), func(b *testing.B) {
				benchIPVSConnect(b, v.mode, v.sched, v.affinity, par)
			})
		}
	}
}

func benchIPVSConnect(b *testing.B, mode Mode, sched string, affinity bool, par int) {
	c, err := cluster.New(cluster.Config{Seed: 11, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
		Proxy: Factory(Options{Mode: mode, Scheduler: sched})})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	svc := service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("http", 80, 9376))
	if affinity {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	if err := c.Apply(svc); err != nil {
		b.Fatal(err)
	}
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		pod := service.NewPod(fmt.Sprintf("default/web-%d", i), service.Labels("app=MyApp"), service.ContainerPort("http", 9376, corev1.ProtocolTCP), service.OnNode(node))
		if _, err := c.CreatePod(pod); err != nil {
			b.Fatal(err)
		}
	}
	client, err := c.CreatePod(service.NewPod("default/client", service.OnNode("node-a")))
	if err != nil {
		b.Fatal(err)
	}
	got, _ := c.Store().GetService("default", "my-service")
	vip := got.Spec.ClusterIP + ":80"
	one := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := client.Net().DialContext(ctx, "tcp", vip)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("hi\n")); err != nil {
			return err
		}
		_, err = bufio.NewReader(conn).ReadString('\n')
		return err
	}
	if err := one(); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	done := 0
	b.ResetTimer()
	var wg sync.WaitGroup
	per := (b.N + par - 1) / par
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if err := one(); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "conn/s")
	if mode == IPVS {
		if s, _, _ := IPVSHandlerStats(c.Node("node-a")); s < uint64(done) {
			b.Errorf("the IPVS handler scheduled %d connections of %d", s, done)
		}
	}
}
