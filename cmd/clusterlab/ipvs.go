package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/netfilter"
	ipvsemu "github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// ipvsOptions are the flags of `clusterlab ipvs`.
type ipvsOptions struct {
	restore string
	script  string
	output  string
	kernel  string
}

const ipvsLong = `Replay IPVS in userspace: every Linux scheduler (rr wrr lc wlc sed nq dh sh mh lblc
lblcr fo ovf twos) exact to the kernel (4.18 and later), the connection table with its
TCP/UDP/SCTP states, counters and timeouts, persistence templates, and the trash of
removed real servers, on a virtual clock.

--restore FILE loads an ipvsadm -Sn dump (replayed like ipvsadm -R: each -a puts the
real server at the head of its list) or an ipvsadm -Ln listing (its ActiveConn and
InActConn become the real servers' counters; the printed order becomes the list order,
which is exact for ipvsadm -Ln --nosort). The format is detected. FILE "-" is stdin.

--script FILE runs one line at a time ("-" is stdin). A line is one of:
  ipvsadm command     without the leading "ipvsadm": -A -E -D -a -e -d -C -Z --set,
                      with -t/-u/--sctp-service/-f, -s, -p [timeout], -M, -w, -r,
                      -m/-g/-i, -b, -x, -y, -o, and long spellings; -L/-l (-n, -c,
                      --nosort, --thresholds, --persistent-conn, --timeout, --stats,
                      --exact) and -S print listings exactly as ipvsadm does.
  conn tcp|udp CLIENT_IP:PORT VIP:PORT [close|server-close] [mark=N] [ct=confirmed]
                      a whole connection through the IPVS hooks: for TCP the three-way
                      handshake (the SYN-ACK only when the real server is masqueraded),
                      for UDP one datagram and its reply. It stays in the connection
                      table, counted as the kernel counts it, until it times out or a
                      later "conn ... close" line closes it (TCP: FIN from the client,
                      FIN-ACK, ACK, leaving TIME_WAIT for 2 minutes; UDP has no close:
                      its entry is expired as its idle timeout would). "close" on a
                      connection that does not exist opens and closes one. sctp works too.
                      A conn line on a tuple whose entry is in TIME_WAIT or CLOSE (SCTP:
                      CLOSED) is a new connection whose SYN meets that entry, as in the
                      kernel: rescheduled or kept per conn_reuse_mode and the kernel
                      release (see below), then closed again with close.
                      server-close (TCP): after the handshake the real server closes
                      first (FIN-ACK, the client's ACK) and the client keeps its side
                      open: the entry waits in FIN_WAIT (--set's tcpfin timeout).
                      For --stats, a UDP datagram carries 64 bytes each way (IP length
                      92); TCP segments are counted without payload.
                      With ct=confirmed the first packet has a confirmed conntrack entry
                      (see below); when the kernel drops it, nothing more is played.
  sched tcp|udp CLIENT_IP:PORT VIP:PORT [mark=N]
                      which destination a new connection would get now (persistence
                      templates included), changing nothing: no entry, no template, no
                      scheduler state (rr cursor, wrr weight, lblc cache, twos draws).
  pick tcp|udp CLIENT_IP:PORT VIP:PORT [mark=N]
                      the scheduler's decision for a new connection's first packet, as
                      the kernel takes it: rr and wrr cursors advance, lblc/lblcr caches
                      and twos draws move, persistence templates are used or made, but
                      no connection entry is added (a captured sequence of decisions
                      can be replayed one by one). sctp works too.
  packet tcp|udp|sctp SRC_IP:PORT DST_IP:PORT [flags=SYN,ACK,FIN,RST] [chunk=NAME]
                      [reply] [mark=N] [ct=confirmed]
                      one packet through the IPVS hook: from a client (the connection
                      table decides, the scheduler only for a packet that may start a
                      connection), or with reply from the real server back to the client
                      (its source becomes the virtual address). flags also take letters
                      (flags=SA); SCTP chunks: init, init-ack, cookie-echo, cookie-ack,
                      data, shutdown, shutdown-ack, shutdown-complete, abort, error.
  set -t|-u|-f SERVICE -r RIP:PORT [active=N] [inactive=N] [overloaded=yes|no]
                      set a real server's counters and OVERLOAD flag, to reproduce a
                      state captured from a node.
  sleep SECONDS       (or advance) move the virtual clock: connections, templates,
                      scheduler caches and the trash age as in the kernel. SECONDS is a
                      number (1.5) or a duration (2m30s).
  sysctl NAME=VALUE   net.ipv4.vs settings: conn_reuse_mode, expire_nodest_conn,
                      expire_quiescent_template, sloppy_tcp, sloppy_sctp, cache_bypass,
                      conntrack, lblc_expiration, lblcr_expiration (kube-proxy sets
                      conntrack=1 expire_nodest_conn=1 expire_quiescent_template=1).
  seed N              restart the twos scheduler's random source (default seed 0).
  kernel VERSION      the Linux release modelled from here on (as --kernel; default a
                      current kernel).
mark=N gives the packet firewall mark N, so that it matches a fwmark service whatever its
destination. ct=confirmed says the packet has a confirmed netfilter conntrack entry, as
on a node with conntrack=1 (kube-proxy's setting) a SYN reusing the tuple of an earlier
connection has; it changes what Linux 5.9 and later do when they would reschedule
(before 5.9, with conntrack=1, every such packet is dropped as if it had ct=confirmed,
since the kernel cannot tell a confirmed entry from a new one; a removed server's packet
is always dropped, its entry expired with expire_nodest_conn=1 and left otherwise; no
work item flushes a removed server's entries; and the weight-0 case needs a non-zero
conn_reuse_mode):
  - a SYN (SCTP: INIT) on an entry in TIME_WAIT or CLOSE (any non-zero
    conn_reuse_mode; bit 2 also a DR/TUN entry in FIN_WAIT; SCTP: CLOSED; never an
    entry of a persistent service, which its template controls) or, with
    expire_nodest_conn=1, on an entry of a weight-0 real server: without ct=confirmed
    the old entry is expired and the SYN scheduled at once; with it the SYN is dropped
    ("dropped: reused connection with conntrack, kernel expires the old entry;
    retransmit to reschedule") and the old entry expired with its conntrack entry, so
    the client's retransmission (a later line, without ct=confirmed) is scheduled.
    With conn_reuse_mode=0 and a non-zero weight the SYN goes to the old entry either
    way. A rescheduled SYN of a persistent service still follows its template, which
    stays valid unless expire_quiescent_template=1 and the server's weight is 0.
  - any packet on an entry of a removed real server with expire_nodest_conn=1: without
    ct=confirmed the entry is expired and the packet handled as if it had none (a SYN
    is scheduled, another packet is not IPVS traffic); with it the packet is dropped.
    With expire_nodest_conn=0 the packet is dropped either way and the entry lives
    until it times out.
sched and pick lines take no ct= (they do not look at the connection table), nor do
replies.
Blank lines and lines or words starting with # are comments. Without --restore the
script starts from an empty table; without --script the restored table is printed as
ipvsadm -Ln shows it.

Output (-o text) has one line per conn, sched, pick and packet line, in order, with the
chosen destination or "no destination" (for a packet dropped for its conntrack entry,
"dropped:" and why), and the listings the script asked for where it asked. -o json is
an object with:
  restore_format  "ipvsadm -Sn", "ipvsadm -Ln" or "empty" (absent without --restore)
  results         one object per conn, sched, pick and packet line:
    file, line        where the line is
    command           "conn", "sched", "pick" or "packet"
    protocol          "tcp", "udp" or "sctp"
    client, virtual   "ip:port" as given
    mark              the firewall mark (absent when 0)
    close             true for conn ... close
    conntrack         "confirmed" for ct=confirmed (absent otherwise)
    reply             true for packet ... reply
    flags             packet lines: "flags=SYN,ACK" or "chunk=init"
    destination       "ip:port" of the real server (for a reply: the virtual address
                      its source becomes; absent when none)
    no_destination    true when no real server was chosen
    verdict           "forward", "reject" (no destination: ICMP port unreachable),
                      "drop", "accept" (not IPVS traffic) or "bypass"
    via               "scheduler", "template", "connection" (an existing entry) or "none"
    service           the virtual service, e.g. "TCP 10.96.0.10:80" or "FWM 5"
    scheduler         its scheduler
    new_connection    true when the line created a connection entry
    state             the entry's state afterwards (e.g. "ESTABLISHED", "TIME_WAIT")
    expires           time left on the entry's timer
    reason            why, in words
    conntrack_drop    true when the packet was dropped for its confirmed conntrack
                      entry: the old entry is expired, a retransmitted SYN is scheduled
    time              virtual time since the start of the script
  listings        {file, line, command, output} for each -L/-S line
  final           the state at the end:
    services      [{service, scheduler, flags, persistent_timeout, netmask,
                    destinations: [{address, forward, weight, active_conns,
                    inactive_conns, persistent_conns, overloaded, upper_threshold,
                    lower_threshold}]}], real servers in kernel list order
    connections   [{protocol, client, virtual, destination, state, expires, template}]
  elapsed         virtual time the script took

Bad input (a file that does not load, a script line that does not parse or that the
kernel would refuse) stops with FILE:LINE and exit code 2; nothing is printed then.`

func init() {
	var o ipvsOptions
	cmd := &cobra.Command{
		Use:   "ipvs [--restore FILE] [--script FILE] [--kernel VERSION] [-o text|json]",
		Short: "Replay IPVS: ipvsadm dumps and commands, connections, scheduler decisions",
		Long:  ipvsLong,
		Example: `  clusterlab ipvs --restore testdata/ipvs/kube-proxy.sn                 # list a node's ipvsadm -Sn dump as -Ln
  clusterlab ipvs --restore testdata/ipvs/node.ln --script testdata/ipvs/oncall.script
  clusterlab ipvs --restore testdata/ipvs/kube-proxy.sn --script testdata/ipvs/tour.script -o json
  clusterlab ipvs --script testdata/ipvs/graceful.script                 # from an empty table
  printf 'sched tcp 10.0.0.1:40000 10.96.0.10:53\n' | clusterlab ipvs --restore testdata/ipvs/kube-proxy.sn --script -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runIPVS(o, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.restore, "restore", "", "ipvsadm -Sn or ipvsadm -Ln dump to start from (- for stdin)")
	cmd.Flags().StringVar(&o.script, "script", "", "script of ipvsadm commands, conn, sched, pick, packet, set, sleep, sysctl and kernel lines (- for stdin)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text, json or yaml")
	cmd.Flags().StringVar(&o.kernel, "kernel", "", "Linux release modelled, such as 5.4 (default a current kernel)")
	rootCmd.AddCommand(cmd)
}

// runIPVS is `clusterlab ipvs`: errors caused by the input are wrapped with badInput.
func runIPVS(o ipvsOptions, stdin io.Reader, w io.Writer) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.restore == "-" && o.script == "-" {
		return badInput(errors.New("--restore and --script cannot both read stdin"))
	}
	read := func(flag, name string) ([]byte, string, error) {
		if name == "" {
			return nil, "", nil
		}
		if name == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, "", fmt.Errorf("%s: reading stdin: %w", flag, err)
			}
			return b, "<stdin>", nil
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, "", badInput(fmt.Errorf("%s: %w", flag, err))
		}
		return b, name, nil
	}
	restore, restoreName, err := read("--restore", o.restore)
	if err != nil {
		return err
	}
	script, scriptName, err := read("--script", o.script)
	if err != nil {
		return err
	}
	var cfg ipvsemu.Config
	if o.kernel != "" {
		k, err := netfilter.ParseKernelVersion(o.kernel)
		if err != nil {
			return badInput(fmt.Errorf("--kernel: %w", err))
		}
		cfg.Kernel = k
	}
	rep, err := ipvsemu.RunScript(ipvsemu.ScriptInput{Restore: restore, RestoreName: restoreName, Script: script, ScriptName: scriptName, Config: cfg})
	if err != nil {
		return badInput(err)
	}
	if structured(o.output) {
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			return err
		}
		return writeStructured(w, o.output, b.Bytes())
	}
	return rep.WriteText(w)
}
