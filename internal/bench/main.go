// Command bench reruns the benchmarks of docs/PERFORMANCE.md that measure what users
// run (proxy/kubeproxy's BenchmarkModes: ClusterIP connections, probes and bulk transfers
// through every kube-proxy mode, each beside kernel loopback and a real kernel running the
// same rules, measured in alternating blocks in one process; and dns's
// BenchmarkServeVsBare: `clusterlab dns serve` beside a bare miekg/dns server giving the
// same answers, on loopback UDP in alternating blocks), prints their tables as
// markdown with the command, the machine and the load average, and with -check compares
// the ratios to those committed in docs/bench-ratios.json: a ratio more than 20 % below
// its committed value is a regression and fails the run. Only ratios are compared, never
// absolute times, and only ratios measured in this run (the kernel's need root).
//
// It also runs proxy/iptables's BenchmarkEmulatorSync10kServices (the partial sync with
// -short; also the full sync and its anchor BenchmarkKernelRestore10kServices/legacy
// without) and examples/scale (50/1,000/3,000 with -short, 5,000/10,000/150,000
// without; -scale sets the size), and prints first a Goals table: one row per goal of
// issue 24 with this run's figure, the goal, the anchor, met or not, and the command.
// Absolute goals (300 ms, 5 ms, 60 s) are reported, never checked.
//
//	go run ./internal/bench                  # 10 and 10,000 services, one round (~10 min)
//	go run ./internal/bench -short -check    # 10 services, what CI runs (about a minute)
//	go run ./internal/bench -update          # rewrite docs/bench-ratios.json from this run
//	go run ./internal/bench -only dns        # the DNS rows alone (-only modes|sync|scale: those)
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/internal/benchutil"
)

// checked are the ratios -check compares (anchor time / subject time: higher is better).
var checked = []string{"x-loopback", "x-loopback-cpu", "x-kernel", "x-kernel-cpu", "x-bare", "x-bare-cpu"}

// Ratios is docs/bench-ratios.json.
type Ratios struct {
	Comment   string                        `json:"comment"`
	Tolerance float64                       `json:"tolerance"`
	Rows      map[string]map[string]float64 `json:"rows"`
}

func main() {
	short := flag.Bool("short", false, "10 services only, fewer and smaller operations (CI)")
	check := flag.Bool("check", false, "compare the ratios with -ratios; exit 1 on a regression beyond the tolerance")
	update := flag.Bool("update", false, "write this run's ratios to -ratios")
	ratiosFile := flag.String("ratios", "docs/bench-ratios.json", "the committed ratios")
	count := flag.Int("count", 0, "rounds (go test -count; default 1, 3 with -short: at 10,000 services one round builds every mode's cluster and loads the kernel's ruleset, minutes); each figure is the median of the rounds")
	ops := flag.Int("ops", 0, "connections per row (default 400, 200 with -short)")
	probeOps := flag.Int("probe-ops", 0, "probes per row (default 10 × -ops: a probe costs a tenth of a connection or less, and short blocks are noise)")
	bulkOps := flag.Int("bulk-ops", 0, "bulk transfers per row (default 30, 8 with -short)")
	dnsQueries := flag.Int("dns-queries", 0, "queries to each DNS server per round of BenchmarkServeVsBare (default 100000, 20000 with -short); 0 rounds of DNS with -dns-queries -1")
	only := flag.String("only", "", "run only these benchmarks: modes, dns, sync or scale (default all)")
	scaleSize := flag.String("scale", "", "nodes/services/pods of the scale row (default 50/1000/3000 with -short, else 5000/10000/150000)")
	scaleProbes := flag.Int("scale-probes", 20000, "probes in each cluster of the scale row (examples/scale -probes)")
	verbose := flag.Bool("v", false, "show go test's output")
	flag.Parse()
	if *ops == 0 {
		*ops = map[bool]int{false: 400, true: 200}[*short]
	}
	if *probeOps == 0 {
		*probeOps = 10 * *ops
	}
	if *count == 0 {
		*count = map[bool]int{false: 1, true: 3}[*short]
	}
	if *bulkOps == 0 {
		// 30: a 16 MiB transfer takes 8-20 ms here, and its CPU moved 12-28 ms between
		// runs of the same binary minutes apart (the same trains, no retransmission):
		// 10 of them, a quarter of a second, made a row one moment's figure.
		*bulkOps = map[bool]int{false: 30, true: 8}[*short]
	}
	if *dnsQueries == 0 {
		*dnsQueries = map[bool]int{false: 100000, true: 20000}[*short]
	}
	start := time.Now()
	load0 := benchutil.LoadAvg()
	var out bytes.Buffer
	var cmds []string
	type run struct {
		pkg, re  string
		n, count int
	}
	runs := []run{{"./proxy/kubeproxy/", "^BenchmarkModes$/kind=connect/", *ops, *count}, {"./proxy/kubeproxy/", "^BenchmarkModes$/kind=probe/", *probeOps, *count}, {"./proxy/kubeproxy/", "^BenchmarkModes$/kind=bulk/", *bulkOps, *count}}
	switch *only {
	case "", "modes", "dns", "sync", "scale":
	default:
		fmt.Fprintf(os.Stderr, "bench: -only %q: want modes, dns, sync or scale\n", *only)
		os.Exit(2)
	}
	if *only != "" && *only != "modes" {
		runs = nil
	}
	if *dnsQueries > 0 && (*only == "" || *only == "dns") {
		// At least 3 rounds: the DNS rows are cheap (seconds) and noisier than the modes'.
		runs = append(runs, run{"./dns/", "^BenchmarkServeVsBare$", *dnsQueries, max(*count, 3)})
	}
	if *only == "" || *only == "sync" {
		// The emulator's sync of 10,000 services × 10 endpoints. With -short only the
		// partial sync (a few seconds, most of it building the cluster); the full sync and
		// its kernel anchor (iptables-legacy-restore into a fresh namespace: about a
		// minute; nft's took more than 14 minutes, so it is left out) only without.
		// The partial sync runs 1,000 times: its figure is a sync's steady cost,
		// including the GC cycles its own garbage brings (1,000 syncs allocate more
		// than the live heap), not the setup's.
		if !*short {
			runs = append(runs, run{"./proxy/iptables/", "^BenchmarkEmulatorSync10kServices$/^full$", 5, 1})
		}
		runs = append(runs, run{"./proxy/iptables/", "^BenchmarkEmulatorSync10kServices$/^partial$", 1000, 1})
		if !*short {
			runs = append(runs, run{"./proxy/iptables/", "^BenchmarkKernelRestore10kServices$/^legacy$", 1, 1})
		}
	}
	groupCmds := map[string][]string{}
	for _, r := range runs {
		args := []string{"test", r.pkg, "-run", "^$", "-bench", r.re, "-benchtime", fmt.Sprintf("%dx", r.n), "-count", strconv.Itoa(r.count), "-timeout", "60m"}
		group := map[string]string{"./proxy/kubeproxy/": "modes", "./dns/": "dns", "./proxy/iptables/": "sync"}[r.pkg]
		if _, kind, ok := strings.Cut(r.re, "kind="); ok {
			group += "/" + strings.TrimSuffix(kind, "/") // modes/connect
		}
		if *short {
			args = append(args, "-short")
		}
		groupCmds[group] = append(groupCmds[group], shellCmd(append([]string{"go"}, args...)))
		cmds = append(cmds, "go "+strings.Join(args, " "))
		cmd := exec.Command("go", args...)
		var w io.Writer = &out
		if *verbose {
			w = io.MultiWriter(&out, os.Stderr)
		}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Run(); err != nil {
			os.Stderr.Write(out.Bytes())
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", cmds[len(cmds)-1], err)
			os.Exit(2)
		}
	}
	rows := parse(&out)
	if *only == "" || *only == "scale" {
		size := *scaleSize
		if size == "" {
			size = map[bool]string{false: "5000/10000/150000", true: "50/1000/3000"}[*short]
		}
		var n, s, p int
		if _, err := fmt.Sscanf(size, "%d/%d/%d", &n, &s, &p); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -scale %q: want nodes/services/pods: %v\n", size, err)
			os.Exit(2)
		}
		args := []string{"run", "./examples/scale", "-nodes", strconv.Itoa(n), "-services", strconv.Itoa(s), "-pods", strconv.Itoa(p), "-probes", strconv.Itoa(*scaleProbes)}
		c := "go " + strings.Join(args, " ")
		cmds = append(cmds, c)
		groupCmds["scale"] = []string{c}
		var sout bytes.Buffer
		cmd := exec.Command("go", args...)
		var w io.Writer = &sout
		if *verbose {
			w = io.MultiWriter(&sout, os.Stderr)
		}
		cmd.Stdout, cmd.Stderr = w, w
		runErr := cmd.Run()
		m, err := parseScale(sout.String())
		switch {
		case runErr != nil:
			// Reported in the Goals table as not met; the other rows still count.
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n%s", c, runErr, tail(sout.String(), 5))
			if err != nil {
				m = map[string]float64{"failed": 1}
			} else {
				m["probe-failed"] = 1 // built, then failed probing
			}
		case err != nil:
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n%s", c, err, sout.String())
			os.Exit(2)
		}
		rows["scale/"+size] = []map[string]float64{m}
	}
	if len(rows) == 0 {
		os.Stderr.Write(out.Bytes())
		fmt.Fprintln(os.Stderr, "bench: no benchmark results in go test's output")
		os.Exit(2)
	}
	med := medians(rows)
	fmt.Printf("## What users run: the goals, the modes (BenchmarkModes), DNS (BenchmarkServeVsBare), the sync and scale\n\n")
	fmt.Printf("Commands: `%s`\n\n", strings.Join(cmds, "` then `"))
	fmt.Printf("Machine: %s, %d CPUs (GOMAXPROCS %d), %s %s/%s; load average (1, 5, 15 min) %s at the start, %s at the end; %d round(s) (DNS: %d), each figure the median; %v.\n\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, load0, benchutil.LoadAvg(), *count, max(*count, 3), time.Since(start).Round(time.Second))
	printGoals(os.Stdout, goals(med, groupCmds))
	printTables(med)
	printSlowOps(os.Stdout, rows)
	printDNSTable(med)
	if *update {
		r := Ratios{Comment: "Ratios (anchor time / simulated time, higher is better) from `go run ./internal/bench`; -check fails when one falls more than tolerance below. Regenerate with -update after an intended change, and say so in the commit.", Tolerance: 0.2, Rows: map[string]map[string]float64{}}
		if old, err := readRatios(*ratiosFile); err == nil {
			r.Rows = old.Rows
			r.Tolerance = old.Tolerance
		}
		for key, m := range med {
			if k, _, _ := strings.Cut(key, "/"); k != "connect" && k != "probe" && k != "bulk" && k != "dns" {
				continue // only the modes' and DNS's ratios are committed
			}
			rr := map[string]float64{}
			for _, k := range checked {
				if v, ok := m[k]; ok {
					rr[k] = round3(v)
				}
			}
			r.Rows[key] = rr
		}
		data, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*ratiosFile, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		fmt.Printf("\nwrote %s\n", *ratiosFile)
	}
	if *check {
		want, err := readRatios(*ratiosFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		if bad := compare(want, med, os.Stdout); bad > 0 {
			fmt.Printf("\n%d ratio(s) regressed by more than %.0f %% against %s\n", bad, want.Tolerance*100, *ratiosFile)
			os.Exit(1)
		}
		fmt.Printf("\nno ratio regressed by more than %.0f %% against %s\n", want.Tolerance*100, *ratiosFile)
	}
}

func round3(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return f
}

func readRatios(path string) (*Ratios, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Ratios
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Tolerance <= 0 || r.Tolerance >= 1 {
		return nil, fmt.Errorf("%s: field tolerance: %v, want a fraction between 0 and 1", path, r.Tolerance)
	}
	for key, m := range r.Rows {
		for k, v := range m {
			if !slices.Contains(checked, k) {
				return nil, fmt.Errorf("%s: rows[%q]: unknown ratio %q (have %s)", path, key, k, strings.Join(checked, ", "))
			}
			if v <= 0 {
				return nil, fmt.Errorf("%s: rows[%q][%q]: %v, want a positive ratio", path, key, k, v)
			}
		}
	}
	return &r, nil
}

// compare prints each committed ratio beside this run's and returns how many fell more
// than the tolerance below. A ratio this run did not measure is said, not counted.
func compare(want *Ratios, got map[string]map[string]float64, w io.Writer) int {
	bad, unmeasured := 0, 0
	defer func() {
		if unmeasured > 0 {
			fmt.Fprintf(w, "\n%d committed ratio(s) not measured in this run (-short, or no root for the kernel's)\n", unmeasured)
		}
	}()
	fmt.Fprintf(w, "\n| row | ratio | committed | this run | change |\n|---|---|---:|---:|---:|\n")
	for _, key := range sortedKeys(want.Rows) {
		for _, k := range checked {
			c, ok := want.Rows[key][k]
			if !ok {
				continue
			}
			g, ok := got[key][k]
			if !ok {
				unmeasured++
				continue
			}
			change := g/c - 1
			mark := ""
			if g < c*(1-want.Tolerance) {
				mark = " **regression**"
				bad++
			}
			fmt.Fprintf(w, "| %s | %s | %.3g | %.3g | %+.0f %%%s |\n", key, k, c, g, change*100, mark)
		}
	}
	return bad
}

// parse reads go test -bench lines: BenchmarkModes/kind=K/mode=M/services=N-P  ops  v unit ...
// and BenchmarkServeVsBare/cache=C-P ..., and returns, per row "K/M/N" or "dns/cache=C",
// the metrics of every round.
func parse(r io.Reader) map[string][]map[string]float64 {
	rows := map[string][]map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		name, modes := strings.CutPrefix(f[0], "BenchmarkModes/")
		var sync string
		if n, ok := strings.CutPrefix(f[0], "BenchmarkEmulatorSync10kServices/"); ok {
			sync = n
		} else if n, ok := strings.CutPrefix(f[0], "BenchmarkKernelRestore10kServices/"); ok {
			sync = "kernel-" + n
		}
		if sync != "" {
			name = sync
		} else if !modes {
			var dns bool
			if name, dns = strings.CutPrefix(f[0], "BenchmarkServeVsBare/"); !dns {
				continue
			}
		}
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		var parts []string
		if modes {
			for _, p := range strings.Split(name, "/") {
				_, v, _ := strings.Cut(p, "=")
				parts = append(parts, v)
			}
		} else if sync != "" {
			parts = []string{"sync", name} // sync/full, sync/kernel-legacy
		} else {
			parts = []string{"dns", name} // dns/cache=on
		}
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			if strings.HasPrefix(unit, "ns/") && unit != "ns/op" {
				unit = "ns/unit"
			}
			if strings.HasPrefix(unit, "cpu-ns/") {
				unit = "cpu-ns/unit"
			}
			m[unit] = v
		}
		key := strings.Join(parts, "/")
		rows[key] = append(rows[key], m)
	}
	return rows
}

func medians(rows map[string][]map[string]float64) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for key, rounds := range rows {
		vals := map[string][]float64{}
		for _, m := range rounds {
			for k, v := range m {
				vals[k] = append(vals[k], v)
			}
		}
		mm := map[string]float64{}
		for k, vs := range vals {
			sort.Float64s(vs)
			if len(vs)%2 == 1 {
				mm[k] = vs[len(vs)/2]
			} else {
				mm[k] = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
			}
		}
		out[key] = mm
	}
	return out
}

func printTables(med map[string]map[string]float64) {
	kinds := []struct{ kind, title, unit string }{
		{"connect", "ClusterIP connections (dial, 64 bytes each way, close)", "µs/conn"},
		{"probe", "Probes (one netsim TCP probe; anchors: a loopback connection and a kernel connection through the same rules)", "µs/probe"},
		{"bulk", "Bulk TCP through a ClusterIP (MTU 1500; one connection per op)", "µs/conn"},
	}
	for _, k := range kinds {
		var keys []string
		for _, key := range sortedKeys(med) {
			if strings.HasPrefix(key, k.kind+"/") {
				keys = append(keys, key)
			}
		}
		if len(keys) == 0 {
			continue
		}
		fmt.Printf("### %s\n\n", k.title)
		fmt.Printf("| mode | services | %s | CPU %s | MB/s | loopback µs | kernel µs | × loopback | × loopback CPU | × kernel | × kernel CPU | load |\n", k.unit, k.unit)
		fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, key := range keys {
			m := med[key]
			p := strings.Split(key, "/")
			us := func(name string) string {
				if v, ok := m[name]; ok {
					return strconv.FormatFloat(v/1000, 'f', 1, 64)
				}
				return "–"
			}
			x := func(name string) string {
				if v, ok := m[name]; ok {
					return strconv.FormatFloat(v, 'f', 3, 64)
				}
				return "–"
			}
			mbs := "–"
			if v, ok := m["sim-MB/s"]; ok {
				mbs = strconv.FormatFloat(v, 'f', 1, 64)
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f–%.1f |\n", p[1], p[2], us("ns/unit"), us("cpu-ns/unit"), mbs, us("lo-ns/op"), us("kern-ns/op"),
				x("x-loopback"), x("x-loopback-cpu"), x("x-kernel"), x("x-kernel-cpu"), m["load-start"], m["load-end"])
		}
		fmt.Println()
	}
}

// printSlowOps lists the rows in which an op (the subject's or an anchor's) took over
// 100 ms in some round: a kernel connection whose SYN was lost or refused waits a
// second for the retransmission, which moves a row's mean by milliseconds and says
// nothing about the work measured. Nothing is printed when no op was slow.
func printSlowOps(w io.Writer, rows map[string][]map[string]float64) {
	var lines []string
	for _, key := range sortedKeys(rows) {
		var n [3]float64
		var slowest [3]float64
		for _, m := range rows[key] {
			for i, p := range []string{"", "lo-", "kern-"} {
				n[i] += m[p+"slow-ops"]
				slowest[i] = max(slowest[i], m[p+"slowest-us"])
			}
		}
		if n[0]+n[1]+n[2] == 0 {
			continue
		}
		var parts []string
		for i, who := range []string{"simulated", "loopback", "kernel"} {
			if n[i] > 0 {
				parts = append(parts, fmt.Sprintf("%s %.0f (slowest %.0f ms)", who, n[i], slowest[i]/1000))
			}
		}
		lines = append(lines, fmt.Sprintf("- %s, %d round(s): %s", key, len(rows[key]), strings.Join(parts, ", ")))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "Ops over 100 ms (a retransmission wait, not the work measured; the row's mean includes them):\n\n%s\n\n", strings.Join(lines, "\n"))
}

// printDNSTable prints the rows of BenchmarkServeVsBare.
func printDNSTable(med map[string]map[string]float64) {
	var keys []string
	for _, key := range sortedKeys(med) {
		if strings.HasPrefix(key, "dns/") {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return
	}
	fmt.Printf("### DNS: `clusterlab dns serve` beside a bare miekg/dns server with the same answers (loopback UDP, EDNS0 queries of the perfQueries mix)\n\n")
	fmt.Printf("| row | ours q/s | bare q/s | × bare | ours CPU µs/query | bare CPU µs/query | × bare CPU | reply bytes | load |\n")
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, key := range keys {
		m := med[key]
		fmt.Printf("| %s | %.0f | %.0f | %.3f | %.1f | %.1f | %.3f | %.1f | %.1f–%.1f |\n", strings.TrimPrefix(key, "dns/"),
			m["queries/s"], m["bare-queries/s"], m["x-bare"], m["cpu-ns/unit"]/1000, m["bare-cpu-ns/query"]/1000, m["x-bare-cpu"], m["reply-B"], m["load-start"], m["load-end"])
	}
	fmt.Println()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// kind, then mode, then services numerically
	sort.Slice(keys, func(i, j int) bool {
		a, b := strings.Split(keys[i], "/"), strings.Split(keys[j], "/")
		for n := 0; n < len(a) && n < len(b); n++ {
			if a[n] == b[n] {
				continue
			}
			ai, e1 := strconv.Atoi(a[n])
			bi, e2 := strconv.Atoi(b[n])
			if e1 == nil && e2 == nil {
				return ai < bi
			}
			return a[n] < b[n]
		}
		return len(a) < len(b)
	})
	return keys
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
