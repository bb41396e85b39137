package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// ToolReport is what Check found for one tool.
type ToolReport struct {
	Tool    string `json:"tool"`
	Version string `json:"version,omitempty"` // first line of its version output
	Err     string `json:"error,omitempty"`   // why it cannot be used
}

// CheckReport says what this machine offers the adapters and the harness. Reading it
// changes nothing: it runs version probes only.
type CheckReport struct {
	IPTables    []ToolReport `json:"iptables"`              // iptables-{nft,legacy}, ip6tables-{nft,legacy}
	Conntrack   ToolReport   `json:"conntrack"`             // the conntrack tool
	IPSet       ToolReport   `json:"ipset"`                 // the ipset tool (kube-proxy's IPVS mode)
	NFT         ToolReport   `json:"nft"`                   // the nft tool (kube-proxy's nftables mode)
	IPVS        string       `json:"ipvs"`                  // "supported" or why not
	Harness     string       `json:"harness"`               // "supported" or why not
	BrNetfilter bool         `json:"br_netfilter"`          // bridge netfilter sysctls present (this namespace)
	Backend     Backend      `json:"detected_backend"`      // what DetectBackend picks in this namespace
	BackendErr  string       `json:"backend_err,omitempty"` // why detection failed
	// Fields added for kube-proxy's nftables mode (after the ones above, which other
	// tools read and which keep their names and meaning):

	// KernelRelease is the running kernel's release (uname -r), or why it could not be
	// read.
	KernelRelease string `json:"kernel_release"`
	// NFTablesMode is "supported", or why kube-proxy's nftables mode cannot run here:
	// it needs a kernel >= 5.13 (kube-proxy checks at startup, unless
	// KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK is set) and nft >= 1.0.1
	// (knftables refuses older ones).
	NFTablesMode string `json:"nftables_mode"`
}

// Check probes the tools and kernel features the package uses.
func Check(ctx context.Context) CheckReport {
	return check(ctx, execRunner{})
}

func check(ctx context.Context, r runner) CheckReport {
	var rep CheckReport
	probe := func(tool string, args ...string) ToolReport {
		tr := ToolReport{Tool: tool}
		c := command{argv: append([]string{tool}, args...)}
		res := r.run(ctx, c)
		if ce := commandError(c, res); ce != nil {
			tr.Err = ce.Error()
			return tr
		}
		out := strings.TrimSpace(string(res.stdout) + string(res.stderr))
		tr.Version, _, _ = strings.Cut(out, "\n")
		return tr
	}
	for _, f := range []Family{IPv4, IPv6} {
		for _, b := range []Backend{BackendNFT, BackendLegacy} {
			rep.IPTables = append(rep.IPTables, probe(toolName(f, b, ""), "--version"))
		}
	}
	rep.Conntrack = probe("conntrack", "--version")
	rep.IPSet = probe("ipset", "--version")
	rep.NFT = probe("nft", "--version")
	rep.KernelRelease = kernelRelease()
	rep.NFTablesMode = "supported"
	if err := rep.nftablesMode(); err != nil {
		rep.NFTablesMode = err.Error()
	}
	rep.IPVS = "supported"
	if err := CheckIPVS(); err != nil {
		rep.IPVS = err.Error()
	}
	rep.Harness = "supported"
	if err := HarnessSupported(); err != nil {
		rep.Harness = err.Error()
	}
	_, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables")
	rep.BrNetfilter = err == nil
	b, err := detectBackend(ctx, r, "")
	rep.Backend = b
	if err != nil {
		rep.BackendErr = err.Error()
	}
	return rep
}

// String renders the report as text, one finding a line.
func (r CheckReport) String() string {
	var b strings.Builder
	line := func(name, val string) { fmt.Fprintf(&b, "%-20s %s\n", name, val) }
	for _, t := range append(append([]ToolReport(nil), r.IPTables...), r.Conntrack, r.IPSet, r.NFT) {
		if t.Err != "" {
			line(t.Tool, "unavailable: "+t.Err)
		} else {
			line(t.Tool, t.Version)
		}
	}
	line("detected backend", string(r.Backend)+r.BackendErr)
	line("IPVS", r.IPVS)
	line("netns harness", r.Harness)
	line("br_netfilter", fmt.Sprint(r.BrNetfilter))
	line("kernel", r.KernelRelease)
	line("nftables mode", r.NFTablesMode)
	return b.String()
}

// Features are the names Feature knows: what a proxy mode may need of a kernel
// (kubeproxy.ModeInfo.KernelNeeds).
//
// "nft" is the nft tool at a version knftables accepts (>= 1.0.1); "nftables" is all of
// what kube-proxy's nftables mode checks before it starts: that nft and a kernel >= 5.13.
var Features = []string{"iptables", "ip6tables", "conntrack", "ipset", "ipvs", "nft", "nftables"}

// Feature says whether this machine offers a feature a proxy mode needs: nil when it
// does, else why not.
func (r CheckReport) Feature(name string) error {
	tools := func(prefix string) error {
		var why []string
		for _, t := range r.IPTables {
			if !strings.HasPrefix(t.Tool, prefix+"-") {
				continue
			}
			if t.Err == "" {
				return nil
			}
			why = append(why, t.Tool+": "+t.Err)
		}
		return fmt.Errorf("%s", strings.Join(why, "; "))
	}
	tool := func(t ToolReport) error {
		if t.Err != "" {
			return fmt.Errorf("%s: %s", t.Tool, t.Err)
		}
		return nil
	}
	switch name {
	case "iptables":
		return tools("iptables")
	case "ip6tables":
		return tools("ip6tables")
	case "conntrack":
		return tool(r.Conntrack)
	case "ipset":
		return tool(r.IPSet)
	case "nft":
		return r.nftUsable()
	case "nftables":
		return r.nftablesMode()
	case "ipvs":
		if r.IPVS != "supported" {
			return fmt.Errorf("%s", r.IPVS)
		}
		return nil
	}
	return fmt.Errorf("unknown feature %q (know %s)", name, strings.Join(Features, ", "))
}

// MinNFTablesKernel is the oldest kernel kube-proxy's nftables mode runs on: kube-proxy
// refuses older ones at startup (since 1.31; in 1.31-1.32 a bug made the check run only
// when the skip variable was set).
var MinNFTablesKernel = KernelVersion{Major: 5, Minor: 13}

// skipKernelCheckEnv is the variable with which kube-proxy skips its kernel version
// check (1.33 onwards; 1.31-1.32 had the check inverted by a bug).
const skipKernelCheckEnv = "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK"

// osReleasePath is where the kernel release is read, as kube-proxy reads it.
var osReleasePath = "/proc/sys/kernel/osrelease"

// kernelRelease returns the kernel release, or "unknown: WHY".
func kernelRelease() string {
	b, err := os.ReadFile(osReleasePath)
	if err != nil {
		return "unknown: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

// nftUsable says whether the nft tool runs and is one knftables accepts.
func (r CheckReport) nftUsable() error {
	if r.NFT.Err != "" {
		return fmt.Errorf("%s: %s", r.NFT.Tool, r.NFT.Err)
	}
	v, err := ParseNFTVersion(r.NFT.Version)
	if err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	if !v.AtLeast(MinNFTVersion) {
		return fmt.Errorf("nft %v is too old: kube-proxy's nftables mode (knftables) needs %v or later", v, MinNFTVersion)
	}
	return nil
}

// nftablesMode says whether kube-proxy's nftables mode can run here: a usable nft and a
// kernel of at least MinNFTablesKernel (unless kube-proxy's skip variable is set).
func (r CheckReport) nftablesMode() error {
	var why []string
	if err := r.nftUsable(); err != nil {
		why = append(why, err.Error())
	}
	if os.Getenv(skipKernelCheckEnv) == "" {
		kv, err := ParseKernelVersion(r.KernelRelease)
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("kernel: %v", err))
		case !kv.AtLeast(MinNFTablesKernel):
			why = append(why, fmt.Sprintf("kernel %s is too old: kube-proxy's nftables mode needs %v or later (%s skips kube-proxy's check)", r.KernelRelease, MinNFTablesKernel, skipKernelCheckEnv))
		}
	}
	if len(why) > 0 {
		return errors.New(strings.Join(why, "; "))
	}
	return nil
}

// KernelVersion is a kernel release's leading numbers.
type KernelVersion struct {
	Major, Minor, Patch int
}

func (v KernelVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v >= w.
func (v KernelVersion) AtLeast(w KernelVersion) bool {
	if v.Major != w.Major {
		return v.Major > w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor > w.Minor
	}
	return v.Patch >= w.Patch
}

var kernelReleaseRE = regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?`)

// ParseKernelVersion parses a kernel release such as "6.1.0-18-amd64",
// "5.13.0-52-generic" or "6.18.44-fc-v782" (what uname -r prints) by its leading
// numbers, as kube-proxy does.
func ParseKernelVersion(release string) (KernelVersion, error) {
	release = strings.TrimSpace(release)
	m := kernelReleaseRE.FindStringSubmatch(release)
	if m == nil {
		return KernelVersion{}, fmt.Errorf("cannot parse kernel release %q", release)
	}
	var nums [3]int
	for i, s := range m[1:4] {
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return KernelVersion{}, fmt.Errorf("kernel release %q: %w", release, err)
		}
		nums[i] = n
	}
	return KernelVersion{Major: nums[0], Minor: nums[1], Patch: nums[2]}, nil
}
