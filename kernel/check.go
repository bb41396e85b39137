package kernel

import (
	"context"
	"fmt"
	"os"
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
	return b.String()
}

// Features are the names Feature knows: what a proxy mode may need of a kernel
// (kubeproxy.ModeInfo.KernelNeeds).
var Features = []string{"iptables", "ip6tables", "conntrack", "ipset", "ipvs", "nft"}

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
		return tool(r.NFT)
	case "ipvs":
		if r.IPVS != "supported" {
			return fmt.Errorf("%s", r.IPVS)
		}
		return nil
	}
	return fmt.Errorf("unknown feature %q (know %s)", name, strings.Join(Features, ", "))
}
