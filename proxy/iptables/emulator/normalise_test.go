package emulator

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var updateKernel = flag.Bool("update-kernel", false,
	"regenerate testdata/iptables/normalise/*.saved from the running kernel (needs root, iptables, ip netns)")

const normDir = "../../../testdata/iptables/normalise"

func fixtureFamily(path string) Family {
	if strings.HasSuffix(path, "-v6.rules") {
		return IPv6
	}
	return IPv4
}

// lineDiff reports the first differing lines of two texts.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	n := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d:\n  want %q\n  got  %q\n", i+1, a, c)
			if n++; n > 8 {
				break
			}
		}
	}
	return b.String()
}

// TestNormalisation holds the emulator to what iptables v1.8.9 (nf_tables) printed for
// the same restore input: each normalise/NAME.rules applied to an empty emulator must
// save exactly as NAME.saved (captured from the kernel, see TestNormalisationKernel),
// and NAME.saved must load and save back unchanged.
func TestNormalisation(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(normDir, "*.rules"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", normDir, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(f, ".rules") + ".saved")
			if err != nil {
				t.Skipf("no kernel output captured yet (run with -update-kernel as root): %v", err)
			}
			fam := fixtureFamily(f)
			e := New(fam)
			if err := e.RestoreText(in, RestoreOptions{File: filepath.Base(f)}); err != nil {
				t.Fatalf("restore: %v", err)
			}
			got := e.Ruleset().Save(false)
			if !bytes.Equal(got, want) {
				t.Errorf("emulator's save of %s differs from the kernel's:\n%s", filepath.Base(f), lineDiff(string(want), string(got)))
			}
			rs, err := ParseDump(want, fam, "kernel")
			if err != nil {
				t.Fatalf("kernel output does not load: %v", err)
			}
			if again := rs.Save(false); !bytes.Equal(again, want) {
				t.Errorf("kernel output does not round-trip:\n%s", lineDiff(string(want), string(again)))
			}
		})
	}
}

// TestNormalisationKernel applies each fixture with the real iptables-restore in a
// network namespace of its own and compares iptables-save's output with the captured
// .saved file (or rewrites it with -update-kernel). It runs as root with the iptables
// version the fixtures were captured with (normalise/VERSION); other versions print
// some options differently, so it skips there.
func TestNormalisationKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	for _, tool := range []string{"ip", "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	out, err := exec.Command("iptables", "--version").CombinedOutput()
	if err != nil {
		t.Skipf("iptables --version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	wantVersion, _ := os.ReadFile(filepath.Join(normDir, "VERSION"))
	if !*updateKernel && version != strings.TrimSpace(string(wantVersion)) {
		t.Skipf("fixtures were captured with %q, this host has %q", strings.TrimSpace(string(wantVersion)), version)
	}
	files, _ := filepath.Glob(filepath.Join(normDir, "*.rules"))
	for i, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			ns := fmt.Sprintf("clemu%d-%d", os.Getpid(), i)
			if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
				t.Skipf("ip netns add: %v: %s", err, out)
			}
			defer exec.Command("ip", "netns", "del", ns).Run()
			run := func(stdin []byte, args ...string) ([]byte, error) {
				cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
				cmd.Stdin = bytes.NewReader(stdin)
				var o, e bytes.Buffer
				cmd.Stdout, cmd.Stderr = &o, &e
				if err := cmd.Run(); err != nil {
					return nil, fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, e.String())
				}
				return o.Bytes(), nil
			}
			if sets, err := os.ReadFile(strings.TrimSuffix(f, ".rules") + ".ipset"); err == nil {
				if _, err := exec.LookPath("ipset"); err != nil {
					t.Skip("fixture needs ipsets and ipset is not installed")
				}
				if _, err := run(sets, "ipset", "restore"); err != nil {
					t.Skipf("ipset restore: %v", err)
				}
				defer run([]byte{}, "ipset", "destroy")
			}
			restore, save := "iptables-restore", "iptables-save"
			if fixtureFamily(f) == IPv6 {
				restore, save = "ip6tables-restore", "ip6tables-save"
			}
			in, _ := os.ReadFile(f)
			if _, err := run(in, restore); err != nil {
				t.Fatal(err)
			}
			raw, err := run(nil, save)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			for _, l := range strings.SplitAfter(string(raw), "\n") {
				if !strings.HasPrefix(l, "#") {
					got.WriteString(l)
				}
			}
			dst := strings.TrimSuffix(f, ".rules") + ".saved"
			if *updateKernel {
				if err := os.WriteFile(dst, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, _ := os.ReadFile(dst)
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("kernel output changed:\n%s", lineDiff(string(want), got.String()))
			}
		})
	}
	if *updateKernel {
		os.WriteFile(filepath.Join(normDir, "VERSION"), []byte(version+"\n"), 0o644)
	}
}
