package main

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/spf13/cobra"
	gvlog "gvisor.dev/gvisor/pkg/log"
)

// TestExitCodes: scripts can rely on 2 for anything the caller typed wrong, for every
// subcommand and command group, and on 0 for help.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"nosuch"}, 2, `unknown command "nosuch" for "clusterlab"`},
		{[]string{"demoo"}, 2, `did you mean "demo"?`},
		{[]string{"demo", "extra"}, 2, `unknown command "extra" for "clusterlab demo"`},
		{[]string{"dns", "bogus"}, 2, `unknown command "bogus" for "clusterlab dns"`},
		{[]string{"dns", "serve", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"run", "a.yaml", "b.yaml"}, 2, "run needs one scenario file"},
		{[]string{"demo", "-o", "xml"}, 2, `-o "xml"`},
		{[]string{"dns"}, 0, ""},
		{[]string{}, 0, ""},
		{[]string{"dns", "serve", "--help"}, 0, ""},
	} {
		_, _, err := runCmd(t, tc.args...)
		if got := exitCode(err); got != tc.code || (tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg))) {
			t.Errorf("clusterlab %s: exit %d (%v), want %d with %q", strings.Join(tc.args, " "), got, err, tc.code, tc.msg)
		}
	}
	if exitCode(errors.New("scenario failed")) != 1 {
		t.Error("a plain error must exit 1")
	}
}

// TestEveryCommandHasExamples: each subcommand's --help shows how it is used.
func TestEveryCommandHasExamples(t *testing.T) {
	mine := map[string]bool{"clusterlab": true, "clusterlab demo": true, "clusterlab run": true, "clusterlab trace": true,
		"clusterlab dns": true, "clusterlab dns serve": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if mine[c.CommandPath()] && c.Example == "" {
			t.Errorf("%s: no examples in its help", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
}

// TestNetstackLog: gVisor's own log (netstack's warnings) is routed through clusterlab
// and shown only with --netstack-log.
func TestNetstackLog(t *testing.T) {
	defer netstackLog.Store(false)
	if _, _, err := runCmd(t, "demo", "--scenario"); err != nil {
		t.Fatal(err)
	}
	if _, ok := gvlog.Log().Emitter.(gvisorLog); !ok {
		t.Fatalf("gVisor logs to %T, not through clusterlab", gvlog.Log().Emitter)
	}
	var b bytes.Buffer
	l := newGvisorLog(&b)
	l.Emit(0, gvlog.Warning, time.Now(), "handleListenSegment() failed: %v", "connection aborted")
	if netstackLog.Load() || b.Len() != 0 {
		t.Fatalf("without --netstack-log gVisor's warning was shown: %q", b.String())
	}
	if _, _, err := runCmd(t, "--netstack-log", "demo", "--scenario"); err != nil {
		t.Fatal(err)
	}
	l.Emit(0, gvlog.Warning, time.Now(), "handleListenSegment() failed: %v", "connection aborted")
	if !strings.Contains(b.String(), "handleListenSegment() failed: connection aborted") {
		t.Fatalf("with --netstack-log gVisor's warning was not shown: %q", b.String())
	}
}

// kernel check reports, for every registered mode, what of its kernel needs this
// machine lacks; every need is a feature the report knows.
func TestKernelModeSupport(t *testing.T) {
	rep := kernel.CheckReport{
		IPTables:  []kernel.ToolReport{{Tool: "iptables-nft", Version: "iptables v1.8.9 (nf_tables)"}, {Tool: "ip6tables-nft", Err: "not found"}},
		Conntrack: kernel.ToolReport{Tool: "conntrack", Version: "conntrack v1.4.7"},
		IPSet:     kernel.ToolReport{Tool: "ipset", Version: "ipset v7.17"},
		NFT:       kernel.ToolReport{Tool: "nft", Err: "not found"},
		IPVS:      "IPVS not supported by this kernel",
	}
	got := map[string][]string{}
	for _, m := range modeSupport(rep) {
		got[m.Mode] = m.Missing
		for _, need := range m.Needs {
			if !slices.Contains(kernel.Features, need) {
				t.Errorf("mode %s needs %q, which kernel check does not know", m.Mode, need)
			}
		}
	}
	if len(got) != len(kubeproxy.Registered()) {
		t.Errorf("modes %v", got)
	}
	if len(got["iptables"]) != 0 || len(got["ipvs"]) != 1 || !strings.HasPrefix(got["ipvs"][0], "ipvs: IPVS not supported") {
		t.Errorf("missing: %v", got)
	}
}

// --mode and --modes complete from the registered modes; a list completes its last item
// with the modes it does not name yet.
func TestModeCompletion(t *testing.T) {
	names := func(out []string) []string {
		var n []string
		for _, s := range out {
			name, _, _ := strings.Cut(s, "\t")
			n = append(n, name)
		}
		return n
	}
	out, d := completeModes(false)(nil, nil, "")
	if got := names(out); !slices.Equal(got, kubeproxy.ModeNames()) || d != cobra.ShellCompDirectiveNoFileComp {
		t.Errorf("--mode: %v %v", got, d)
	}
	out, d = completeModes(true)(nil, nil, "iptables,")
	if got := names(out); slices.Contains(got, "iptables,iptables") || !slices.Contains(got, "iptables,ipvs") || d&cobra.ShellCompDirectiveNoSpace == 0 {
		t.Errorf("--modes iptables,: %v %v", got, d)
	}
}
