package netsim

import (
	"net"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// tcpConn is a pod's TCP connection: a gonet connection whose first Read and first Write
// make room on the calling goroutine's stack for netstack's send and receive paths
// before entering them.
//
// Why: a program's write runs netstack's whole send path (TCP, IP, the NIC's queue, our
// link) on the program's own goroutine, dozens of frames and 10-16 KiB of stack, where
// a kernel socket's write runs on the kernel's stack. A goroutine made per connection (a
// server's handler, an HTTP transport's dial) starts with the runtime's average stack
// size, which the many idle goroutines of a simulation (TCP processors, listeners,
// timers) keep small, so its first write grew the stack two or three times, each
// growth copying the deep stack frame by frame (runtime.copystack: 5 % of a ClusterIP
// connection's CPU, 12 % of two bare stacks'). Growing it once, from a shallow frame,
// copies a few frames instead. The bytes, the packets and every hook see nothing of it.
type tcpConn struct {
	*gonet.TCPConn
	readRoom, writeRoom atomic.Bool // the first Read (Write) made its room
}

func newTCPConn(c *gonet.TCPConn) net.Conn { return &tcpConn{TCPConn: c} }

func (c *tcpConn) Read(b []byte) (int, error) {
	if !c.readRoom.Load() {
		c.readRoom.Store(true)
		stackRoom()
	}
	return c.TCPConn.Read(b)
}

func (c *tcpConn) Write(b []byte) (int, error) {
	if !c.writeRoom.Load() {
		c.writeRoom.Store(true)
		stackRoom()
	}
	return c.TCPConn.Write(b)
}

// stackRoomBytes is the stack stackRoom reserves: the depth of netstack's send path
// from a gonet Write to our link, with room to spare.
const stackRoomBytes = 12 << 10

// stackRoom grows the calling goroutine's stack, if it is smaller, to hold a frame of
// stackRoomBytes: one growth, from here, where the stack is shallow.
//
//go:noinline
func stackRoom() {
	var room [stackRoomBytes]byte
	stackRoomSink(&room)
}

//go:noinline
func stackRoomSink(p *[stackRoomBytes]byte) { p[0] = 0 }
