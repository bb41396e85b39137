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

// capSink is what a capture point writes its packets to: a pcap file of its own, or
// one interface of a pcapng file.
type capSink interface {
	write(b []byte)
	// close refuses later writes, after waiting for one in progress.
	close()
}

func (p *pcapWriter) close() {
	p.mu.Lock()
	if p.err == nil {
		p.err = errCaptureStopped
	}
	p.mu.Unlock()
}

// captures holds the active pcap writers by capture point.
type captures struct {
	n  atomic.Int32
	mu sync.RWMutex
	m  map[string][]capSink
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

func (c *captures) add(point string, w capSink) func() {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string][]capSink{}
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
		w.close()
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

// pcapng: one file for several capture points, an interface (Interface Description
// Block) per point named after it, each packet an Enhanced Packet Block naming its
// interface, timestamps in nanoseconds of the virtual clock. Wireshark shows each
// packet's interface (the "Interface" column, frame.interface_name).
const (
	ngSHB      = 0x0A0D0D0A
	ngIDB      = 0x00000001
	ngEPB      = 0x00000006
	ngByteSeq  = 0x1A2B3C4D
	ngOptName  = 2 // if_name
	ngOptRes   = 9 // if_tsresol
	ngOptEnd   = 0
	ngOptShbUA = 4 // shb_userappl
)

// pcapngWriter is a pcapng file shared by the capture points of one CaptureNG.
type pcapngWriter struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
	err error
}

// ngPort is one capture point's interface in a pcapng file.
type ngPort struct {
	f  *pcapngWriter
	id uint32
	// stopped refuses writes once its capture stopped (guarded by f.mu).
	stopped bool
}

func (p *ngPort) write(b []byte) {
	f := p.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || p.stopped {
		return
	}
	n := min(len(b), pcapSnapLength)
	pad := (4 - n%4) % 4
	total := 32 + n + pad
	blk := make([]byte, total)
	ts := uint64(f.now().UnixNano())
	binary.LittleEndian.PutUint32(blk[0:], ngEPB)
	binary.LittleEndian.PutUint32(blk[4:], uint32(total))
	binary.LittleEndian.PutUint32(blk[8:], p.id)
	binary.LittleEndian.PutUint32(blk[12:], uint32(ts>>32))
	binary.LittleEndian.PutUint32(blk[16:], uint32(ts))
	binary.LittleEndian.PutUint32(blk[20:], uint32(n))
	binary.LittleEndian.PutUint32(blk[24:], uint32(len(b)))
	copy(blk[28:], b[:n])
	binary.LittleEndian.PutUint32(blk[total-4:], uint32(total))
	_, f.err = f.w.Write(blk)
}

func (p *ngPort) close() {
	p.f.mu.Lock()
	p.stopped = true
	p.f.mu.Unlock()
}

// ngOption appends a pcapng option (code, value padded to 4 bytes).
func ngOption(b []byte, code uint16, v []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	for len(v)%4 != 0 {
		b = append(b, 0)
		v = append(v, 0)
	}
	return b
}

// ngBlock wraps a block body with its type and lengths.
func ngBlock(typ uint32, body []byte) []byte {
	total := 12 + len(body)
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint32(b, uint32(total))
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, uint32(total))
}

// CaptureNG writes every packet that crosses any of the capture points (see Capture)
// to w as one pcapng file, until stop is called: an interface per point, named after
// it ("node-a/eth0", "pod/default/web-0"), so that Wireshark shows where each packet
// was seen, and the virtual clock's time in nanoseconds. Packets are in the order they
// crossed their points. Every point must exist (or be reserved); none is captured
// otherwise.
func (c *Network) CaptureNG(points []string, w io.Writer) (stop func(), err error) {
	if len(points) == 0 {
		return nil, errors.New("capture: no capture point")
	}
	for _, pt := range points {
		if err := c.checkCapturePoint(pt); err != nil {
			return nil, err
		}
	}
	var shb []byte
	shb = binary.LittleEndian.AppendUint32(shb, ngByteSeq)
	shb = binary.LittleEndian.AppendUint16(shb, 1)
	shb = binary.LittleEndian.AppendUint16(shb, 0)
	shb = binary.LittleEndian.AppendUint64(shb, ^uint64(0)) // section length not given
	shb = ngOption(shb, ngOptShbUA, []byte("clusterlab (netsim virtual clock)"))
	shb = ngOption(shb, ngOptEnd, nil)
	out := ngBlock(ngSHB, shb)
	for _, pt := range points {
		var idb []byte
		idb = binary.LittleEndian.AppendUint16(idb, pcapLinkRaw)
		idb = binary.LittleEndian.AppendUint16(idb, 0)
		idb = binary.LittleEndian.AppendUint32(idb, pcapSnapLength)
		idb = ngOption(idb, ngOptName, []byte(pt))
		idb = ngOption(idb, ngOptRes, []byte{9}) // nanoseconds
		idb = ngOption(idb, ngOptEnd, nil)
		out = append(out, ngBlock(ngIDB, idb)...)
	}
	if _, err := w.Write(out); err != nil {
		return nil, err
	}
	f := &pcapngWriter{w: w, now: c.clock.Now}
	var stops []func()
	for i, pt := range points {
		stops = append(stops, c.caps.add(pt, &ngPort{f: f, id: uint32(i)}))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}
