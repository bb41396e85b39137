package cluster

// The cloud load balancer's health checks.
//
// A LoadBalancer Service with externalTrafficPolicy Local has a healthCheckNodePort, and
// kube-proxy on every node answers HTTP on it: 200 while the node has a ready endpoint of
// the service, 503 otherwise. The simulated cloud load balancer asks each node the way a
// cloud's does, with real HTTP over the simulated network, on the virtual clock:
//
//	health checker (an external host, 35.191.0.1 — GCE's prober range)
//	   │ GET /healthz  every Interval (8 s), Timeout (1 s) for the answer
//	   ▼
//	cluster network ──▶ node eth0 ──▶ PREROUTING, INPUT (kube-proxy's rules, your
//	   ▲                               handlers, faults, partitions) ──▶ node host stack:
//	   │                               kube-proxy's health server on :healthCheckNodePort
//	   └──────────── 200 / 503 + JSON ◀── OUTPUT, POSTROUTING, eth0 (uplink faults)
//
//	HealthyThreshold (1) passes in a row:      the node takes new flows
//	UnhealthyThreshold (3) failures in a row:  it takes none (flows it has keep going)
//
// A node starts unhealthy for a service until a check passes. The defaults are what the
// GCE cloud provider sets up for kube-proxy's health check node port (8 s interval, 1 s
// timeout, healthy after 1, unhealthy after 3); SetLoadBalancerHealthCheck changes them.
// The checker's packets are captured at "external/cloud-lb-health-checker" and on the
// node's interfaces, and its link (ExternalHost(HealthCheckerName).Link()) takes faults.
//
// Only nodes whose proxy serves the health check node ports (a Proxy implementing
// HealthCheckServer, as kube-proxy's modes in proxy/kubeproxy do) are asked over the
// network. For other nodes (no proxy, or a test proxy) the load balancer judges from the
// API: a ready endpoint of the service on the node, or the function given to
// SetHealthChecker. Services with externalTrafficPolicy Cluster are not health-checked:
// every live node takes their traffic.
//
// # When the view changes
//
// Probes never do HTTP: they read the load balancer's current view. The view changes
// when a check ends, and checks start at three points:
//
//   - every Interval on the virtual clock (Clock().Advance fires them);
//   - right after a node's proxy syncs, for that node (as if the load balancer's next
//     check came at once), so that a change in the store reaches the load balancer
//     before Apply returns, like it reaches the proxy's rules;
//   - Cluster.CheckLoadBalancers, for every node.
//
// The last two wait for their checks. An exchange takes no virtual time unless a link
// delays it, so a check that can be answered is answered before they return; one whose
// packet was dropped on the way (by a handler or rule at the node, for want of a route
// through a partition, or because the node is down) fails at once, as it would when its
// timeout passed. A check across a link with faults is not waited for: it ends when its
// answer arrives or its timeout passes on the virtual clock. Checks started by the clock
// end when they are answered, or at their timeout. In replay mode the checks after a
// sync are not waited for (Cluster.Run carries their packets); CheckLoadBalancers, called
// inside Run, waits.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
	"gvisor.dev/gvisor/pkg/tcpip"
	corev1 "k8s.io/api/core/v1"
)

// HealthCheckerName is the name of the external host the cloud load balancer's health
// checks come from.
const HealthCheckerName = "cloud-lb-health-checker"

// HealthCheckConfig configures the cloud load balancer's health checks of nodes. Zero
// fields take the defaults (DefaultHealthCheckConfig).
type HealthCheckConfig struct {
	// Interval between two checks of a node (default 8 s).
	Interval time.Duration
	// Timeout for an answer (default 1 s).
	Timeout time.Duration
	// HealthyThreshold is how many checks in a row must pass for an unhealthy node to
	// take traffic again (default 1).
	HealthyThreshold int
	// UnhealthyThreshold is how many checks in a row must fail for a healthy node to be
	// taken out (default 3).
	UnhealthyThreshold int
	// Path is the request path (default /healthz; kube-proxy answers on any path).
	Path string
	// Sources are the health checker's addresses, at most one per family (default
	// 35.191.0.1 and 2600:2d00:1:b029::1, in GCE's prober ranges). A node is checked at
	// its primary IP from the source of that family.
	Sources []netip.Addr
}

// DefaultHealthCheckConfig returns the defaults: GCE's health check of kube-proxy's
// healthCheckNodePort (checkIntervalSec 8, timeoutSec 1, healthyThreshold 1,
// unhealthyThreshold 3, request path /healthz), from GCE's prober ranges.
func DefaultHealthCheckConfig() HealthCheckConfig {
	return HealthCheckConfig{
		Interval:           8 * time.Second,
		Timeout:            time.Second,
		HealthyThreshold:   1,
		UnhealthyThreshold: 3,
		Path:               "/healthz",
		Sources:            []netip.Addr{netip.MustParseAddr("35.191.0.1"), netip.MustParseAddr("2600:2d00:1:b029::1")},
	}
}

func (h HealthCheckConfig) withDefaults() HealthCheckConfig {
	d := DefaultHealthCheckConfig()
	if h.Interval <= 0 {
		h.Interval = d.Interval
	}
	if h.Timeout <= 0 {
		h.Timeout = d.Timeout
	}
	if h.HealthyThreshold <= 0 {
		h.HealthyThreshold = d.HealthyThreshold
	}
	if h.UnhealthyThreshold <= 0 {
		h.UnhealthyThreshold = d.UnhealthyThreshold
	}
	if h.Path == "" {
		h.Path = d.Path
	}
	if len(h.Sources) == 0 {
		h.Sources = d.Sources
	}
	return h
}

func (h HealthCheckConfig) validate() error {
	seen := map[bool]bool{}
	for i, a := range h.Sources {
		if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() {
			return fmt.Errorf("sources[%d]: %s is not a usable address", i, a)
		}
		if seen[a.Is4()] {
			return fmt.Errorf("sources[%d]: a second address of the same family (%s)", i, a)
		}
		seen[a.Is4()] = true
	}
	if !strings.HasPrefix(h.Path, "/") {
		return fmt.Errorf("path %q: must start with /", h.Path)
	}
	return nil
}

// HealthCheckServer is implemented by a Proxy that serves kube-proxy's service health
// checks: an HTTP server on the node's host network at the healthCheckNodePort of each
// LoadBalancer Service with externalTrafficPolicy Local. The cloud load balancer asks
// such nodes over the network; for the others it judges from the API.
type HealthCheckServer interface {
	// ServesHealthCheckNodePorts reports whether the proxy answers health checks.
	ServesHealthCheckNodePorts() bool
}

func servesHealthChecks(n *Node) bool {
	hs, ok := n.Proxy().(HealthCheckServer)
	return ok && hs.ServesHealthCheckNodePorts()
}

// HealthCheckResult is how one health check of a node ended.
type HealthCheckResult struct {
	// At is the virtual time the check ended.
	At time.Time `json:"at"`
	// Target is what was asked: the node's IP and the service's healthCheckNodePort.
	Target netip.AddrPort `json:"target"`
	// OK is true for an HTTP 200.
	OK bool `json:"ok"`
	// Status, Header and Body are the HTTP answer (Status 0: none came).
	Status int         `json:"status,omitempty"`
	Header http.Header `json:"header,omitempty"`
	Body   string      `json:"body,omitempty"`
	// Err says why the check failed: an HTTP status, "connection refused", a timeout, or
	// where the request was dropped.
	Err string `json:"error,omitempty"`
	// Trace is the request's packets' way through the node (from the health checker's
	// side: the replies are not traced).
	Trace *netsim.Trace `json:"trace,omitempty"`
}

// String says in a few words how the check ended.
func (r HealthCheckResult) String() string {
	switch {
	case r.OK:
		return fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status))
	case r.Err != "":
		return r.Err
	}
	return "not checked"
}

// NodeHealth is the cloud load balancer's view of one node for one service.
type NodeHealth struct {
	Node string `json:"node"`
	// Healthy nodes take new flows.
	Healthy bool `json:"healthy"`
	// Source is how the load balancer judges the node: "health-check" (HTTP to the node's
	// health check node port), "api" (the node's proxy serves no health checks: a ready
	// endpoint on the node, per the API), "policy" (externalTrafficPolicy Cluster: every
	// live node) or "down" (the node is dead).
	Source string `json:"source"`
	// Checked is false until a health check of the node ended.
	Checked bool `json:"checked"`
	// Successes and Failures count the checks in a row that passed or failed.
	Successes int `json:"successes"`
	Failures  int `json:"failures"`
	// Last is the last check that ended.
	Last HealthCheckResult `json:"last"`
}

// nodeTarget is the load balancer's health state of one node.
type nodeTarget struct {
	healthy, checked bool
	succ, fail       int
	last             HealthCheckResult
}

// ---- the health checker ----

// lbChecker is the cloud load balancer's health checker: an external host (a netstack
// with the source addresses) and its checks in flight, one per target.
type lbChecker struct {
	c      *Cluster
	host   *netsim.ExternalHost
	client *http.Client

	mu       sync.Mutex
	cfg      HealthCheckConfig
	byTarget map[netip.AddrPort]*hcCheck // the check in flight of each target
	byPort   map[uint16]*hcCheck         // ... by its source port
	lastPort uint16
	closed   bool // the cluster is closing: no check starts

	requests sync.WaitGroup // the checks' requests in flight (their goroutines)
	running  atomic.Int32   // how many
}

// The checker's source ports: it takes them in turn from Linux's ephemeral range, so a
// node sees a connection's 4-tuple again only after tens of thousands of checks (a port
// chosen at random could meet the node's TIME_WAIT of an earlier check, which, on a
// clock that stands still, answers the new SYN as an old duplicate).
const (
	checkPortMin = 32768
	checkPortMax = 60999
)

// portKey carries a check's source port to the dialer in the request's context.
type portKey struct{}

var errClusterClosed = errors.New("the cluster is closed")

// healthChecker returns the cluster's health checker, making it (with the defaults) on
// first use.
func (c *Cluster) healthChecker() (*lbChecker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClusterClosed
	}
	if c.checker != nil {
		return c.checker, nil
	}
	return c.newCheckerLocked(DefaultHealthCheckConfig())
}

// newCheckerLocked starts the health checker: an external host of the network at the
// sources' addresses, which tells the checks in flight about the packets it sends.
func (c *Cluster) newCheckerLocked(cfg HealthCheckConfig) (*lbChecker, error) {
	if c.ExternalHost(HealthCheckerName) != nil {
		return nil, fmt.Errorf("external host %q is not the load balancer's health checker", HealthCheckerName)
	}
	k := &lbChecker{c: c, cfg: cfg, byTarget: map[netip.AddrPort]*hcCheck{}, byPort: map[uint16]*hcCheck{}, lastPort: checkPortMin - 1}
	for _, a := range cfg.Sources {
		if owner := c.Owner(a); owner != "" {
			return nil, fmt.Errorf("load balancer health checker: %s is already used by %s", a, owner)
		}
	}
	h, err := c.AddExternalHostWith(netsim.ExternalHostConfig{Name: HealthCheckerName, Addrs: cfg.Sources, OnSend: k.sent})
	if err != nil {
		return nil, fmt.Errorf("load balancer health checker: %w", err)
	}
	k.host = h
	k.client = &http.Client{
		Transport: &http.Transport{DialContext: k.dial, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	c.checker = k
	return k, nil
}

// SetLoadBalancerHealthCheck configures the cloud load balancer's health checks; zero
// fields take the defaults. The sources can only be chosen before the first check (the
// first LoadBalancer Service with externalTrafficPolicy Local).
func (c *Cluster) SetLoadBalancerHealthCheck(cfg HealthCheckConfig) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("load balancer health check: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClusterClosed
	}
	k := c.checker
	if k == nil {
		if c.ExternalHost(HealthCheckerName) != nil {
			return fmt.Errorf("load balancer health check: external host %q is not the load balancer's health checker", HealthCheckerName)
		}
		_, err := c.newCheckerLocked(cfg)
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if fmt.Sprint(k.cfg.Sources) != fmt.Sprint(cfg.Sources) {
		return fmt.Errorf("load balancer health check: sources %v: the health checker already runs at %v", cfg.Sources, k.cfg.Sources)
	}
	k.cfg = cfg
	return nil
}

// LoadBalancerHealthCheck returns the health checks' configuration.
func (c *Cluster) LoadBalancerHealthCheck() HealthCheckConfig { return c.healthCheckConfig() }

// healthCheckConfig is the checker's configuration, or the defaults before there is one.
func (c *Cluster) healthCheckConfig() HealthCheckConfig {
	c.mu.Lock()
	k := c.checker
	c.mu.Unlock()
	if k == nil {
		return DefaultHealthCheckConfig()
	}
	return k.config()
}

func (k *lbChecker) config() HealthCheckConfig {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cfg
}

// dial connects from the check's source port (the next free one if that is taken).
func (k *lbChecker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	port, _ := ctx.Value(portKey{}).(uint16)
	var err error
	for try := 0; try < 16; try++ {
		var c net.Conn
		if c, err = k.host.Net().DialFrom(ctx, network, port, addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) || port == 0 {
			return c, err
		}
		port = k.takePort(nil)
	}
	return nil, err
}

// takePort returns the next source port, and gives it to chk (if not nil).
func (k *lbChecker) takePort(chk *hcCheck) uint16 {
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		k.lastPort++
		if k.lastPort > checkPortMax || k.lastPort < checkPortMin {
			k.lastPort = checkPortMin
		}
		if k.byPort[k.lastPort] == nil {
			break
		}
	}
	if chk != nil {
		chk.port = k.lastPort
		k.byPort[k.lastPort] = chk
	}
	return k.lastPort
}

// sent is told of each packet the health checker sends into the cluster network: a
// packet of a check in flight that cannot arrive ends the check at once, and one that
// reaches a node is traced through it, so that a drop there ends the check at once too.
func (k *lbChecker) sent(pk *netsim.Packet, to netsim.Hop) func(*netsim.Node, *netsim.Trace) {
	k.mu.Lock()
	chk := k.byPort[pk.SrcPort]
	if chk != nil && chk.target != netip.AddrPortFrom(pk.Dst, pk.DstPort) {
		chk = nil
	}
	k.mu.Unlock()
	switch {
	case to.Node == nil && to.External == nil && to.Middlebox == nil:
		chk.lose(fmt.Sprintf("no route from the health checker to %s (a partition?)", pk.Dst))
		return nil
	case to.Node != nil && to.Node.Down():
		chk.lose(fmt.Sprintf("node %s is down", to.Node.Name()))
		return nil
	case chk == nil:
		return nil
	}
	return chk.noteTrace
}

// targetAddr is where a node is checked: its primary IP, if the checker has a source of
// that family.
func (k *lbChecker) targetAddr(n *Node) (netip.Addr, bool) {
	ip := n.IP()
	for _, s := range k.config().Sources {
		if s.Is4() == ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// close ends the checks in flight, without a result, and starts no more (the cluster
// is closing); wait then waits for their requests, which the network's close ends if
// the cancelled context has not.
func (k *lbChecker) close() {
	k.mu.Lock()
	k.closed = true
	checks := make([]*hcCheck, 0, len(k.byTarget))
	for _, chk := range k.byTarget {
		checks = append(checks, chk)
	}
	k.mu.Unlock()
	for _, chk := range checks {
		chk.abandon()
	}
}

func (k *lbChecker) wait() { k.requests.Wait() }

// ---- one check ----

// hcCheck is one health check of one node for one load balancer.
type hcCheck struct {
	k      *lbChecker
	lb     *loadBalancer
	gen    uint64 // the load balancer's health-check generation it belongs to
	node   *Node
	target netip.AddrPort
	port   uint16 // the source port
	faulty bool   // a link on the way had faults when it started
	cancel context.CancelFunc
	timer  tcpip.Timer

	done    chan struct{} // closed once the check ended (or was abandoned)
	changed chan struct{} // a packet was lost

	mu       sync.Mutex
	resolved bool
	lost     string
	trace    []netsim.TraceStep
}

// settleWait bounds how long (on the wall clock) a waiting check-now, or a timeout on
// the virtual clock, waits for an exchange in flight to end.
const settleWait = 5 * time.Second

// start starts a check of node n's health check node port for the load balancer, and
// returns it (it ends in the background). A check of the same target still in flight is
// abandoned. The check times out Timeout after at (zero: now).
func (k *lbChecker) start(lb *loadBalancer, gen uint64, n *Node, port uint16, at time.Time) *hcCheck {
	cfg := k.config()
	chk := &hcCheck{k: k, lb: lb, gen: gen, node: n, done: make(chan struct{}), changed: make(chan struct{}, 1), cancel: func() {}}
	ip, ok := k.targetAddr(n)
	if !ok {
		chk.target = netip.AddrPortFrom(n.IP(), port)
		chk.finish(HealthCheckResult{Err: fmt.Sprintf("the health checker has no address of %s's family", n.IP())})
		return chk
	}
	chk.target = netip.AddrPortFrom(ip, port)
	chk.faulty = n.Uplink().Faults() != (netsim.LinkFaults{}) || k.host.Link().Faults() != (netsim.LinkFaults{})
	ctx, cancel := context.WithCancel(context.Background())
	chk.cancel = cancel
	k.takePort(chk)
	ctx = context.WithValue(ctx, portKey{}, chk.port)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		chk.abandon()
		return chk
	}
	old := k.byTarget[chk.target]
	k.byTarget[chk.target] = chk
	k.requests.Add(1)
	k.running.Add(1)
	k.mu.Unlock()
	if old != nil {
		old.abandon()
	}
	// Timers are set relative to the clock's time, which a callback that Advance runs
	// sees as the end of the advance: a round due earlier counts its timeout from when
	// it was due.
	wait := cfg.Timeout
	if !at.IsZero() {
		wait = max(0, at.Add(cfg.Timeout).Sub(k.c.Clock().Now()))
	}
	chk.timer = k.c.Clock().AfterFunc(wait, func() { chk.settle(time.Now().Add(settleWait), true) })
	if n.Down() {
		chk.lose(fmt.Sprintf("node %s is down", n.Name()))
	}
	k.c.Go(func() {
		defer k.requests.Done()
		defer k.running.Add(-1)
		chk.run(ctx, cfg)
	})
	return chk
}

// run does the HTTP request.
func (chk *hcCheck) run(ctx context.Context, cfg HealthCheckConfig) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+chk.target.String()+cfg.Path, nil)
	if err != nil {
		chk.finish(HealthCheckResult{Err: err.Error()})
		return
	}
	req.Header.Set("User-Agent", "GoogleHC/1.0")
	resp, err := chk.k.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			chk.finish(HealthCheckResult{Err: describeCheckError(err)})
		}
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		if ctx.Err() == nil {
			chk.finish(HealthCheckResult{Err: "reading the answer: " + describeCheckError(err)})
		}
		return
	}
	res := HealthCheckResult{Status: resp.StatusCode, Header: resp.Header, Body: string(body), OK: resp.StatusCode == http.StatusOK}
	if !res.OK {
		res.Err = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	chk.finish(res)
}

func describeCheckError(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	return err.Error()
}

// lose notes that a packet of the check was dropped on its way: the check cannot be
// answered without virtual time passing.
func (chk *hcCheck) lose(why string) {
	if chk == nil {
		return
	}
	chk.mu.Lock()
	if chk.lost == "" {
		chk.lost = why
	}
	chk.mu.Unlock()
	select {
	case chk.changed <- struct{}{}:
	default:
	}
}

// noteTrace keeps the trace of a request packet through node n, and notes a drop there.
func (chk *hcCheck) noteTrace(n *netsim.Node, tr *netsim.Trace) {
	steps := tr.Snapshot()
	chk.mu.Lock()
	if len(chk.trace) < 4096 {
		chk.trace = append(chk.trace, steps...)
	}
	chk.mu.Unlock()
	for _, s := range steps {
		if s.Kind != netsim.StepEnd {
			continue
		}
		if s.Verdict == "DROP" {
			chk.lose(fmt.Sprintf("dropped at node %s: %s", n.Name(), s.Detail))
		}
		return
	}
}

// settle waits for the check to end, until the wall-clock limit. A check whose packet
// was lost, or across a faulty link, is not waited for. At its timeout (atTimeout) a
// check that has not ended fails; otherwise it is left to end by itself.
func (chk *hcCheck) settle(limit time.Time, atTimeout bool) {
	var wall *time.Timer
	defer func() {
		if wall != nil {
			wall.Stop()
		}
	}()
	timeout := func() {
		if atTimeout {
			chk.finish(HealthCheckResult{Err: fmt.Sprintf("timeout: no answer within %s", chk.k.config().Timeout)})
		}
	}
	for {
		select {
		case <-chk.done:
			return
		default:
		}
		chk.mu.Lock()
		lost := chk.lost
		chk.mu.Unlock()
		if lost != "" {
			chk.finish(HealthCheckResult{Err: lost})
			return
		}
		if atTimeout && (chk.faulty || chk.k.c.cfg.Replay) {
			timeout() // in replay mode the clock moves only when nothing is in flight
			return
		}
		if chk.faulty {
			return
		}
		if wall == nil {
			wall = time.NewTimer(time.Until(limit))
		}
		select {
		case <-chk.done:
			return
		case <-chk.changed:
		case <-wall.C:
			timeout()
			return
		}
	}
}

// finish ends the check with a result and gives it to the load balancer.
func (chk *hcCheck) finish(res HealthCheckResult) {
	if !chk.end() {
		return
	}
	res.At = chk.k.c.Clock().Now()
	res.Target = chk.target
	chk.mu.Lock()
	if len(chk.trace) > 0 {
		res.Trace = &netsim.Trace{Steps: append([]netsim.TraceStep(nil), chk.trace...)}
	}
	chk.mu.Unlock()
	chk.lb.record(chk, res)
	close(chk.done)
}

// abandon ends the check without a result (a newer check of the target replaced it).
func (chk *hcCheck) abandon() {
	if chk.end() {
		close(chk.done)
	}
}

// end marks the check ended, stops its request and timer, and reports whether it was
// still running.
func (chk *hcCheck) end() bool {
	chk.mu.Lock()
	if chk.resolved {
		chk.mu.Unlock()
		return false
	}
	chk.resolved = true
	chk.mu.Unlock()
	chk.cancel()
	if chk.timer != nil {
		chk.timer.Stop()
	}
	k := chk.k
	k.mu.Lock()
	if k.byTarget[chk.target] == chk {
		delete(k.byTarget, chk.target)
	}
	if chk.port != 0 && k.byPort[chk.port] == chk {
		delete(k.byPort, chk.port)
	}
	k.mu.Unlock()
	return true
}

// ---- the load balancer's side ----

// healthCheckPort is the port a load balancer checks nodes on for svc (0: none).
func healthCheckPort(svc *corev1.Service) uint16 {
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return 0
	}
	return uint16(svc.Spec.HealthCheckNodePort)
}

// setHealthCheckLocked follows the service's health check node port: a new port (or
// none) starts the checks afresh, every node unhealthy until a check passes. It returns
// the generation to arm the periodic checks for (0: nothing to arm).
func (lb *loadBalancer) setHealthCheckLocked(svc *corev1.Service) uint64 {
	port := healthCheckPort(svc)
	if port == lb.hcPort {
		return 0
	}
	lb.hcPort = port
	lb.hcGen++
	lb.targets = map[string]*nodeTarget{}
	if lb.tick != nil {
		lb.tick.Stop()
		lb.tick = nil
	}
	if port == 0 {
		return 0
	}
	return lb.hcGen
}

// armChecks schedules the next periodic round of checks of generation gen, Interval after
// prev (zero: now).
func (lb *loadBalancer) armChecks(gen uint64, prev time.Time) {
	now := lb.c.Clock().Now()
	if prev.IsZero() {
		prev = now
	}
	due := prev.Add(lb.c.healthCheckConfig().Interval)
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.hcGen != gen || lb.removed {
		return
	}
	lb.tick = lb.c.Clock().AfterFunc(max(0, due.Sub(now)), func() { lb.periodic(gen, due) })
}

// periodic is a round of checks on the clock, due at due: every live node whose proxy
// serves health checks is asked; the answers come in the background.
func (lb *loadBalancer) periodic(gen uint64, due time.Time) {
	if lb.c.isClosed() {
		return
	}
	lb.mu.Lock()
	ok, port := lb.hcGen == gen && !lb.removed, lb.hcPort
	lb.mu.Unlock()
	if !ok {
		return
	}
	for _, n := range lb.c.Nodes() {
		if !n.Down() && servesHealthChecks(n) {
			k, err := lb.c.healthChecker()
			if err != nil {
				if !errors.Is(err, errClusterClosed) {
					lb.c.recordErr(fmt.Errorf("cloud load balancer for %s: %w", lb.key, err))
				}
				return
			}
			k.start(lb, gen, n, port, due)
		}
	}
	lb.armChecks(gen, due)
}

// record applies a check's result to the load balancer's view of the node.
func (lb *loadBalancer) record(chk *hcCheck, res HealthCheckResult) {
	cfg := chk.k.config()
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.hcGen != chk.gen || lb.removed {
		return
	}
	t := lb.targets[chk.node.Name()]
	if t == nil {
		t = &nodeTarget{}
		lb.targets[chk.node.Name()] = t
	}
	t.checked, t.last = true, res
	if res.OK {
		t.succ, t.fail = t.succ+1, 0
		if t.succ >= cfg.HealthyThreshold {
			t.healthy = true
		}
	} else {
		t.succ, t.fail = 0, t.fail+1
		if t.fail >= cfg.UnhealthyThreshold {
			t.healthy = false
		}
	}
}

// nodeHealthyLocked reports whether the load balancer sends new flows of svc to n.
func (lb *loadBalancer) nodeHealthyLocked(n *Node, svc *corev1.Service) bool {
	if n.Down() {
		return false
	}
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return true
	}
	if lb.hcPort == 0 || !servesHealthChecks(n) {
		return n.healthy(svc)
	}
	t := lb.targets[n.Name()]
	return t != nil && t.healthy
}

// stopChecks stops a removed load balancer's checks.
func (lb *loadBalancer) stopChecksLocked() {
	lb.removed = true
	lb.hcGen++
	if lb.tick != nil {
		lb.tick.Stop()
		lb.tick = nil
	}
}

type lbCheckTarget struct {
	lb   *loadBalancer
	gen  uint64
	port uint16
}

// checkedLBs lists the load balancers that health-check nodes, by service key.
func (c *Cluster) checkedLBs() []lbCheckTarget {
	c.mu.Lock()
	lbs := make([]*loadBalancer, 0, len(c.lbs))
	for _, lb := range c.lbs {
		lbs = append(lbs, lb)
	}
	c.mu.Unlock()
	sort.Slice(lbs, func(i, j int) bool { return lbs[i].key < lbs[j].key })
	var out []lbCheckTarget
	for _, lb := range lbs {
		lb.mu.Lock()
		if lb.hcPort != 0 && !lb.removed {
			out = append(out, lbCheckTarget{lb, lb.hcGen, lb.hcPort})
		}
		lb.mu.Unlock()
	}
	return out
}

// checkNow checks the nodes for every load balancer that health-checks, and waits for
// the checks if asked to (see the file's doc).
func (c *Cluster) checkNow(nodes []*Node, wait bool) {
	var live []*Node
	for _, n := range nodes {
		if !n.Down() && servesHealthChecks(n) {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return
	}
	lbs := c.checkedLBs()
	if len(lbs) == 0 {
		return
	}
	k, err := c.healthChecker()
	if err != nil {
		if !errors.Is(err, errClusterClosed) {
			c.recordErr(fmt.Errorf("cloud load balancer: %w", err))
		}
		return
	}
	var checks []*hcCheck
	for _, t := range lbs {
		for _, n := range live {
			checks = append(checks, k.start(t.lb, t.gen, n, t.port, time.Time{}))
		}
	}
	if !wait {
		return
	}
	limit := time.Now().Add(settleWait)
	for _, chk := range checks {
		chk.settle(limit, false)
	}
}

// checkAfterSync is the check of a node right after its proxy synced. In replay mode it
// is not waited for: Cluster.Run carries its packets.
func (c *Cluster) checkAfterSync(n *Node) { c.checkNow([]*Node{n}, !c.cfg.Replay) }

// CheckLoadBalancers makes the cloud load balancer health-check every live node now, for
// every LoadBalancer Service with externalTrafficPolicy Local, and returns when the
// checks have ended: answered, or failed because a packet was dropped on the way (see the
// doc of the health checks for checks across faulty links). The thresholds apply as for
// any check: a node whose health port went dark is out after UnhealthyThreshold calls.
// In replay mode call it inside Cluster.Run, which carries the checks' packets.
func (c *Cluster) CheckLoadBalancers() { c.checkNow(c.Nodes(), true) }

// LoadBalancerHealth returns the cloud load balancer's view of every node for a
// LoadBalancer Service, in node order, and false if the service has no load balancer.
func (c *Cluster) LoadBalancerHealth(namespace, name string) ([]NodeHealth, bool) {
	c.mu.Lock()
	lb := c.lbs[namespace+"/"+name]
	c.mu.Unlock()
	if lb == nil {
		return nil, false
	}
	var out []NodeHealth
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, n := range c.Nodes() {
		h := NodeHealth{Node: n.Name()}
		switch {
		case n.Down():
			h.Source = "down"
		case lb.svc == nil || lb.svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal:
			h.Source, h.Healthy = "policy", true
		case lb.hcPort == 0 || !servesHealthChecks(n):
			h.Source, h.Healthy = "api", n.healthy(lb.svc)
		default:
			h.Source = "health-check"
			if t := lb.targets[n.Name()]; t != nil {
				h.Healthy, h.Checked, h.Successes, h.Failures, h.Last = t.healthy, t.checked, t.succ, t.fail, t.last
			}
		}
		out = append(out, h)
	}
	return out, true
}
