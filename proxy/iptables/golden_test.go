package iptables

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/generator")

const caseDir = "../../testdata/generator"

// TestGolden renders every case under testdata/generator and compares the restore text
// byte for byte with <case>.golden; where the case names kube-proxy's own expected
// output (upstream/<name>.txt) it also compares with that after kube-proxy's test sort;
// it checks the text's jumps are consistent; it runs the case's packet flows through a
// Proxier writing to the fake; and it checks that a Proxier's first sync writes the
// same text Render returns.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(caseDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in %s: %v", caseDir, err)
	}
	for _, path := range files {
		tc := loadCase(t, path)
		t.Run(tc.name, func(t *testing.T) {
			got, err := Render(tc.services, tc.slices, tc.cfg, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(path, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("restore text differs from %s (-want +got):\n%s", golden, cmp.Diff(string(want), string(got)))
			}
			if err := checkRuleJumps(string(got)); err != nil {
				t.Errorf("inconsistent rules: %v", err)
			}
			if tc.file.Upstream != "" {
				up, err := os.ReadFile(filepath.Join(caseDir, "upstream", tc.file.Upstream+".txt"))
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(sortRestore(t, string(up)), sortRestore(t, asUpstream(string(got)))); diff != "" {
					t.Errorf("differs from kube-proxy's expected output %s (-kube-proxy +ours):\n%s", tc.file.Upstream, diff)
				}
			}

			// The same inputs through a Proxier: first sync = Render, then flows.
			ipt := newFakeIPT()
			p, err := NewProxier(ipt, nil, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(context.Background(), tc.services, tc.slices)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.opts.IncludeJumps && !bytes.Equal(res.Data, got) {
				t.Errorf("Proxier's first sync differs from Render:\n%s", cmp.Diff(string(got), string(res.Data)))
			}
			var flows []flow
			for _, f := range tc.file.Flows {
				flows = append(flows, flow{f.Name, f.Src, f.Protocol, f.Dst, f.Port, f.Output, f.Masq})
			}
			runFlows(t, ipt, testNodeIPs, flows)

			// With jumps included, the text alone must set up a fresh node the same
			// way the Proxier does.
			if tc.opts.IncludeJumps {
				fresh := newFakeIPT()
				if err := fresh.Restore(context.Background(), got, RestoreOptions{}); err != nil {
					t.Fatalf("restoring the fresh-node text: %v", err)
				}
				for _, table := range []string{TableFilter, TableNAT} {
					a, _ := fresh.Save(context.Background(), table)
					b, _ := ipt.Save(context.Background(), table)
					if diff := cmp.Diff(string(b), string(a)); diff != "" {
						t.Errorf("%s table from the fresh-node text differs from the Proxier's (-proxier +text):\n%s", table, diff)
					}
				}
			}
		})
	}
}
