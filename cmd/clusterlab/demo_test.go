package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/clusterlab/clusterlab/scenario"
)

func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	setupRoot()
	var out, errb bytes.Buffer
	// Flags keep their values between Execute calls: reset them, in every command.
	var reset func(c *cobra.Command)
	reset = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				sv.Replace(nil)
			} else {
				f.Value.Set(f.DefValue)
			}
			f.Changed = false
		})
		for _, sub := range c.Commands() {
			reset(sub)
		}
	}
	for _, c := range rootCmd.Commands() {
		reset(c)
	}
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	rootCmd.SetArgs(args)
	err := rootCmd.Execute()
	return out.String(), errb.String(), err
}

// TestDemoText: the demo's sections and facts (not its exact bytes: counts depend on the
// modes' random choices).
func TestDemoText(t *testing.T) {
	out, _, err := runCmd(t, "demo")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"1. The cluster", "2. Requests to the VIP and to the DNS name", "3. One packet, rule by rule (iptables mode)",
		"4. A backend deleted: traffic moves on", "5. A NodePort from outside",
		"service my-service  ClusterIP", "port 80/TCP -> 9376",
		"nat/KUBE-SERVICES:", "DNAT --to-destination", "end: DELIVERED",
		"(serving, terminating)", "172.18.0.3:30007",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^   backend my-app-\S+`).FindAllString(out, -1)); n != 3 {
		t.Errorf("want 3 backends listed, got %d", n)
	}
	for _, m := range scenario.DemoModes() {
		if !regexp.MustCompile(`(?m)^   ` + m + ` +VIP: `).MatchString(out) {
			t.Errorf("no VIP line for mode %s", m)
		}
	}
	if strings.Contains(out, "did not go as the demonstration expects") {
		t.Errorf("the demo reports failures:\n%s", out)
	}
}

// TestDemoJSON: -o json carries the facts; each mode's VIP traffic reaches the three
// backends, and the deleted pod gets none of the connections after its deletion.
func TestDemoJSON(t *testing.T) {
	out, _, err := runCmd(t, "demo", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Modes   []string
		Traffic []struct {
			Mode       string
			VIP        map[string]int `json:"vip"`
			SeenSource string         `json:"seen_source"`
		}
		Delete struct {
			Deleted string
			After   map[string]map[string]int
		}
		NodePort struct {
			Backends      map[string]string         `json:"backends"`
			BackendCounts map[string]map[string]int `json:"backend_counts"`
		} `json:"nodeport"`
		Passed bool
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !d.Passed || len(d.Modes) == 0 || len(d.Traffic) != len(d.Modes) {
		t.Fatalf("demo JSON: %+v", d)
	}
	for _, tr := range d.Traffic {
		total := 0
		for _, n := range tr.VIP {
			total += n
		}
		if len(tr.VIP) != 3 || total != 90 {
			t.Errorf("%s: VIP traffic %v", tr.Mode, tr.VIP)
		}
		wantClient := tr.Mode != "userspace"
		if got := strings.Contains(tr.SeenSource, "client's own address"); got != wantClient {
			t.Errorf("%s: backends saw %q", tr.Mode, tr.SeenSource)
		}
	}
	// The NodePort's backends per mode: numbers by pod (backend_counts), and the older
	// text form (backends) still there with the same counts.
	for _, m := range d.Modes {
		counts, text := d.NodePort.BackendCounts[m], d.NodePort.Backends[m]
		total := 0
		for b, n := range counts {
			total += n
			if !strings.HasPrefix(b, "default/my-app-") || b == d.Delete.Deleted {
				t.Errorf("%s: nodeport backend %q", m, b)
			}
			if short := b[strings.LastIndex(b, "-")+1:]; !strings.Contains(text, fmt.Sprintf("%s %d", short, n)) {
				t.Errorf("%s: nodeport backends text %q lacks %s %d", m, text, short, n)
			}
		}
		if total != 30 || len(counts) == 0 {
			t.Errorf("%s: nodeport backend_counts %v, want 30 connections", m, counts)
		}
	}
	for m, after := range d.Delete.After {
		if after[d.Delete.Deleted] != 0 {
			t.Errorf("%s: deleted pod %s still got connections: %v", m, d.Delete.Deleted, after)
		}
	}
}

func TestDemoScenarioFlag(t *testing.T) {
	out, _, err := runCmd(t, "demo", "--scenario")
	if err != nil || !strings.Contains(out, "name: my-service") {
		t.Fatalf("--scenario: %v\n%s", err, out)
	}
}
