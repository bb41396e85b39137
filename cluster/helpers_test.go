package cluster

import (
	"bufio"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
)

// masqMark is the mark the test proxies set for masquerade, as kube-proxy's 0x4000.
const masqMark = 0x4000

func newTestCluster(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func threeNodes() Config {
	return Config{Seed: 1, Nodes: []NodeConfig{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}}
}

// ask dials addr over TCP from n, sends a line and parses the whoami reply.
func ask(t testing.TB, n *netsim.Net, addr string) (netsim.Whoami, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := n.DialContext(ctx, "tcp", addr)
	if err != nil {
		return netsim.Whoami{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(conn, "hello"); err != nil {
		return netsim.Whoami{}, err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return netsim.Whoami{}, err
	}
	return netsim.ParseWhoami(line)
}
