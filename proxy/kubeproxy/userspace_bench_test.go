package kubeproxy

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/service"
)

// Connections per second through a ClusterIP in each proxy mode, on the same cluster
// shape in the same run (docs/PERFORMANCE.md, section proxy/userspace): three nodes, a
// Service with one whoami backend per node, a client pod on node-a; one op is a whole
// connection (dial the VIP, send a line, read the answer, close). The backends close
// first, so no client or proxy port is left in TIME_WAIT; keep runs to a few thousand
// connections per op count all the same (the virtual clock is not advanced: that
// would expire conntrack entries of connections in flight).
//
//	go test ./proxy/kubeproxy/ -run '^$' -bench 'ConnectClusterIP' -benchtime 2000x -count 3
func BenchmarkConnectClusterIP(b *testing.B) {
	for _, mode := range []Mode{IPTables, IPVS, Userspace} {
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("mode=%s/par=%d", mode, par), func(b *testing.B) {
				if !slices.Contains(Modes(), mode) {
					b.Skipf("mode %s is not registered", mode)
				}
				benchConnectMode(b, mode, par)
			})
		}
	}
}

func benchConnectMode(b *testing.B, mode Mode, par int) {
	c, err := cluster.New(cluster.Config{Seed: 11, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}, Proxy: Factory(Options{Mode: mode})})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(service.NewService("default/my-service", service.Selector("app=MyApp"), service.Port("http", 80, 9376))); err != nil {
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
	svc, _ := c.Store().GetService("default", "my-service")
	vip := svc.Spec.ClusterIP + ":80"
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
}
