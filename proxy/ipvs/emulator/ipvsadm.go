package emulator

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// This file is the ipvsadm face: the command line of ipvsadm 1.31 (option spellings,
// defaults and checks as ipvsadm.c has them) applied to a Model, and its listings.

// Op is an ipvsadm command.
type Op int

// ipvsadm commands, in ipvsadm.c's CMD_* order.
const (
	OpNone Op = iota
	OpAdd
	OpEdit
	OpDel
	OpFlush
	OpList
	OpAddDest
	OpDelDest
	OpEditDest
	OpSetTimeout
	OpStartDaemon
	OpStopDaemon
	OpRestore
	OpSave
	OpZero
)

var cmdNames = [...]string{"", "add-service", "edit-service", "delete-service", "flush", "list",
	"add-server", "delete-server", "edit-server", "set", "start-daemon", "stop-daemon", "restore",
	"save", "zero"}

func (o Op) String() string {
	if o > 0 && int(o) < len(cmdNames) {
		return cmdNames[o]
	}
	return "none"
}

// option indexes (OPTC_*).
const (
	optNumeric = iota
	optConnection
	optService
	optScheduler
	optPersistent
	optNetmask
	optServer
	optForward
	optWeight
	optUThreshold
	optLThreshold
	optMcast
	optTimeout
	optDaemon
	optStats
	optRate
	optThresholds
	optPersistentConn
	optNoSort
	optSyncID
	optExact
	optOnePacket
	optPE
	optSchedFlags
	optMcastGroup
	optMcastPort
	optMcastTTL
	optSyncMaxlen
	optTunInfo
	optTunType
	optTunPort
	optTunNoCsum
	optTunCsum
	optTunRemCsum
	numOpts
)

var optNames = [numOpts]string{"numeric", "connection", "service-address", "scheduler", "persistent",
	"netmask", "real-server", "forwarding-method", "weight", "u-threshold", "l-threshold",
	"mcast-interface", "timeout", "daemon", "stats", "rate", "thresholds", "persistent-conn",
	"nosort", "syncid", "exact", "ops", "pe", "sched-flags", "mcast-group", "mcast-port",
	"mcast-ttl", "sync-maxlen", "tun-info", "tun-type", "tun-port", "tun-nocsum", "tun-csum",
	"tun-remcsum"}

// cmdOpts is ipvsadm's commands_v_options table: '+' compulsory, 'x' illegal, '1'
// exclusive, ' ' optional.
var cmdOpts = [14]string{
	/*ADD*/ "xx+   xxxxxxxxxxxxxxx   xxxxxxxxxx",
	/*EDIT*/ "xx+   xxxxxxxxxxxxxxx   xxxxxxxxxx",
	/*DEL*/ "xx+xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	/*FLUSH*/ "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	/*LIST*/ " 11xxxxxxxxx11       xxxxxxx xxxxx",
	/*ADDSRV*/ "xx+xxx+    xxxxxxxxxxxxxxxxxx     ",
	/*DELSRV*/ "xx+xxx+xxxxxxxxxxxxxxxxxxxxxxxxxxx",
	/*EDITSRV*/ "xx+xxx+    xxxxxxxxxxxxxxxxxx     ",
	/*TIMEOUT*/ "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	/*STARTD*/ "xxxxxxxxxxx xxxxxxx xxxx    xxxxxx",
	/*STOPD*/ "xxxxxxxxxxxxxxxxxxx xxxxxxxxxxxxxx",
	/*RESTORE*/ "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	/*SAVE*/ " xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	/*ZERO*/ "xx xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
}

const maxTimeout = 86400 * 31

// Default persistence timeout of ipvsadm -p without a value (IPVS_SVC_PERSISTENT_TIMEOUT).
const defaultPersistTimeout = 300

// Command is one parsed ipvsadm command line.
type Command struct {
	Op       Op
	Args     []string // the words, without a leading "ipvsadm"
	opts     uint64
	svc      svcSpec
	svcAF6   bool // ce->svc.af is AF_INET6
	dest     destSpec
	destAF6  bool
	sched    string
	flagsArg string
	timeouts [3]int
}

// command errors carry the option they are about
func optErr(opt, format string, args ...any) error {
	return fmt.Errorf("%s: %w", opt, fmt.Errorf(format, args...))
}

// ParseCommand parses an ipvsadm command line (without the program name; a leading
// "ipvsadm" word is skipped). Short options may be bundled (-Ln, -At ADDR), long options
// take "--opt value" or "--opt=value". The checks and defaults are ipvsadm's: weight 1,
// forwarding -g, scheduler wlc, persistence 300 s, netmask /32 (/128).
func ParseCommand(args []string) (*Command, error) {
	if len(args) > 0 && (args[0] == "ipvsadm" || strings.HasSuffix(args[0], "/ipvsadm")) {
		args = args[1:]
	}
	c := &Command{Args: append([]string(nil), args...)}
	c.dest.weight = 1
	c.dest.fwd = ipvs.DirectRoute
	c.svc.mask4 = 0xffffffff
	c.svc.bits6 = 128
	toks, err := splitOptions(args)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, errors.New("no command: try -A, -E, -D, -C, -a, -e, -d, -L, -S, -Z or --set")
	}
	var positional []string
	for i, t := range toks {
		if t.name == "" {
			positional = append(positional, t.arg)
			continue
		}
		if i == 0 || c.Op == OpNone {
			if err := c.setCommand(t); err != nil {
				return nil, err
			}
			continue
		}
		if err := c.option(t); err != nil {
			return nil, err
		}
	}
	if c.Op == OpNone {
		return nil, errors.New("no command: try -A, -E, -D, -C, -a, -e, -d, -L, -S, -Z or --set")
	}
	if c.Op == OpSetTimeout {
		if len(positional) < 3 {
			return nil, errors.New("--set option requires 3 timeout values")
		}
		for i := 0; i < 3; i++ {
			v, ok := stringToNumber(positional[i], 0, maxTimeout)
			if !ok {
				return nil, optErr("--set", "invalid timeout value `%s' specified", positional[i])
			}
			c.timeouts[i] = v
		}
		positional = positional[3:]
	}
	if len(positional) > 0 {
		return nil, fmt.Errorf("unexpected argument %s", positional[0])
	}
	if c.flagsArg != "" {
		c.svc.flags &^= ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2 | ipvs.FlagSchedSH3
		f, err := parseSchedFlags(c.sched, c.flagsArg)
		if err != nil {
			return nil, err
		}
		c.svc.flags |= f
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

type optTok struct {
	name string // "A", "t", "add-service"...; "" for a positional word
	arg  string
	has  bool // an argument was attached (-t1.2.3.4, --x=y) or taken
}

// option arity: 0 none, 1 required, 2 optional (popt's POPT_ARGFLAG_OPTIONAL)
var shortOpts = map[byte]int{
	'A': 0, 'E': 0, 'D': 0, 'C': 0, 'L': 0, 'l': 0, 'Z': 0, 'a': 0, 'e': 0, 'd': 0, 'h': 0,
	'v': 0, 'R': 0, 'S': 0, 't': 1, 'u': 1, 'f': 1, 's': 1, 'p': 2, 'M': 1, 'r': 1, 'm': 0,
	'i': 0, 'g': 0, 'w': 1, 'x': 1, 'y': 1, 'n': 0, 'c': 0, 'X': 0, '6': 0, 'o': 0, 'b': 1,
}

var longOpts = map[string]int{
	"add-service": 0, "edit-service": 0, "delete-service": 0, "clear": 0, "list": 0, "zero": 0,
	"add-server": 0, "edit-server": 0, "delete-server": 0, "set": 0, "help": 0, "version": 0,
	"restore": 0, "save": 0, "start-daemon": 1, "stop-daemon": 1, "tcp-service": 1,
	"udp-service": 1, "sctp-service": 1, "fwmark-service": 1, "scheduler": 1, "persistent": 2,
	"netmask": 1, "real-server": 1, "masquerading": 0, "ipip": 0, "gatewaying": 0, "weight": 1,
	"u-threshold": 1, "l-threshold": 1, "numeric": 0, "connection": 0, "mcast-interface": 1,
	"syncid": 1, "timeout": 0, "daemon": 0, "stats": 0, "rate": 0, "thresholds": 0,
	"persistent-conn": 0, "nosort": 0, "sort": 0, "exact": 0, "ipv6": 0, "ops": 0, "pe": 1,
	"sched-flags": 1, "mcast-group": 1, "mcast-port": 1, "mcast-ttl": 1, "sync-maxlen": 1,
	"tun-info": 0, "tun-type": 1, "tun-port": 1, "tun-nocsum": 0, "tun-csum": 0, "tun-remcsum": 0,
}

// long spellings of the short options
var longToShort = map[string]string{
	"add-service": "A", "edit-service": "E", "delete-service": "D", "clear": "C", "list": "L",
	"zero": "Z", "add-server": "a", "edit-server": "e", "delete-server": "d", "help": "h",
	"version": "v", "restore": "R", "save": "S", "tcp-service": "t", "udp-service": "u",
	"fwmark-service": "f", "scheduler": "s", "persistent": "p", "netmask": "M", "real-server": "r",
	"masquerading": "m", "ipip": "i", "gatewaying": "g", "weight": "w", "u-threshold": "x",
	"l-threshold": "y", "numeric": "n", "connection": "c", "exact": "X", "ipv6": "6", "ops": "o",
	"sched-flags": "b",
}

func splitOptions(args []string) ([]optTok, error) {
	var out []optTok
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "--") && len(a) > 2:
			name, val, eq := strings.Cut(a[2:], "=")
			ar, ok := longOpts[name]
			if !ok {
				return nil, fmt.Errorf("%s: unknown option", a)
			}
			t := optTok{name: name}
			if s, ok := longToShort[name]; ok {
				t.name = s
			}
			switch ar {
			case 0:
				if eq {
					return nil, fmt.Errorf("--%s: option does not take an argument", name)
				}
			case 1:
				if eq {
					t.arg, t.has = val, true
				} else if i+1 < len(args) {
					i++
					t.arg, t.has = args[i], true
				} else {
					return nil, fmt.Errorf("--%s: missing argument", name)
				}
			case 2:
				if eq {
					t.arg, t.has = val, true
				} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
					i++
					t.arg, t.has = args[i], true
				}
			}
			out = append(out, t)
		case strings.HasPrefix(a, "-") && len(a) > 1 && a != "--":
			for j := 1; j < len(a); j++ {
				ch := a[j]
				ar, ok := shortOpts[ch]
				if !ok {
					return nil, fmt.Errorf("-%c: unknown option", ch)
				}
				t := optTok{name: string(ch)}
				if ar == 0 {
					out = append(out, t)
					continue
				}
				rest := a[j+1:]
				switch {
				case rest != "":
					t.arg, t.has = rest, true
				case ar == 1 && i+1 < len(args):
					i++
					t.arg, t.has = args[i], true
				case ar == 1:
					return nil, fmt.Errorf("-%c: missing argument", ch)
				case ar == 2 && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
					i++
					t.arg, t.has = args[i], true
				}
				out = append(out, t)
				break
			}
		default:
			out = append(out, optTok{arg: a})
		}
	}
	return out, nil
}

func (c *Command) setCommand(t optTok) error {
	var op Op
	switch t.name {
	case "A":
		op = OpAdd
	case "E":
		op = OpEdit
	case "D":
		op = OpDel
	case "a":
		op = OpAddDest
	case "e":
		op = OpEditDest
	case "d":
		op = OpDelDest
	case "C":
		op = OpFlush
	case "L", "l":
		op = OpList
	case "Z":
		op = OpZero
	case "set":
		op = OpSetTimeout
	case "R":
		op = OpRestore
	case "S":
		op = OpSave
	case "start-daemon":
		op = OpStartDaemon
	case "stop-daemon":
		op = OpStopDaemon
	case "h", "v":
		return fmt.Errorf("-%s: help and version are not available here", t.name)
	default:
		return fmt.Errorf("%s: the first option must be a command (-A -E -D -C -a -e -d -L -S -Z --set)", dashed(t.name))
	}
	if c.Op != OpNone {
		return errors.New("multiple commands specified")
	}
	c.Op = op
	return nil
}

func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func (c *Command) set(o int) error {
	bit := uint64(1) << o
	if c.opts&bit != 0 {
		return fmt.Errorf("multiple '%s' options specified", optNames[o])
	}
	c.opts |= bit
	return nil
}

// commandOpts are the options that name a command (and help and version): after the
// command, another one is "multiple commands specified", as popt reports it.
var commandOpts = map[string]bool{
	"set": true, "A": true, "E": true, "D": true, "a": true, "e": true, "d": true, "C": true,
	"L": true, "l": true, "Z": true, "R": true, "S": true, "start-daemon": true,
	"stop-daemon": true, "h": true, "v": true,
}

// optBits are the OPT_* bits of the options after the command (-6 and --sort have
// none).
var optBits = map[string]int{
	"t": optService, "u": optService, "sctp-service": optService, "f": optService,
	"s": optScheduler, "p": optPersistent, "M": optNetmask, "o": optOnePacket,
	"b": optSchedFlags, "pe": optPE,
	"r": optServer, "i": optForward, "g": optForward, "m": optForward, "w": optWeight,
	"x": optUThreshold, "y": optLThreshold,
	"tun-info": optTunInfo, "tun-type": optTunType, "tun-port": optTunPort,
	"tun-nocsum": optTunNoCsum, "tun-csum": optTunCsum, "tun-remcsum": optTunRemCsum,
	"c": optConnection, "n": optNumeric, "timeout": optTimeout, "daemon": optDaemon,
	"stats": optStats, "rate": optRate, "thresholds": optThresholds,
	"persistent-conn": optPersistentConn, "nosort": optNoSort, "X": optExact,
}

// option applies one option after the command, as ipvsadm's process_options() does:
// the option sets its OPT_* bit (a second time is an error), then its value is stored.
func (c *Command) option(t optTok) error {
	if commandOpts[t.name] {
		return errors.New("multiple commands specified")
	}
	if bit, ok := optBits[t.name]; ok {
		if err := c.set(bit); err != nil {
			return err
		}
	}
	switch t.name {
	case "t", "u", "sctp-service", "f", "6":
		return c.serviceOption(t)
	case "s", "p", "M", "o", "b", "pe":
		return c.schedulingOption(t)
	case "r", "i", "g", "m", "w", "x", "y":
		return c.serverOption(t)
	case "tun-type", "tun-port", "tun-csum", "tun-remcsum":
		return c.tunnelOption(t)
	case "mcast-interface", "syncid", "mcast-group", "mcast-port", "mcast-ttl", "sync-maxlen":
		return optErr("--"+t.name, "the sync daemon is not modelled: %w", ErrUnsupported)
	}
	if _, ok := optBits[t.name]; ok || t.name == "sort" {
		return nil
	}
	return fmt.Errorf("%s: invalid option", dashed(t.name))
}

// serviceOption is the virtual service: -t/-u/--sctp-service ADDR[:PORT], -f MARK, and
// -6 (an IPv6 fwmark service).
func (c *Command) serviceOption(t optTok) error {
	opt := dashed(t.name)
	switch t.name {
	case "t", "u", "sctp-service":
		switch t.name {
		case "t":
			c.svc.proto = netfilter.ProtoTCP
		case "u":
			c.svc.proto = netfilter.ProtoUDP
		default:
			c.svc.proto = netfilter.ProtoSCTP
		}
		addr, port, _, ok := parseService(t.arg, c.svc.proto)
		if !ok {
			return optErr(opt+" "+t.arg, "illegal virtual server address[:port] specified")
		}
		c.svcAF6 = addr.Is6()
		if c.svcAF6 {
			c.svc.bits6 = 128
		}
		c.svc.key = svcKey{v6: c.svcAF6, proto: c.svc.proto, addr: addr, port: port}
	case "f":
		mark, ok := parseFwmark(t.arg)
		if !ok {
			return optErr(opt+" "+t.arg, "invalid fwmark value `%s' specified", t.arg)
		}
		c.svcAF6 = false
		c.svc.proto = netfilter.ProtoTCP
		c.svc.key = svcKey{fwmark: mark}
	case "6":
		if c.svc.key.fwmark == 0 {
			return errors.New("-6: -6 used before -f")
		}
		c.svcAF6 = true
		c.svc.key.v6 = true
		c.svc.bits6 = 128
	}
	return nil
}

// schedulingOption is how the service schedules: -s SCHEDULER, -p [TIMEOUT],
// -M NETMASK, -o (one-packet), -b FLAGS, and --pe (not modelled).
func (c *Command) schedulingOption(t optTok) error {
	opt := dashed(t.name)
	switch t.name {
	case "s":
		c.sched = t.arg
	case "p":
		c.svc.flags |= ipvs.FlagPersistent
		c.svc.timeoutSec = defaultPersistTimeout
		if t.has {
			v, ok := stringToNumber(t.arg, 1, maxTimeout)
			if !ok {
				return optErr(opt+" "+t.arg, "invalid timeout value `%s' specified", t.arg)
			}
			c.svc.timeoutSec = uint32(v)
		}
	case "M":
		return c.netmask(opt, t.arg)
	case "o":
		c.svc.flags |= ipvs.FlagOnePacket
	case "b":
		c.flagsArg = t.arg
	case "pe":
		return optErr("--pe "+t.arg, "persistence engines are not modelled: %w", ErrUnsupported)
	}
	return nil
}

// netmask is -M: a dotted (or inet_aton) IPv4 mask, or an IPv6 prefix length once the
// service is IPv6.
func (c *Command) netmask(opt, arg string) error {
	if c.svcAF6 {
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 || n > 128 {
			return optErr(opt+" "+arg, "illegal ipv6 netmask specified")
		}
		c.svc.bits6 = n
		return nil
	}
	a, err := netip.ParseAddr(arg)
	if err != nil || !a.Is4() {
		if v, ok := inetAton(arg); ok {
			c.svc.mask4 = v
			return nil
		}
		return optErr(opt+" "+arg, "illegal virtual server persistent mask specified")
	}
	b := a.As4()
	c.svc.mask4 = be32(b[:])
	return nil
}

// serverOption is the real server: -r ADDR[:PORT], the forwarding method -i/-g/-m,
// -w WEIGHT, and the connection thresholds -x/-y.
func (c *Command) serverOption(t optTok) error {
	opt := dashed(t.name)
	switch t.name {
	case "r":
		addr, port, hasPort, ok := parseService(t.arg, c.svc.proto)
		if !ok {
			return optErr(opt+" "+t.arg, "illegal real server address[:port] specified")
		}
		c.destAF6 = addr.Is6()
		c.dest.addr = addr
		c.dest.port = port
		if !hasPort {
			c.dest.port = c.svc.key.port
		}
	case "i", "g", "m":
		c.dest.fwd = map[string]ipvs.ForwardMethod{"i": ipvs.Tunnel, "g": ipvs.DirectRoute, "m": ipvs.Masquerade}[t.name]
	case "w":
		v, ok := stringToNumber(t.arg, 0, 65535)
		if !ok {
			return optErr(opt+" "+t.arg, "illegal weight specified (want 0..65535)")
		}
		c.dest.weight = v
	case "x", "y":
		name := "u_threshold"
		if t.name == "y" {
			name = "l_threshold"
		}
		v, ok := stringToNumber(t.arg, 0, math.MaxInt32)
		if !ok {
			return optErr(opt+" "+t.arg, "illegal %s specified", name)
		}
		if t.name == "x" {
			c.dest.uThresh = uint32(v)
		} else {
			c.dest.lThresh = uint32(v)
		}
	}
	return nil
}

// tunnelOption is a tunnel setting of the real server: --tun-type, --tun-port and the
// checksum modes --tun-csum and --tun-remcsum.
func (c *Command) tunnelOption(t optTok) error {
	switch t.name {
	case "tun-type":
		switch t.arg {
		case "ipip":
			c.dest.tun.typ = 0
		case "gue":
			c.dest.tun.typ = 1
		default:
			return optErr("--tun-type "+t.arg, "illegal tunnel type specified")
		}
	case "tun-port":
		v, ok := stringToNumber(t.arg, 1, 65535)
		if !ok {
			return optErr("--tun-port "+t.arg, "illegal tunnel port specified")
		}
		c.dest.tun.port = uint16(v)
	case "tun-csum":
		c.dest.tun.flags = 1
	case "tun-remcsum":
		c.dest.tun.flags = 2
	}
	return nil
}

// check is generic_opt_check() and the rest of process_options()'s checks.
func (c *Command) check() error {
	row := cmdOpts[c.Op-1]
	count, last := 0, 0
	for j := 0; j < numOpts; j++ {
		if c.opts&(1<<j) == 0 {
			if row[j] == '+' {
				return fmt.Errorf("You need to supply the '%s' option for the '%s' command", optNames[j], c.Op)
			}
			continue
		}
		switch row[j] {
		case 'x':
			return fmt.Errorf("Illegal '%s' option with the '%s' command", optNames[j], c.Op)
		case '1':
			count++
			if count > 1 {
				return fmt.Errorf("The option '%s' conflicts with the '%s' option in the '%s' command", optNames[j], optNames[last], c.Op)
			}
			last = j
		}
	}
	switch c.Op {
	case OpStartDaemon, OpStopDaemon:
		return fmt.Errorf("--%s: the sync daemon is not modelled: %w", c.Op, ErrUnsupported)
	case OpRestore:
		return fmt.Errorf("-R: restore reads standard input; use the --restore file instead: %w", ErrUnsupported)
	case OpAdd, OpEdit:
		if c.svc.key.fwmark == 0 && c.svc.key.port == 0 && c.svc.flags&ipvs.FlagPersistent == 0 {
			return errors.New("Zero port specified for non-persistent service")
		}
		if c.svc.flags&ipvs.FlagOnePacket != 0 && c.svc.key.fwmark == 0 && c.svc.proto != netfilter.ProtoUDP {
			return errors.New("One-Packet Scheduling is only for UDP virtual services")
		}
		if c.sched == "" {
			c.sched = "wlc"
		}
		c.svc.schedName = c.sched
	case OpAddDest, OpEditDest:
		if c.svc.key.fwmark == 0 && (c.dest.fwd == ipvs.Tunnel || c.dest.fwd == ipvs.DirectRoute) {
			c.dest.port = c.svc.key.port
		}
		if c.destAF6 != c.svcAF6 && c.dest.fwd != ipvs.Tunnel {
			return errors.New("Different address family is allowed only for tunneling servers")
		}
		tunOpts := uint64(1<<optTunType | 1<<optTunPort | 1<<optTunNoCsum | 1<<optTunCsum | 1<<optTunRemCsum)
		if c.opts&tunOpts != 0 && c.dest.fwd != ipvs.Tunnel {
			return errors.New("Tunnel options conflict with forward method")
		}
		if c.dest.tun.typ == 0 && c.opts&tunOpts&^(1<<optTunType) != 0 {
			return errors.New("Illegal tunnel option with the 'ipip' tunnel type")
		}
		if c.dest.tun.typ == 1 && c.opts&(1<<optTunPort) == 0 {
			return errors.New("You need to supply the 'tun-port' option for the 'gue' tunnel type")
		}
		n := 0
		for _, o := range []int{optTunNoCsum, optTunCsum, optTunRemCsum} {
			if c.opts&(1<<o) != 0 {
				n++
			}
		}
		if n > 1 {
			return errors.New("The tunnel checksum options conflict")
		}
	case OpList:
		if (c.has(optConnection) || c.has(optTimeout) || c.has(optDaemon)) && (c.has(optStats) || c.has(optRate) || c.has(optThresholds)) ||
			(c.has(optTimeout) || c.has(optDaemon)) && c.has(optPersistentConn) {
			return errors.New("options conflicts in the list command")
		}
		if c.has(optDaemon) {
			return fmt.Errorf("--daemon: the sync daemon is not modelled: %w", ErrUnsupported)
		}
		if c.has(optRate) {
			return fmt.Errorf("--rate: the rate estimator is not modelled: %w", ErrUnsupported)
		}
	}
	return nil
}

func (c *Command) has(o int) bool { return c.opts&(1<<o) != 0 }

// parseSchedFlags is parse_sched_flags().
func parseSchedFlags(sched, arg string) (ipvs.ServiceFlags, error) {
	if sched == "" {
		sched = "wlc"
	}
	var f ipvs.ServiceFlags
	for _, flag := range strings.Split(arg, ",") {
		if flag == "" {
			continue
		}
		want := ""
		switch flag {
		case "flag-1":
			f |= ipvs.FlagSchedSH1
		case "flag-2":
			f |= ipvs.FlagSchedSH2
		case "flag-3":
			f |= ipvs.FlagSchedSH3
		case "sh-fallback":
			f |= ipvs.FlagSchedSH1
			want = "sh"
		case "sh-port":
			f |= ipvs.FlagSchedSH2
			want = "sh"
		case "mh-fallback":
			f |= ipvs.FlagSchedSH1
			want = "mh"
		case "mh-port":
			f |= ipvs.FlagSchedSH2
			want = "mh"
		default:
			return 0, fmt.Errorf("-b %s: invalid scheduler flag `%s'", arg, flag)
		}
		if want != "" && sched != want {
			return 0, fmt.Errorf("-b %s: incompatible scheduler flag `%s' (scheduler %s)", arg, flag, sched)
		}
	}
	return f, nil
}

// stringToNumber is string_to_number(): a decimal in [min, max].
func stringToNumber(s string, min, max int) (int, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < int64(min) || v > int64(max) {
		return 0, false
	}
	return int(v), true
}

func parseFwmark(s string) (uint32, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > math.MaxUint32 {
		return 0, false
	}
	return uint32(v), true
}

// inetAton accepts the numeric forms of inet_aton (a, a.b, a.b.c, a.b.c.d; decimal, octal
// or hex parts), returning the address in host order.
func inetAton(s string) (uint32, bool) {
	parts := strings.Split(s, ".")
	if len(parts) == 0 || len(parts) > 4 {
		return 0, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 0, 32)
		if err != nil {
			return 0, false
		}
		vals[i] = v
	}
	var v uint64
	switch len(vals) {
	case 1:
		v = vals[0]
	case 2:
		if vals[0] > 255 || vals[1] > 0xffffff {
			return 0, false
		}
		v = vals[0]<<24 | vals[1]
	case 3:
		if vals[0] > 255 || vals[1] > 255 || vals[2] > 0xffff {
			return 0, false
		}
		v = vals[0]<<24 | vals[1]<<16 | vals[2]
	case 4:
		for _, x := range vals {
			if x > 255 {
				return 0, false
			}
		}
		v = vals[0]<<24 | vals[1]<<16 | vals[2]<<8 | vals[3]
	}
	return uint32(v), v <= math.MaxUint32
}

// wellKnownPorts stands in for getservbyname(): the names ipvsadm -L prints without -n
// for the ports Kubernetes services commonly use.
var wellKnownPorts = map[string]uint16{
	"ftp-data": 20, "ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "domain": 53, "http": 80,
	"pop3": 110, "ntp": 123, "imap": 143, "snmp": 161, "ldap": 389, "https": 443,
	"submission": 587, "imaps": 993, "pop3s": 995, "mysql": 3306, "postgresql": 5432,
	"http-alt": 8080, "redis": 6379,
}

// parseService is parse_service(): host[:port], [v6]:port, or a bare IPv6 address.
func parseService(s string, proto uint8) (addr netip.Addr, port uint16, hasPort, ok bool) {
	if s == "" || isAllDigits(s) {
		return netip.Addr{}, 0, false, false
	}
	host := s
	var portStr string
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 || end+1 >= len(s) || s[end+1] != ':' {
			return netip.Addr{}, 0, false, false
		}
		host, portStr, hasPort = s[1:end], s[end+2:], true
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && !a.Is4In6() && a.Zone() == "" {
		addr = a
	} else {
		if !hasPort {
			if i := strings.LastIndexByte(host, ':'); i >= 0 {
				host, portStr, hasPort = host[:i], host[i+1:], true
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is4() {
			v, ok2 := inetAton(host)
			if !ok2 {
				return netip.Addr{}, 0, false, false
			}
			a = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		}
		addr = a
	}
	if hasPort {
		if v, ok2 := stringToNumber(portStr, 0, 65535); ok2 {
			port = uint16(v)
		} else if v, ok2 := wellKnownPorts[portStr]; ok2 {
			port = v
		} else {
			return netip.Addr{}, 0, false, false
		}
	}
	return addr, port, hasPort, true
}

func isAllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// SplitArgs splits a command line into words: blanks separate, single and double quotes
// group, a backslash escapes the next character.
func SplitArgs(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			} else if ch == '\\' && quote == '"' && i+1 < len(line) {
				i++
				cur.WriteByte(line[i])
			} else {
				cur.WriteByte(ch)
			}
		case ch == '\'' || ch == '"':
			quote = ch
			inWord = true
		case ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// Exec applies an ipvsadm command line to the model; listings go to w.
func (m *Model) Exec(args []string, w io.Writer) error {
	c, err := ParseCommand(args)
	if err != nil {
		return err
	}
	return m.Apply(c, w)
}

// Apply runs a parsed command. A failed command changes nothing.
func (m *Model) Apply(c *Command, w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	return m.apply(c, w)
}

func (m *Model) apply(c *Command, w io.Writer) error {
	switch c.Op {
	case OpAdd:
		return m.addService(c.svc)
	case OpEdit:
		return m.editService(c.svc)
	case OpDel:
		return m.delService(c.svc.key)
	case OpFlush:
		for _, s := range m.sortedServices() {
			if err := m.delService(s.key); err != nil {
				return err
			}
		}
		return nil
	case OpZero:
		if c.has(optService) && m.services[c.svc.key] == nil {
			return fmt.Errorf("virtual service %s: %w", c.svc.key, ipvs.ErrNotFound)
		}
		if c.has(optService) {
			zeroStats([]*service{m.services[c.svc.key]})
		} else {
			zeroStats(m.sortedServices())
		}
		return nil
	case OpAddDest, OpEditDest, OpDelDest:
		s := m.services[c.svc.key]
		if s == nil {
			return fmt.Errorf("virtual service %s: service not defined: %w", c.svc.key, ipvs.ErrNotFound)
		}
		switch c.Op {
		case OpAddDest:
			return m.addDest(s, c.dest)
		case OpEditDest:
			return m.editDest(s, c.dest)
		}
		return m.delDest(s, c.dest.addr, c.dest.port)
	case OpSetTimeout:
		if c.timeouts[0] > 0 {
			m.tcpTimeouts[tcpEstablished] = secs(c.timeouts[0])
		}
		if c.timeouts[1] > 0 {
			m.tcpTimeouts[tcpFinWait] = secs(c.timeouts[1])
		}
		if c.timeouts[2] > 0 {
			m.udpTimeout = secs(c.timeouts[2])
		}
		return nil
	case OpSave:
		if w != nil {
			m.writeRules(w)
		}
		return nil
	case OpList:
		if c.has(optService) && m.services[c.svc.key] == nil {
			return fmt.Errorf("virtual service %s: no such service: %w", c.svc.key, ipvs.ErrNotFound)
		}
		if w == nil {
			return nil
		}
		switch {
		case c.has(optConnection):
			m.writeConns(w, c.has(optPersistentConn))
		case c.has(optStats):
			svcs := m.listServices(c.has(optNoSort))
			if c.has(optService) {
				svcs = []*service{m.services[c.svc.key]}
			} else {
				fmt.Fprintf(w, "IP Virtual Server version %s (size=%d)\n", IPVSVersion, 1<<m.tabBits)
			}
			writeStatsTitle(w)
			for _, s := range svcs {
				writeStatsLine(w, fmt.Sprintf("%-33s", statsName(s)), s.traffic, c.has(optExact))
				for _, d := range s.sortedDests(c.has(optNoSort)) {
					writeStatsLine(w, fmt.Sprintf("  -> %-28s", fmtAddrPort(d.addr, d.port)), d.traffic, c.has(optExact))
				}
			}
		case c.has(optTimeout):
			fmt.Fprintf(w, "Timeout (tcp tcpfin udp): %d %d %d\n", int(m.tcpTimeouts[tcpEstablished].Seconds()),
				int(m.tcpTimeouts[tcpFinWait].Seconds()), int(m.udpTimeout.Seconds()))
		default:
			f := listFormat{noSort: c.has(optNoSort), thresholds: c.has(optThresholds),
				persistentConn: c.has(optPersistentConn), tunInfo: c.has(optTunInfo)}
			if c.has(optService) {
				s := m.services[c.svc.key]
				if s == nil {
					return fmt.Errorf("virtual service %s: no such service: %w", c.svc.key, ipvs.ErrNotFound)
				}
				f.title(w)
				m.writeService(w, s, f)
				return nil
			}
			m.writeListing(w, f)
		}
		return nil
	}
	return fmt.Errorf("%s: %w", c.Op, ErrUnsupported)
}
