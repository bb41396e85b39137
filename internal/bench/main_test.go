package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkModes/kind=connect/mode=iptables/services=10-2   200  359446 ns/op  364915 cpu-ns/conn  924816 kern-ns/op  154111 lo-ns/op  14.27 load-end  14.27 load-start  352308 ns/conn  2.625 x-kernel  1.895 x-kernel-cpu  0.4374 x-loopback  0.4386 x-loopback-cpu
BenchmarkModes/kind=connect/mode=iptables/services=10-2   200  359446 ns/op  364915 cpu-ns/conn  924816 kern-ns/op  154111 lo-ns/op  14.27 load-end  14.27 load-start  352308 ns/conn  2.000 x-kernel  1.895 x-kernel-cpu  0.5 x-loopback  0.4386 x-loopback-cpu
BenchmarkModes/kind=connect/mode=iptables/services=10-2   200  359446 ns/op  364915 cpu-ns/conn  924816 kern-ns/op  154111 lo-ns/op  14.27 load-end  14.27 load-start  352308 ns/conn  3.000 x-kernel  1.895 x-kernel-cpu  0.1 x-loopback  0.4386 x-loopback-cpu
BenchmarkModes/kind=bulk/mode=ipvs/services=10000-2   4  38875170 ns/op  107.89 sim-MB/s  38213080 cpu-ns/conn  0.1032 x-loopback
BenchmarkServeVsBare/cache=on-2         	  100000	     33342 bare-cpu-ns/query	     12467 bare-queries/s	     29261 cpu-ns/query	        14.33 load-end	        15.26 load-start	     15431 queries/s	       142.8 reply-B	         1.238 x-bare	         1.139 x-bare-cpu
--- BENCH: BenchmarkServeVsBare/cache=on-2
PASS
`

func TestParseAndMedians(t *testing.T) {
	med := medians(parse(strings.NewReader(sample)))
	if len(med) != 3 {
		t.Fatalf("rows %v, want connect/iptables/10, bulk/ipvs/10000 and dns/cache=on", med)
	}
	c := med["connect/iptables/10"]
	if c["x-kernel"] != 2.625 || c["x-loopback"] != 0.4374 || c["ns/unit"] != 352308 || c["cpu-ns/unit"] != 364915 {
		t.Errorf("connect row medians: %v", c)
	}
	if b := med["bulk/ipvs/10000"]; b["sim-MB/s"] != 107.89 || b["x-loopback"] != 0.1032 {
		t.Errorf("bulk row: %v", b)
	}
	if d := med["dns/cache=on"]; d["x-bare"] != 1.238 || d["queries/s"] != 15431 || d["cpu-ns/unit"] != 29261 || d["bare-cpu-ns/query"] != 33342 {
		t.Errorf("dns row: %v", d)
	}
}

func TestCompare(t *testing.T) {
	want := &Ratios{Tolerance: 0.2, Rows: map[string]map[string]float64{
		"connect/iptables/10": {"x-loopback": 0.5, "x-kernel": 2.0},
		"probe/ipvs/10":       {"x-kernel": 40},
	}}
	got := map[string]map[string]float64{"connect/iptables/10": {"x-loopback": 0.41, "x-kernel": 1.59}}
	var out strings.Builder
	if bad := compare(want, got, &out); bad != 1 {
		t.Errorf("regressions %d, want 1 (x-kernel 1.59 < 2.0*0.8; x-loopback 0.41 within 20 %%):\n%s", bad, out.String())
	}
	if !strings.Contains(out.String(), "1 committed ratio(s) not measured") {
		t.Errorf("an unmeasured row is not said:\n%s", out.String())
	}
}

func TestReadRatiosErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, want string }{
		{`{"tolerance": 0.2, "rows": {"a": {"x-speed": 1}}}`, `unknown ratio "x-speed"`},
		{`{"tolerance": 0, "rows": {}}`, "field tolerance"},
		{`{"tolerance": 0.2, "rows": {"a": {"x-kernel": -1}}}`, `rows["a"]["x-kernel"]`},
		{`{"tolerance": 0.2, "rowz": {}}`, `unknown field "rowz"`},
	} {
		p := filepath.Join(dir, "r.json")
		if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := readRatios(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming %s and %q", c.body, err, p, c.want)
		}
	}
}

// The committed ratios file must load.
func TestCommittedRatios(t *testing.T) {
	if _, err := readRatios("../../docs/bench-ratios.json"); err != nil {
		t.Fatal(err)
	}
}

func TestPrintSlowOps(t *testing.T) {
	const in = `BenchmarkModes/kind=probe/mode=userspace/services=10-2   2000  503047 ns/op  5424 cpu-ns/probe  2126000 kern-ns/op  0 slow-ops  0 lo-slow-ops  2 kern-slow-ops  1012000 kern-slowest-us  80 slowest-us  400 lo-slowest-us
BenchmarkModes/kind=probe/mode=userspace/services=10-2   2000  503047 ns/op  5424 cpu-ns/probe  300000 kern-ns/op  0 slow-ops  0 lo-slow-ops  1 kern-slow-ops  1005000 kern-slowest-us  90 slowest-us  300 lo-slowest-us
BenchmarkModes/kind=probe/mode=iptables/services=10-2   2000  503047 ns/op  12000 cpu-ns/probe  300000 kern-ns/op  0 slow-ops  0 lo-slow-ops  0 kern-slow-ops  900 kern-slowest-us  90 slowest-us  300 lo-slowest-us
`
	var out strings.Builder
	printSlowOps(&out, parse(strings.NewReader(in)))
	got := out.String()
	if want := "- probe/userspace/10, 2 round(s): kernel 3 (slowest 1012 ms)"; !strings.Contains(got, want) {
		t.Errorf("slow ops:\n%s\nwant a line %q", got, want)
	}
	if strings.Contains(got, "iptables") {
		t.Errorf("a row without slow ops is listed:\n%s", got)
	}
	out.Reset()
	printSlowOps(&out, parse(strings.NewReader(sample)))
	if out.Len() != 0 {
		t.Errorf("rows without slow-op metrics printed %q", out.String())
	}
}
