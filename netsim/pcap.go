package netsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pcap file constants: the classic libpcap format, LINKTYPE_RAW (raw IPv4/IPv6 packets
// without a link-layer header), which Wireshark and tcpdump open.
const (
	pcapMagic      = 0xa1b2c3d4
	pcapLinkRaw    = 101
	pcapSnapLength = 262144
)

type pcapWriter struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
	err error
}

func newPcapWriter(w io.Writer, now func() time.Time) (*pcapWriter, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagic)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], pcapSnapLength)
	binary.LittleEndian.PutUint32(h[20:], pcapLinkRaw)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &pcapWriter{w: w, now: now}, nil
}

func (p *pcapWriter) write(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	t := p.now()
	var h [16]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(t.Nanosecond()/1000))
	n := len(b)
	if n > pcapSnapLength {
		n = pcapSnapLength
	}
	binary.LittleEndian.PutUint32(h[8:], uint32(n))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(b)))
	if _, p.err = p.w.Write(h[:]); p.err == nil {
		_, p.err = p.w.Write(b[:n])
	}
}

// captures holds the active pcap writers by capture point.
type captures struct {
	n  atomic.Int32
	mu sync.RWMutex
	m  map[string][]*pcapWriter
}

func (c *captures) write(point string, b []byte) {
	if c.n.Load() == 0 {
		return
	}
	c.mu.RLock()
	ws := c.m[point]
	c.mu.RUnlock()
	for _, w := range ws {
		w.write(b)
	}
}

func (c *captures) add(point string, w *pcapWriter) func() {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string][]*pcapWriter{}
	}
	c.m[point] = append(c.m[point], w)
	c.n.Add(1)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		ws := c.m[point]
		for i, x := range ws {
			if x == w {
				c.m[point] = append(ws[:i:i], ws[i+1:]...)
				c.n.Add(-1)
				break
			}
		}
		c.mu.Unlock()
		// A packet may have found w just before it was removed: wait for its write,
		// and refuse later ones, so that w's writer is no longer used once stop returns.
		w.mu.Lock()
		if w.err == nil {
			w.err = errCaptureStopped
		}
		w.mu.Unlock()
	}
}

var errCaptureStopped = errors.New("capture stopped")

// Capture writes every packet that crosses a capture point to w as a pcap file
// (LINKTYPE_RAW, timestamps on the virtual clock), until stop is called. Capture points
// are a node's interfaces, "<node>/<iface>" (e.g. "node-a/eth0", "node-a/cbr0",
// "node-a/lo"), a pod's veth "pod/<namespace>/<name>", and an external host's link
// "external/<name>". Packets are captured as they leave or enter the interface (after
// NAT on the way out, before it on the way in), as tcpdump sees them.
//
// A point that does not exist (yet) is an error: nothing would ever be captured there.
func (c *Network) Capture(point string, w io.Writer) (stop func(), err error) {
	if err := c.checkCapturePoint(point); err != nil {
		return nil, err
	}
	pw, err := newPcapWriter(w, c.clock.Now)
	if err != nil {
		return nil, err
	}
	return c.caps.add(point, pw), nil
}

func (c *Network) captureAt(point string, b []byte) {
	if c.caps.n.Load() != 0 { // no call for every packet when nothing captures
		c.caps.write(point, b)
	}
}

// capture records a packet on one of the node's interfaces.
func (n *Node) capture(iface string, b []byte) {
	if n.cluster.caps.n.Load() == 0 {
		return
	}
	n.cluster.caps.write(n.name+"/"+iface, b)
}

// ReserveCapturePoint declares a capture point that does not exist yet but will (an
// external host a layer above the network makes on first use), so that Capture takes
// it before it exists.
func (c *Network) ReserveCapturePoint(point string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reservedPoints == nil {
		c.reservedPoints = map[string]bool{}
	}
	c.reservedPoints[point] = true
}

// checkCapturePoint reports an error for a capture point that names no interface.
func (c *Network) checkCapturePoint(point string) error {
	c.mu.Lock()
	reserved := c.reservedPoints[point]
	c.mu.Unlock()
	if reserved {
		return nil
	}
	kind, rest, _ := strings.Cut(point, "/")
	switch kind {
	case "pod":
		ns, name, ok := strings.Cut(rest, "/")
		if ok && c.Pod(ns, name) != nil {
			return nil
		}
		return fmt.Errorf("capture point %q: no pod %s", point, rest)
	case "external":
		if c.ExternalHost(rest) != nil {
			return nil
		}
		return fmt.Errorf("capture point %q: no external host %q", point, rest)
	}
	n := c.Node(kind)
	if n == nil {
		return fmt.Errorf("capture point %q: want NODE/IFACE (node-a/eth0, node-a/cbr0, node-a/lo), pod/NAMESPACE/NAME or external/NAME", point)
	}
	n.mu.Lock()
	_, ok := n.ifaces[rest]
	var names []string
	for name := range n.ifaces {
		names = append(names, name)
	}
	n.mu.Unlock()
	if !ok {
		slices.Sort(names)
		return fmt.Errorf("capture point %q: node %s has no interface %q (it has %s)", point, kind, rest, strings.Join(names, ", "))
	}
	return nil
}
