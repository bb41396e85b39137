package kubeproxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/service"
)

// Bulk both ways at once through a ClusterIP, in every mode, with and without trains:
// three connections from a client pod on node-a to a backend on node-b, each writing a
// fixed-seed number of bytes (up to 1.5 MiB) in each direction while reading the
// other's. Every byte arrives intact, and neither node's conntrack found a packet
// INVALID: each direction's segments stay inside the windows the other side advertised
// (scaled as the handshake agreed). Conntrack once dropped the client's window scale,
// and every download of more than a few KiB went INVALID on the way back. The
// iptables mode runs a second time with ShareRules: both nodes' packets, on their own
// goroutines, then go through one packet buffer and one wildcard cache under the
// group's lock (run with -race).
func TestDuplexTransfersNoInvalid(t *testing.T) {
	variants := []Options{{Mode: IPTables}, {Mode: IPTables, ShareRules: true}, {Mode: IPVS}, {Mode: NFTables}, {Mode: Userspace}}
	for _, opts := range variants {
		for _, noTrains := range []bool{false, true} {
			t.Run(fmt.Sprintf("mode=%s/ShareRules=%v/NoTrains=%v", opts.Mode, opts.ShareRules, noTrains), func(t *testing.T) {
				c, err := cluster.New(cluster.Config{Seed: 38, NoTrains: noTrains, Nodes: []cluster.NodeConfig{{Name: "node-a"}, {Name: "node-b"}}, Proxy: Factory(opts)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				cli, ln := serviceAcrossNodes(t, c, "duplex")
				r := rand.New(rand.NewPCG(38, 1))
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				vip := vipOf(t, c, "duplex", 80)
				for i := range 3 {
					up, down := pattern(1+r.IntN(3<<19), byte(i)), pattern(1+r.IntN(3<<19), byte(i)+100)
					served := make(chan error, 1)
					go func() {
						conn, err := ln.Accept()
						if err != nil {
							served <- err
							return
						}
						defer conn.Close()
						served <- exchange(conn, down, up)
					}()
					var conn net.Conn
					for conn == nil { // the rules may not be synced yet
						if conn, err = cli.Net().DialContext(ctx, "tcp", vip.String()); err != nil && ctx.Err() != nil {
							t.Fatal(err)
						}
					}
					if err := exchange(conn, up, down); err != nil {
						t.Fatalf("connection %d (%d bytes up, %d down), client: %v", i, len(up), len(down), err)
					}
					conn.Close()
					if err := <-served; err != nil {
						t.Fatalf("connection %d (%d bytes up, %d down), server: %v", i, len(up), len(down), err)
					}
				}
				for _, name := range []string{"node-a", "node-b"} {
					if s := c.Node(name).Conntrack().Stats(); s.Invalid != 0 {
						t.Errorf("%s: conntrack -S %s", name, s)
					}
				}
			})
		}
	}
}

// pattern is n bytes that tell their offset and the stream apart.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>11) ^ seed
	}
	return b
}

// exchange writes send on conn (then half-closes it) while reading what the other side
// sends to its end, and checks that it is want.
func exchange(conn net.Conn, send, want []byte) error {
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(send)
		if err == nil {
			err = conn.(interface{ CloseWrite() error }).CloseWrite()
		}
		wrote <- err
	}()
	got, err := io.ReadAll(conn)
	if werr := <-wrote; werr != nil {
		return fmt.Errorf("write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("read after %d bytes: %w", len(got), err)
	}
	if string(got) != string(want) {
		return fmt.Errorf("read %d bytes, not the %d sent", len(got), len(want))
	}
	return nil
}

// serviceAcrossNodes makes Service default/name (port 80 to 9000) selecting a backend
// pod on node-b, which listens on 9000 (closed with the test), and a client pod on
// node-a; it returns the client and the backend's listener.
func serviceAcrossNodes(t *testing.T, c *cluster.Cluster, name string) (*netsim.Pod, net.Listener) {
	t.Helper()
	if err := c.Apply(service.NewService("default/"+name, service.Selector("app="+name), service.Port("", 80, 9000))); err != nil {
		t.Fatal(err)
	}
	srv, err := c.CreatePod(service.NewPod("default/srv", service.Labels("app="+name), service.OnNode("node-b")))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := c.CreatePod(service.NewPod("default/cli", service.OnNode("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Net().Listen("tcp", ":9000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return cli, ln
}
