package kernel

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// NFTablesOptions configure an NFTables.
type NFTablesOptions struct {
	// Family is the nftables family of the adapter's table: knftables.IPv4Family ("ip",
	// the default), knftables.IPv6Family ("ip6") or knftables.InetFamily ("inet").
	// Objects in a transaction that name no family get it.
	Family knftables.Family
	// Table is the adapter's table, which objects that name no table go into; default
	// "kube-proxy".
	Table string
	// Netns is the named network namespace (/run/netns/NAME) every nft command runs in,
	// as `ip netns exec NAME nft ...`; HostNamespace for the caller's own, i.e. the
	// host's own ruleset. Required: an empty Netns is an error (ErrNoNamespace), so
	// that a forgotten Netns can never reprogram the machine.
	Netns string
	// AllowHost with an empty Netns is the same as Netns: HostNamespace.
	//
	// Deprecated: set Netns to HostNamespace, as every other adapter takes it.
	AllowHost bool
}

// MinNFTVersion is the oldest nft that knftables (and so kube-proxy's nftables mode)
// accepts: it refuses v0.x and v1.0.0.
var MinNFTVersion = NFTVersion{Major: 1, Minor: 0, Patch: 1}

// DefaultNFTablesTable is kube-proxy's table name, the default NFTablesOptions.Table.
const DefaultNFTablesTable = "kube-proxy"

// NFTables programs a kernel's nftables through the nft tool, in a named network
// namespace. It satisfies the interface kube-proxy's nftables proxier writes through
// (NewTransaction, Run, as knftables.Interface has them), so the same generator that
// writes into knftables' Fake programs a real kernel; ApplyScript, ListRuleset,
// ListTable and DeleteTable are for tests and tools.
//
// knftables.New cannot be used for this: its exec seam (execer) is unexported, so it
// always runs the `nft` it finds in $PATH in the caller's own namespace, and its
// constructor already runs `nft --check` there. NFTables therefore builds transactions
// with knftables (a Fake serves only as their factory, giving them Family and Table)
// and runs them itself: the transaction's text, exactly what knftables would feed nft,
// goes to `ip netns exec NAME nft -f -` through the package's runner, like every other
// command of this package, so the command line is one a person can paste.
//
// Errors are *NFTError values wrapping a *CommandError with nft's standard error
// (errors.As finds either); nft applies a whole input or nothing. Safe for concurrent
// use.
type NFTables struct {
	opts    NFTablesOptions
	version NFTVersion
	factory *knftables.Fake // makes transactions; never Run
	run     runner
}

// NewNFTables checks opts, probes `nft --version` inside the namespace (which fails when
// nft is missing, too old, or the namespace does not exist) and returns the adapter.
func NewNFTables(ctx context.Context, opts NFTablesOptions) (*NFTables, error) {
	return newNFTables(ctx, opts, execRunner{})
}

func newNFTables(ctx context.Context, opts NFTablesOptions, r runner) (*NFTables, error) {
	if opts.Family == "" {
		opts.Family = knftables.IPv4Family
	}
	if opts.Table == "" {
		opts.Table = DefaultNFTablesTable
	}
	if err := checkNFTFamily(opts.Family); err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	if !nftNameRE.MatchString(opts.Table) {
		return nil, fmt.Errorf("nftables: bad table name %q (want letters, digits, _ . / -, starting with a letter)", opts.Table)
	}
	if opts.Netns == "" && opts.AllowHost {
		opts.Netns = HostNamespace
	}
	n := &NFTables{opts: opts, run: r, factory: knftables.NewFake(opts.Family, opts.Table)}
	if err := n.guard(); err != nil {
		return nil, err
	}
	c := n.cmd([]string{"--version"}, nil)
	res := r.run(ctx, c)
	if err := commandError(c, res); err != nil {
		return nil, fmt.Errorf("nftables: version probe: %w", err)
	}
	v, err := ParseNFTVersion(string(res.stdout))
	if err != nil {
		return nil, fmt.Errorf("nftables: version probe: %w", err)
	}
	if !v.AtLeast(MinNFTVersion) {
		return nil, fmt.Errorf("nftables: nft %v is too old: knftables needs %v or later", v, MinNFTVersion)
	}
	n.version = v
	return n, nil
}

// nftFamilies are the families nft knows.
var nftFamilies = []knftables.Family{knftables.IPv4Family, knftables.IPv6Family, knftables.InetFamily,
	knftables.ARPFamily, knftables.BridgeFamily, knftables.NetDevFamily}

func checkNFTFamily(f knftables.Family) error {
	for _, k := range nftFamilies {
		if f == k {
			return nil
		}
	}
	return fmt.Errorf("unknown nftables family %q (want ip, ip6, inet, arp, bridge or netdev)", f)
}

// nftNameRE is what nft accepts as an unquoted identifier (table, chain and set names;
// kube-proxy's use slashes and dots). Names go on nft's command line, which nft parses
// as a command, so anything else (a ';' would start a second command) is refused.
var nftNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_./-]*$`)

// Family returns the family of the adapter's table.
func (n *NFTables) Family() knftables.Family { return n.opts.Family }

// Table returns the adapter's table name.
func (n *NFTables) Table() string { return n.opts.Table }

// Netns returns the named network namespace the adapter runs in (HostNamespace for the
// caller's own).
func (n *NFTables) Netns() string { return n.opts.Netns }

// Version returns the version nft reported.
func (n *NFTables) Version() NFTVersion { return n.version }

// guard refuses to run without a namespace (HostNamespace for the caller's own), also
// for an NFTables not made by NewNFTables.
func (n *NFTables) guard() error {
	return checkNetns("nftables", n.opts.Netns)
}

func (n *NFTables) cmd(args []string, stdin []byte) command {
	return command{argv: inNetnsArgv(n.opts.Netns, append([]string{"nft"}, args...)), stdin: stdin}
}

// NewTransaction returns an empty knftables transaction whose objects default to the
// adapter's family and table.
func (n *NFTables) NewTransaction() *knftables.Transaction {
	return n.factory.NewTransaction()
}

// Run applies tx atomically with `nft -f -`. tx may come from any knftables
// NewTransaction (this adapter's, or a Fake's in a test): objects that name no family
// or table get those of the interface that made tx. A transaction that knftables
// already found invalid while it was built (e.g. a Rule without a chain) is refused
// before nft runs, with knftables' message; an empty transaction runs nothing.
func (n *NFTables) Run(ctx context.Context, tx *knftables.Transaction) error {
	script, err := transactionScript(tx)
	if err != nil || script == "" {
		return err
	}
	return n.apply(ctx, []string{"-f", "-"}, script)
}

// Check dry-runs tx (`nft --check -f -`): nft parses it and the kernel validates it
// against the namespace's ruleset, and nothing changes.
func (n *NFTables) Check(ctx context.Context, tx *knftables.Transaction) error {
	script, err := transactionScript(tx)
	if err != nil || script == "" {
		return err
	}
	return n.apply(ctx, []string{"--check", "-f", "-"}, script)
}

// transactionScript returns the text knftables would feed nft for tx. knftables keeps
// a transaction's build error private; its String method appends it as a last line
// "# ERROR: ..." after the operations, each of which ends in a newline, so text that
// does not end in a newline carries one.
func transactionScript(tx *knftables.Transaction) (string, error) {
	if tx == nil {
		return "", errors.New("nftables: nil transaction")
	}
	s := tx.String()
	if s == "" || strings.HasSuffix(s, "\n") {
		return s, nil
	}
	i := strings.LastIndex(s, "# ERROR: ")
	if i < 0 || (i > 0 && s[i-1] != '\n') {
		return "", fmt.Errorf("nftables: transaction text does not end in a newline: %q", s)
	}
	return "", fmt.Errorf("nftables: invalid transaction: %s", s[i+len("# ERROR: "):])
}

// CheckScript dry-runs script (`nft --check -f -`): nft parses it and the kernel
// validates it against the namespace's ruleset, and nothing changes. A refusal is an
// *NFTError naming the first input line nft complained about.
func (n *NFTables) CheckScript(ctx context.Context, script string) error {
	return n.apply(ctx, []string{"--check", "-f", "-"}, script)
}

// ApplyScript feeds script to `nft -f -`: any nft input (add/flush/delete lines or
// `table { ... }` blocks, `#` comments), applied atomically. A failure is an *NFTError
// naming the first input line nft complained about.
func (n *NFTables) ApplyScript(ctx context.Context, script string) error {
	return n.apply(ctx, []string{"-f", "-"}, script)
}

func (n *NFTables) apply(ctx context.Context, args []string, script string) error {
	if err := n.guard(); err != nil {
		return err
	}
	c := n.cmd(args, []byte(script))
	if ce := commandError(c, n.run.run(ctx, c)); ce != nil {
		return newNFTError(ce, script)
	}
	return nil
}

// NFTListOptions choose the form of a listing.
type NFTListOptions struct {
	// Handles adds `# handle N` after tables, chains, sets and rules (nft -a).
	Handles bool
	// JSON lists as libnftables JSON (nft -j) instead of text.
	JSON bool
}

func (o NFTListOptions) flags() []string {
	var f []string
	if o.Handles {
		f = append(f, "-a")
	}
	if o.JSON {
		f = append(f, "-j")
	}
	return f
}

// ListRuleset returns `nft list ruleset`: every table of the namespace.
func (n *NFTables) ListRuleset(ctx context.Context, opts NFTListOptions) ([]byte, error) {
	return n.list(ctx, append(opts.flags(), "list", "ruleset"))
}

// ListTable returns `nft list table FAMILY TABLE` for the adapter's own table; a missing
// table is an error for which IsNFTNotFound is true.
func (n *NFTables) ListTable(ctx context.Context, opts NFTListOptions) ([]byte, error) {
	return n.list(ctx, append(opts.flags(), "list", "table", string(n.opts.Family), n.opts.Table))
}

func (n *NFTables) list(ctx context.Context, args []string) ([]byte, error) {
	if err := n.guard(); err != nil {
		return nil, err
	}
	c := n.cmd(args, nil)
	res := n.run.run(ctx, c)
	if ce := commandError(c, res); ce != nil {
		return nil, newNFTError(ce, "")
	}
	return res.stdout, nil
}

// DeleteTable deletes one table and everything in it (`nft delete table FAMILY NAME`),
// as kube-proxy's cleanup deletes its own tables; other tables stay. A missing table is
// an error for which IsNFTNotFound is true.
func (n *NFTables) DeleteTable(ctx context.Context, family knftables.Family, name string) error {
	if err := checkNFTFamily(family); err != nil {
		return fmt.Errorf("nftables: delete table: %w", err)
	}
	if !nftNameRE.MatchString(name) {
		return fmt.Errorf("nftables: delete table: bad table name %q", name)
	}
	if err := n.guard(); err != nil {
		return err
	}
	c := n.cmd([]string{"delete", "table", string(family), name}, nil)
	if ce := commandError(c, n.run.run(ctx, c)); ce != nil {
		return newNFTError(ce, "")
	}
	return nil
}

// NFTError is a failed nft command. For input fed on stdin, Line is the first input
// line nft named in an error (1-based; 0 if it named none) and Text that line of the
// input; nft reports every failing command, all in Err.Stderr.
type NFTError struct {
	Line int
	Text string
	Err  *CommandError
}

func (e *NFTError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("nft failed at input line %d (%s): %v", e.Line, e.Text, e.Err)
	}
	return fmt.Sprintf("nft failed: %v", e.Err)
}

func (e *NFTError) Unwrap() error { return e.Err }

// nftLineRE matches nft's error locations: "/dev/stdin:3:22-27: Error: ..." (the file
// name is "/dev/stdin" for `-f -` on nft 1.0.x; others print "-" or a path).
var nftLineRE = regexp.MustCompile(`(?m)^[^\n:]*:(\d+):\d+(?:-\d+)?: Error: `)

func newNFTError(ce *CommandError, input string) *NFTError {
	e := &NFTError{Err: ce}
	if input == "" {
		return e
	}
	if m := nftLineRE.FindStringSubmatch(ce.Stderr); m != nil {
		n, _ := strconv.Atoi(m[1])
		lines := strings.Split(input, "\n")
		if n >= 1 && n <= len(lines) {
			e.Line = n
			e.Text = strings.TrimRight(lines[n-1], "\r")
		}
	}
	return e
}

// IsNFTNotFound reports whether err is an nft failure whose first error says "No such
// file or directory" (a missing table, chain, set or jump target), as
// knftables.IsNotFound decides for its own errors.
func IsNFTNotFound(err error) bool { return nftFirstError(err, "No such file or directory") }

// IsNFTExists reports whether err is an nft failure whose first error says "File
// exists" (`create` of an existing object), as knftables.IsAlreadyExists decides.
func IsNFTExists(err error) bool { return nftFirstError(err, "File exists") }

func nftFirstError(err error, msg string) bool {
	var ce *CommandError
	if !errors.As(err, &ce) {
		return false
	}
	first, _, _ := strings.Cut(ce.Stderr, "\n")
	return strings.Contains(first, msg)
}

// NFTVersion is what `nft --version` reports.
type NFTVersion struct {
	Major, Minor, Patch int
}

func (v NFTVersion) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v >= w.
func (v NFTVersion) AtLeast(w NFTVersion) bool {
	if v.Major != w.Major {
		return v.Major > w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor > w.Minor
	}
	return v.Patch >= w.Patch
}

var nftVersionRE = regexp.MustCompile(`^nftables v(\d+)\.(\d+)(?:\.(\d+))?(?:\s|$)`)

// ParseNFTVersion parses `nft --version` output such as "nftables v1.0.6 (Lester
// Gooch #5)".
func ParseNFTVersion(out string) (NFTVersion, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	line = strings.TrimSpace(line)
	m := nftVersionRE.FindStringSubmatch(line)
	if m == nil {
		return NFTVersion{}, fmt.Errorf("cannot parse nft version from %q", line)
	}
	var nums [3]int
	for i, s := range m[1:4] {
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return NFTVersion{}, fmt.Errorf("nft version %q: %w", line, err)
		}
		nums[i] = n
	}
	return NFTVersion{Major: nums[0], Minor: nums[1], Patch: nums[2]}, nil
}
