package alloc_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterlab/clusterlab/alloc"
)

func ExampleIPAllocator() {
	a, _ := alloc.NewIPAllocator(netip.MustParsePrefix("10.96.0.0/24"), rand.New(rand.NewPCG(1, 2)))
	fmt.Println(a.Usable(), "usable, static band", a.StaticBand())

	// Well-known addresses come from the static band by request.
	fmt.Println(a.Allocate(netip.MustParseAddr("10.96.0.10")))
	fmt.Println(a.Allocate(netip.MustParseAddr("10.96.0.10")))
	fmt.Println(a.Allocate(netip.MustParseAddr("10.97.0.1")))

	// Dynamic ones never do while the dynamic band has room.
	ip, _ := a.AllocateNext()
	fmt.Println(a.InStaticBand(ip), a.Used(), a.Free())
	// Output:
	// 254 usable, static band 16
	// <nil>
	// provided IP is already allocated
	// the provided IP (10.97.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/24
	// false 2 252
}

func ExampleTx() {
	allocs, _ := alloc.NewAllocators(
		[]netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		alloc.DefaultNodePortRange, rand.New(rand.NewPCG(1, 2)))
	_ = allocs.NodePorts.Allocate(30053) // held by another service

	// Creating a NodePort service whose second port asks for a taken node
	// port: everything the request allocated is rolled back.
	tx := allocs.Begin()
	_, _ = tx.AllocateNextIP(corev1.IPv4Protocol)
	_, _ = tx.AllocateNextPort()
	if err := tx.AllocatePort(30053); err != nil {
		fmt.Println("spec.ports[1].nodePort:", err)
		tx.Revert()
	}
	fmt.Println(allocs.ClusterIPs[0].Used(), allocs.NodePorts.Used())
	// Output:
	// spec.ports[1].nodePort: provided port is already allocated
	// 0 1
}

func ExampleRepairer() {
	allocs, _ := alloc.NewAllocators(
		[]netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		alloc.DefaultNodePortRange, nil)
	_ = allocs.ClusterIPs[0].Allocate(netip.MustParseAddr("10.96.0.99")) // nobody uses it
	svcs := []*corev1.Service{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			ClusterIPs: []string{"10.96.0.20"},
			Ports:      []corev1.ServicePort{{Port: 80, NodePort: 30080}},
		},
	}}
	r := alloc.NewRepairer(allocs)
	for pass := 1; pass <= 3; pass++ {
		fmt.Print(r.Repair(svcs))
	}
	// Output:
	// the ClusterIP 10.96.0.20 for service default/web is not allocated; repairing
	// the ClusterIP 10.96.0.99 may have leaked: flagging for later clean up (pass 1)
	// the node port 30080 for service default/web is not allocated; repairing
	// the ClusterIP 10.96.0.99 may have leaked: flagging for later clean up (pass 2)
	// the ClusterIP 10.96.0.99 appears to have leaked: cleaning up
}
