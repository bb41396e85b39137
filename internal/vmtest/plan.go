package vmtest

// The plan the host hands the guest and the results the guest sends back. Both sides
// import these types: the host (this package's Run) writes Plan as /plan.json into the
// boot's initramfs; the agent (vmagent, the guest's /init) reads it, runs every case and
// prints one Result per line on the serial console between the markers below.

// Case kinds the agent runs.
const (
	// KindIPVSScript runs a clusterlab ipvs script (the emulator's grammar: ipvsadm
	// commands, sysctl, conn and -L lines) on the guest's kernel: ipvsadm commands go
	// through package kernel's IPVS adapter, conn lines are real TCP or UDP connections
	// from a client network namespace through a director namespace (where IPVS runs)
	// to real servers in a third, and -L lines snapshot the adapter's listing.
	KindIPVSScript = "ipvs-script"
	// KindIPVSCalls makes ipvs.Interface calls on package kernel's IPVS adapter in a
	// fresh network namespace and reports each call's error class and the listing after
	// it.
	KindIPVSCalls = "ipvs-calls"
	// KindGoTest runs a Go test binary the host cross-built (go test -c, static) in the
	// guest with the case's arguments and environment, in the directory the host's
	// package has (its testdata/ is in the image at the same path); every line the
	// binary prints comes back as a Result with Output set, and the closing Result
	// carries its exit status. RunGoTests is the host side.
	KindGoTest = "go-test"
)

// Plan is what one boot runs.
type Plan struct {
	Cases []Case `json:"cases"`
}

// Case is one test case: a script or a list of calls, in a namespace set of its own
// that the agent deletes afterwards.
type Case struct {
	Name   string  `json:"name"`
	Kind   string  `json:"kind"`
	Script string  `json:"script,omitempty"`  // KindIPVSScript
	Calls  []Call  `json:"calls,omitempty"`   // KindIPVSCalls
	GoTest *GoTest `json:"go_test,omitempty"` // KindGoTest
}

// GoTest is a test binary to run in the guest.
type GoTest struct {
	Binary string   `json:"binary"` // its path in the guest
	Dir    string   `json:"dir"`    // the working directory (the package's directory)
	Args   []string `json:"args,omitempty"`
	Env    []string `json:"env,omitempty"` // added to the agent's (PATH, HOME, TMPDIR)
	// Timeout kills the binary's process group after this many seconds (0: none; the
	// boot's own timeout still ends everything).
	Timeout int `json:"timeout,omitempty"`
}

// Call is one ipvs.Interface method call, with its arguments in the JSON form of
// ipvs.VirtualServer and ipvs.RealServer (netip addresses as strings).
type Call struct {
	Method string          `json:"method"` // AddVirtualServer, UpdateRealServer, ...
	VS     *VirtualServer  `json:"vs,omitempty"`
	RS     *RealServer     `json:"rs,omitempty"`
	Times  *TimeoutsConfig `json:"timeouts,omitempty"` // ConfigureTimeouts
}

// VirtualServer mirrors ipvs.VirtualServer for JSON.
type VirtualServer struct {
	Address   string `json:"address,omitempty"`
	Protocol  string `json:"protocol,omitempty"`
	Port      uint16 `json:"port,omitempty"`
	FWMark    uint32 `json:"fwmark,omitempty"`
	Scheduler string `json:"scheduler,omitempty"`
	Flags     uint32 `json:"flags,omitempty"`
	Timeout   uint32 `json:"timeout,omitempty"`
	Netmask   uint32 `json:"netmask,omitempty"`
}

// RealServer mirrors ipvs.RealServer for JSON.
type RealServer struct {
	Address        string `json:"address"`
	Port           uint16 `json:"port"`
	Weight         int    `json:"weight"`
	Forward        uint32 `json:"forward,omitempty"`
	UpperThreshold uint32 `json:"u_threshold,omitempty"`
	LowerThreshold uint32 `json:"l_threshold,omitempty"`
	ActiveConn     int    `json:"active,omitempty"`
	InactiveConn   int    `json:"inactive,omitempty"`
	PersistConn    int    `json:"persist,omitempty"`
}

// TimeoutsConfig is ConfigureTimeouts' arguments in seconds.
type TimeoutsConfig struct {
	TCP    int `json:"tcp"`
	TCPFin int `json:"tcpfin"`
	UDP    int `json:"udp"`
}

// Service is a virtual server and its real servers in kernel list order, as a listing
// shows them.
type Service struct {
	VS           VirtualServer `json:"vs"`
	Destinations []RealServer  `json:"destinations"`
}

// Result is what the agent reports: one per case step (Step counts from 0 over the
// script's lines or the calls), then one with Done set closing the case.
type Result struct {
	Case string `json:"case"`
	Step int    `json:"step"`
	Line int    `json:"line,omitempty"` // KindIPVSScript: the script line
	Text string `json:"text,omitempty"` // the line or the call
	// Conn lines: the real server that answered ("10.1.0.2:80"), or NoDestination with
	// the client's error (IPVS refuses with ICMP port unreachable).
	Destination   string `json:"destination,omitempty"`
	NoDestination bool   `json:"no_destination,omitempty"`
	// The error of an ipvsadm line or a call, classified as the ipvs package's errnos:
	// "exist", "notfound", "invalid", "range", or "other"; empty for none.
	ErrClass string    `json:"err_class,omitempty"`
	Err      string    `json:"err,omitempty"`
	Listing  []Service `json:"listing,omitempty"` // -L lines and calls: the state after
	Listed   bool      `json:"listed,omitempty"`  // Listing was taken (it may be empty)
	// -Lc lines: the connection table as ipvsadm -Lnc shows it without the expiry
	// column ("TCP ESTABLISHED 10.0.0.1:40001 10.96.0.1:80 10.1.0.2:8080"), sorted.
	Conns       []string `json:"conns,omitempty"`
	ConnsListed bool     `json:"conns_listed,omitempty"`
	// KindGoTest: one line of the binary's standard output or error (merged, in the
	// order written), without its newline.
	Output string `json:"output,omitempty"`
	// KindGoTest, on the Done result: the binary's exit status (-1: killed or did not
	// run; Fatal says why).
	Exit int `json:"exit,omitempty"`
	// Done closes a case: Fatal is an error that stopped it (its later steps did not
	// run), Leftover what cleaning up found still there, Elapsed its wall time.
	Done     bool     `json:"done,omitempty"`
	Fatal    string   `json:"fatal,omitempty"`
	Leftover []string `json:"leftover,omitempty"`
	Elapsed  string   `json:"elapsed,omitempty"`
}

// Console framing: the agent prints ResultPrefix+JSON per result, BootedLine once its
// setup is done (with the kernel release and the modules loaded), and EndLine at the end.
const (
	ResultPrefix = "CLUSTERLAB-VM-RESULT "
	BootedPrefix = "CLUSTERLAB-VM-BOOTED "
	EndLine      = "CLUSTERLAB-VM-END"
	FailPrefix   = "CLUSTERLAB-VM-FAIL "
)

// Booted is the agent's report after setup.
type Booted struct {
	Release string   `json:"release"`
	Modules []string `json:"modules"` // loaded, in load order
	Elapsed string   `json:"elapsed"` // since the agent started
}
