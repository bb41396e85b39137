package userspace

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/clusterlab/clusterlab/proxy"
)

// fakeClock is a manual Clock: time moves only through Advance, which runs the timers
// that fall due, in deadline order, on the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return was
		}
	}
	return false
}

// Advance moves time forward by d, firing every timer that falls due (timers set by
// those callbacks too, if they fall due within d).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		t.stopped = true
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// pending counts the timers not yet fired or stopped.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

var _ Clock = (*fakeClock)(nil)

func spn(ns, name, port string, proto corev1.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

// testService is a ClusterIP Service with one port.
func testService(ns, name, clusterIP, portName string, port int32, proto corev1.Protocol, f func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			ClusterIP:       clusterIP,
			ClusterIPs:      []string{clusterIP},
			IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports:           []corev1.ServicePort{{Name: portName, Port: port, Protocol: proto}},
		},
	}
	if f != nil {
		f(s)
	}
	return s
}

// slicesFor returns one EndpointSlice per endpoint ("ip:port"), so that endpoints on
// one address may have different ports (loopback backends).
func slicesFor(ns, svc, portName string, proto corev1.Protocol, endpoints ...string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for i, e := range endpoints {
		ap := netip.MustParseAddrPort(e)
		out = append(out, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", svc, i),
				Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(int32(ap.Port())), Protocol: ptr.To(proto)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ap.Addr().String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		})
	}
	return out
}
