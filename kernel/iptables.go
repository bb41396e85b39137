package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/proxy/iptables"
)

// Backend is the iptables backend: which set of binaries (iptables-nft-* or
// iptables-legacy-*) the adapter runs.
type Backend string

// Backends. BackendAuto picks one the way kube-proxy's iptables wrapper script does; see
// DetectBackend.
const (
	BackendAuto   Backend = ""
	BackendNFT    Backend = "nft"
	BackendLegacy Backend = "legacy"
)

// Family is an IP address family.
type Family int

// Families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// defaultWaitSeconds is kube-proxy's -w value.
const defaultWaitSeconds = 5

// IPTablesOptions configure an IPTables.
type IPTablesOptions struct {
	// Backend selects iptables-nft-* or iptables-legacy-*; BackendAuto detects.
	Backend Backend
	// Family selects iptables (IPv4, the default) or ip6tables (IPv6).
	Family Family
	// Netns is the named network namespace (/run/netns/NAME) every command runs in, as
	// `ip netns exec NAME ...`; HostNamespace for the caller's own. Required: an empty
	// Netns is an error (ErrNoNamespace).
	Netns string
	// WaitSeconds is the -w value (how long to wait for the xtables lock); 0 means 5.
	WaitSeconds int
}

// IPTables is the kernel implementation of proxy/iptables.Interface: Restore runs
// iptables-restore with the text on stdin, Save runs iptables-save. It also carries the
// helpers kube-proxy uses outside the restore path (EnsureChain, EnsureRule for the hook
// jump rules, DeleteRule). Safe for concurrent use (the tools take the xtables lock).
type IPTables struct {
	opts    IPTablesOptions // Backend resolved, Family and WaitSeconds defaulted
	version IPTablesVersion
	run     runner
}

var _ iptables.Interface = (*IPTables)(nil)

// NewIPTables probes the iptables version (and detects the backend when opts.Backend is
// BackendAuto) and returns the adapter. It fails if the tools are missing or the
// namespace does not exist.
func NewIPTables(ctx context.Context, opts IPTablesOptions) (*IPTables, error) {
	return newIPTables(ctx, opts, execRunner{})
}

func newIPTables(ctx context.Context, opts IPTablesOptions, r runner) (*IPTables, error) {
	if err := checkNetns("iptables", opts.Netns); err != nil {
		return nil, err
	}
	if opts.Family == 0 {
		opts.Family = IPv4
	}
	if opts.Family != IPv4 && opts.Family != IPv6 {
		return nil, fmt.Errorf("iptables: bad family %v", opts.Family)
	}
	if opts.WaitSeconds <= 0 {
		opts.WaitSeconds = defaultWaitSeconds
	}
	switch opts.Backend {
	case BackendNFT, BackendLegacy:
	case BackendAuto:
		b, err := detectBackend(ctx, r, opts.Netns)
		if err != nil {
			return nil, err
		}
		opts.Backend = b
	default:
		return nil, fmt.Errorf("iptables: unknown backend %q (want %q or %q)", opts.Backend, BackendNFT, BackendLegacy)
	}
	ipt := &IPTables{opts: opts, run: r}
	c := ipt.cmd(ipt.tool(""), []string{"--version"}, nil)
	res := r.run(ctx, c)
	if err := commandError(c, res); err != nil {
		return nil, fmt.Errorf("iptables: version probe: %w", err)
	}
	v, err := ParseIPTablesVersion(string(res.stdout))
	if err != nil {
		return nil, fmt.Errorf("iptables: version probe: %w", err)
	}
	ipt.version = v
	return ipt, nil
}

// Backend returns the backend in use (never BackendAuto).
func (ipt *IPTables) Backend() Backend { return ipt.opts.Backend }

// Family returns the address family this adapter programs.
func (ipt *IPTables) Family() Family { return ipt.opts.Family }

// Netns returns the named network namespace the adapter runs in (HostNamespace for the
// caller's own).
func (ipt *IPTables) Netns() string { return ipt.opts.Netns }

// Version returns the version the tool reported.
func (ipt *IPTables) Version() IPTablesVersion { return ipt.version }

// tool names the binary for this backend and family: suffix "" is iptables itself,
// "-restore" and "-save" the others.
func (ipt *IPTables) tool(suffix string) string {
	return toolName(ipt.opts.Family, ipt.opts.Backend, suffix)
}

func toolName(f Family, b Backend, suffix string) string {
	base := "iptables"
	if f == IPv6 {
		base = "ip6tables"
	}
	return base + "-" + string(b) + suffix
}

func (ipt *IPTables) cmd(tool string, args []string, stdin []byte) command {
	argv := append([]string{tool}, args...)
	return command{argv: inNetnsArgv(ipt.opts.Netns, argv), stdin: stdin}
}

// Minimum versions for the wait flags, as kube-proxy gates them.
var (
	minWaitVersion        = IPTablesVersion{Major: 1, Minor: 4, Patch: 20} // iptables -w
	minWaitSecondsVersion = IPTablesVersion{Major: 1, Minor: 4, Patch: 22} // iptables -w N
	minRestoreWaitVersion = IPTablesVersion{Major: 1, Minor: 6, Patch: 2}  // iptables-restore -w N -W U
)

// waitFlags are the lock-wait flags for iptables itself (restore=false) or
// iptables-restore. The nft backend takes no lock and prints a warning for -W, so -W is
// passed to the legacy backend only.
func (ipt *IPTables) waitFlags(restore bool) []string {
	v := ipt.version
	if restore && !v.AtLeast(minRestoreWaitVersion) {
		return nil
	}
	if !v.AtLeast(minWaitVersion) {
		return nil
	}
	if !v.AtLeast(minWaitSecondsVersion) {
		return []string{"-w"}
	}
	flags := []string{"-w", strconv.Itoa(ipt.opts.WaitSeconds)}
	if ipt.opts.Backend == BackendLegacy {
		flags = append(flags, "-W", "100000")
	}
	return flags
}

// Restore runs iptables-restore with data on stdin. It implements iptables.Interface.
// The tool applies a whole input or none of it; on failure the error is a *RestoreError
// naming the input line the tool reported.
func (ipt *IPTables) Restore(ctx context.Context, data []byte, opts iptables.RestoreOptions) error {
	return ipt.restore(ctx, data, opts, false)
}

// CheckRestore is Restore with --test: the tool parses data and builds the rules as
// Restore would (iptables-legacy-restore also checks jumps against the chains that
// exist), reporting the first line it refuses as a *RestoreError, and changes nothing.
func (ipt *IPTables) CheckRestore(ctx context.Context, data []byte, opts iptables.RestoreOptions) error {
	return ipt.restore(ctx, data, opts, true)
}

func (ipt *IPTables) restore(ctx context.Context, data []byte, opts iptables.RestoreOptions, test bool) error {
	args := ipt.waitFlags(true)
	if test {
		args = append(args, "--test")
	}
	if opts.NoFlush {
		args = append(args, "--noflush")
	}
	if opts.Counters {
		args = append(args, "--counters")
	}
	c := ipt.cmd(ipt.tool("-restore"), args, data)
	if c.stdin == nil {
		c.stdin = []byte{}
	}
	res := ipt.run.run(ctx, c)
	if ce := commandError(c, res); ce != nil {
		return newRestoreError(ce, data)
	}
	return nil
}

// Save returns iptables-save output for the named tables (one `-t TABLE` run each,
// concatenated in the order given) or for all tables. It implements iptables.Interface.
func (ipt *IPTables) Save(ctx context.Context, tables ...string) ([]byte, error) {
	return ipt.save(ctx, false, tables)
}

// SaveCounters is Save with packet and byte counters (iptables-save -c): chain lines
// carry real counters and each rule line starts with [packets:bytes].
func (ipt *IPTables) SaveCounters(ctx context.Context, tables ...string) ([]byte, error) {
	return ipt.save(ctx, true, tables)
}

func (ipt *IPTables) save(ctx context.Context, counters bool, tables []string) ([]byte, error) {
	var base []string
	if counters {
		base = append(base, "-c")
	}
	if len(tables) == 0 {
		return ipt.saveOne(ctx, base)
	}
	var out bytes.Buffer
	for _, t := range tables {
		if t == "" || strings.HasPrefix(t, "-") {
			return nil, fmt.Errorf("iptables-save: bad table name %q", t)
		}
		b, err := ipt.saveOne(ctx, append(append([]string(nil), base...), "-t", t))
		if err != nil {
			return nil, err
		}
		out.Write(b)
	}
	return out.Bytes(), nil
}

func (ipt *IPTables) saveOne(ctx context.Context, args []string) ([]byte, error) {
	c := ipt.cmd(ipt.tool("-save"), args, nil)
	res := ipt.run.run(ctx, c)
	if ce := commandError(c, res); ce != nil {
		return nil, ce
	}
	return res.stdout, nil
}

// RulePosition says where EnsureRule puts a missing rule.
type RulePosition string

// Rule positions: -I (insert at the top, what kube-proxy uses for its hook jumps) or -A.
const (
	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"
)

// EnsureChain creates a user chain unless it exists (iptables -N). It reports whether
// the chain already existed.
func (ipt *IPTables) EnsureChain(ctx context.Context, table, chain string) (existed bool, err error) {
	args := append(ipt.waitFlags(false), "-t", table, "-N", chain)
	c := ipt.cmd(ipt.tool(""), args, nil)
	res := ipt.run.run(ctx, c)
	if res.err == nil {
		return false, nil
	}
	if res.exitCode == 1 && bytes.Contains(res.stderr, []byte("already exists")) {
		return true, nil
	}
	return false, commandError(c, res)
}

// EnsureRule adds a rule unless an identical one is present, as kube-proxy installs its
// hook jump rules: `iptables -C CHAIN ARGS` and, if that reports the rule missing (exit
// status 1), `iptables -I CHAIN ARGS` (Prepend) or -A (Append). It reports whether the
// rule already existed. args are the rule's match and target words, one word each (a
// comment with spaces is one element, unquoted).
func (ipt *IPTables) EnsureRule(ctx context.Context, pos RulePosition, table, chain string, args ...string) (existed bool, err error) {
	if pos != Prepend && pos != Append {
		return false, fmt.Errorf("iptables: bad rule position %q", pos)
	}
	exists, err := ipt.checkRule(ctx, table, chain, args)
	if err != nil || exists {
		return exists, err
	}
	full := append(ipt.waitFlags(false), "-t", table, string(pos), chain)
	c := ipt.cmd(ipt.tool(""), append(full, args...), nil)
	if ce := commandError(c, ipt.run.run(ctx, c)); ce != nil {
		return false, ce
	}
	return false, nil
}

// DeleteRule deletes a rule if present (-C, then -D). It reports whether it was present.
func (ipt *IPTables) DeleteRule(ctx context.Context, table, chain string, args ...string) (existed bool, err error) {
	exists, err := ipt.checkRule(ctx, table, chain, args)
	if err != nil || !exists {
		return false, err
	}
	full := append(ipt.waitFlags(false), "-t", table, "-D", chain)
	c := ipt.cmd(ipt.tool(""), append(full, args...), nil)
	if ce := commandError(c, ipt.run.run(ctx, c)); ce != nil {
		return true, ce
	}
	return true, nil
}

// checkRule runs iptables -C: exit 0 means present, exit 1 absent (iptables reports a
// missing chain the same way), anything else is an error.
func (ipt *IPTables) checkRule(ctx context.Context, table, chain string, args []string) (bool, error) {
	full := append(ipt.waitFlags(false), "-t", table, "-C", chain)
	c := ipt.cmd(ipt.tool(""), append(full, args...), nil)
	res := ipt.run.run(ctx, c)
	switch {
	case res.err == nil:
		return true, nil
	case res.exitCode == 1:
		return false, nil
	}
	return false, commandError(c, res)
}

// RestoreError is an iptables-restore failure. Line is the input line number the tool
// reported (1-based; 0 if it named none) and Text that line of the input.
type RestoreError struct {
	Line int
	Text string
	Err  *CommandError
}

func (e *RestoreError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("iptables-restore failed at input line %d (%s): %v", e.Line, e.Text, e.Err)
	}
	return fmt.Sprintf("iptables-restore failed: %v", e.Err)
}

func (e *RestoreError) Unwrap() error { return e.Err }

// restoreLineRE matches the line numbers iptables-restore prints: "Error occurred at
// line: 5" (parse and nft commit errors) and "line 5 failed" (legacy commit errors).
var restoreLineRE = regexp.MustCompile(`(?:Error occurred at line: |line )(\d+)`)

func newRestoreError(ce *CommandError, input []byte) *RestoreError {
	e := &RestoreError{Err: ce}
	if m := restoreLineRE.FindStringSubmatch(ce.Stderr); m != nil {
		n, _ := strconv.Atoi(m[1])
		e.Line = n
		lines := strings.Split(string(input), "\n")
		if n >= 1 && n <= len(lines) {
			e.Text = strings.TrimRight(lines[n-1], "\r")
		}
	}
	return e
}

// IPTablesVersion is what `iptables --version` reports.
type IPTablesVersion struct {
	Major, Minor, Patch int
	// Mode is the backend in parentheses: "nf_tables" or "legacy" ("" for old
	// versions that print none).
	Mode string
}

func (v IPTablesVersion) String() string {
	s := fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Mode != "" {
		s += " (" + v.Mode + ")"
	}
	return s
}

// AtLeast reports whether v >= w, comparing numbers only.
func (v IPTablesVersion) AtLeast(w IPTablesVersion) bool {
	if v.Major != w.Major {
		return v.Major > w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor > w.Minor
	}
	return v.Patch >= w.Patch
}

var versionRE = regexp.MustCompile(`^(?:ip6?tables(?:-\w+)*) v(\d+)\.(\d+)(?:\.(\d+))?(?:\s+\(([^)]*)\))?`)

// ParseIPTablesVersion parses `iptables --version` output such as
// "iptables v1.8.9 (nf_tables)" or "ip6tables v1.4.21".
func ParseIPTablesVersion(out string) (IPTablesVersion, error) {
	line := strings.TrimSpace(out)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSpace(line[:i])
	}
	m := versionRE.FindStringSubmatch(line)
	if m == nil {
		return IPTablesVersion{}, fmt.Errorf("cannot parse iptables version from %q", line)
	}
	var v IPTablesVersion
	var err error
	if v.Major, err = strconv.Atoi(m[1]); err != nil {
		return IPTablesVersion{}, fmt.Errorf("iptables version %q: major: %w", line, err)
	}
	if v.Minor, err = strconv.Atoi(m[2]); err != nil {
		return IPTablesVersion{}, fmt.Errorf("iptables version %q: minor: %w", line, err)
	}
	if m[3] != "" {
		if v.Patch, err = strconv.Atoi(m[3]); err != nil {
			return IPTablesVersion{}, fmt.Errorf("iptables version %q: patch: %w", line, err)
		}
	}
	v.Mode = m[4]
	return v, nil
}

// DetectBackend picks the backend in the named namespace (HostNamespace for the caller's
// own; "" is an error) the
// way kube-proxy's iptables wrapper does: a KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY
// chain in the mangle table (IPv4 or IPv6) of one backend wins (nft checked first);
// otherwise the backend with more rules wins, ties going to nft. A backend whose tools
// fail counts as having none.
func DetectBackend(ctx context.Context, netns string) (Backend, error) {
	if err := checkNetns("iptables backend detection", netns); err != nil {
		return "", err
	}
	return detectBackend(ctx, execRunner{}, netns)
}

func detectBackend(ctx context.Context, r runner, netns string) (Backend, error) {
	saveOut := func(b Backend, f Family, args ...string) []byte {
		c := command{argv: inNetnsArgv(netns, append([]string{toolName(f, b, "-save")}, args...))}
		res := r.run(ctx, c)
		if res.err != nil {
			return nil
		}
		return res.stdout
	}
	hint := func(b Backend) bool {
		for _, f := range []Family{IPv4, IPv6} {
			for _, line := range strings.Split(string(saveOut(b, f, "-t", "mangle")), "\n") {
				if strings.HasPrefix(line, ":KUBE-IPTABLES-HINT ") || strings.HasPrefix(line, ":KUBE-KUBELET-CANARY ") {
					return true
				}
			}
		}
		return false
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if hint(BackendNFT) {
		return BackendNFT, nil
	}
	if hint(BackendLegacy) {
		return BackendLegacy, nil
	}
	count := func(b Backend) int {
		n := 0
		for _, f := range []Family{IPv4, IPv6} {
			for _, line := range strings.Split(string(saveOut(b, f)), "\n") {
				if strings.HasPrefix(line, "-") {
					n++
				}
			}
		}
		return n
	}
	legacy, nft := count(BackendLegacy), count(BackendNFT)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if legacy > nft {
		return BackendLegacy, nil
	}
	return BackendNFT, nil
}

// IsRestoreError reports whether err is (or wraps) a *RestoreError.
func IsRestoreError(err error) bool {
	var re *RestoreError
	return errors.As(err, &re)
}
