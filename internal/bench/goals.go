package main

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// goalRow is one row of the Goals table: one goal of issue 24 with this run's figure.
type goalRow struct {
	Goal, Figure, Target, Anchor, Met, Cmd string
}

// goals turns this run's medians into one row per goal of issue 24. cmds holds the
// commands that measured each group (modes, dns, sync, scale). A goal this run did not
// measure says so (met "–").
func goals(med map[string]map[string]float64, cmds map[string][]string) []goalRow {
	var out []goalRow
	cmd := func(group string) string {
		if len(cmds[group]) == 0 {
			return "–"
		}
		return "`" + strings.Join(cmds[group], "` then `") + "`"
	}
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	missing := func(goal, target, group string) goalRow {
		return goalRow{goal, "not measured in this run", target, "–", "–", cmd(group)}
	}
	ms := func(ns float64) string { return strconv.FormatFloat(ns/1e6, 'f', 1, 64) + " ms" }

	// Generate + load: the full sync, beside iptables-legacy-restore of the same text.
	const full, partial = "Generate + load 10,000 services × 10 endpoints (full sync into the emulator)", "Partial sync of one changed service at 10,000 services"
	if m, ok := med["sync/full"]; ok {
		anchor := "iptables-legacy-restore of the same text into a fresh namespace: not measured (root and iptables-legacy-restore; nft left out: more than 14 min)"
		if k, ok := med["sync/kernel-legacy"]; ok {
			anchor = fmt.Sprintf("iptables-legacy-restore of the same text into a fresh namespace: %.2f s (%.1f× ours)", k["ns/op"]/1e9, k["ns/op"]/m["ns/op"])
		}
		out = append(out, goalRow{full, fmt.Sprintf("%s (CPU %.1f ms), %.0f rules", ms(m["ns/op"]), m["cpu-ms/op"], m["rules"]), "< 300 ms", anchor, met(m["ns/op"] < 300e6), cmd("sync")})
	} else {
		out = append(out, missing(full, "< 300 ms", "sync"))
	}
	if m, ok := med["sync/partial"]; ok {
		out = append(out, goalRow{partial, fmt.Sprintf("%s (CPU %.1f ms)", ms(m["ns/op"]), m["cpu-ms/op"]), "< 5 ms", "–", met(m["ns/op"] < 5e6), cmd("sync")})
	} else {
		out = append(out, missing(partial, "< 5 ms", "sync"))
	}

	// Ratios of BenchmarkModes and BenchmarkServeVsBare.
	ratio := func(goal, key, name, anchorName, anchorMetric, target string, min float64, group string) {
		m, ok := med[key]
		if !ok || m[name] == 0 {
			out = append(out, missing(goal, target, group))
			return
		}
		fig := fmt.Sprintf("%.2f× (CPU %.2f×)", m[name], m[name+"-cpu"])
		anchor := anchorName
		if v, ok := m[anchorMetric]; ok && anchorMetric != "" {
			anchor = fmt.Sprintf("%s: %.1f µs", anchorName, v/1000)
		}
		out = append(out, goalRow{goal, fig, target, anchor, met(m[name] >= min), cmd(group)})
	}
	ratio("Connections through a ClusterIP, iptables mode, 10 services", "connect/iptables/10", "x-loopback", "kernel loopback connection", "lo-ns/op", "≥ 0.8× loopback", 0.8, "modes/connect")
	ratio("Connections through a ClusterIP, iptables mode, 10,000 services", "connect/iptables/10000", "x-kernel", "the kernel running the same rules", "kern-ns/op", "≥ 1× kernel", 1, "modes/connect")
	for _, n := range []string{"10", "10000"} {
		goal := "Probes through the iptables mode, " + map[string]string{"10": "10", "10000": "10,000"}[n] + " services"
		m, ok := med["probe/iptables/"+n]
		if !ok || m["ns/unit"] == 0 {
			if n == "10" {
				out = append(out, missing(goal, "≥ 300k/s", "modes/probe"))
			}
			continue
		}
		rate := 1e9 / m["ns/unit"]
		cpu := "–"
		if v := m["cpu-ns/unit"]; v > 0 {
			cpu = fmt.Sprintf("%.0fk/s", 1e6/v)
		}
		out = append(out, goalRow{goal, fmt.Sprintf("%.0fk/s (per CPU second %s)", rate/1000, cpu), "≥ 300k/s",
			fmt.Sprintf("a kernel loopback connection: %.1f µs", m["lo-ns/op"]/1000), met(rate >= 300e3), cmd("modes/probe")})
	}
	ratio("DNS: `clusterlab dns serve`, cache on", "dns/cache=on", "x-bare", "a bare miekg/dns server with the same answers", "", "≥ 0.9× bare", 0.9, "dns")
	ratio("DNS: `clusterlab dns serve`, cache off", "dns/cache=off", "x-bare", "a bare miekg/dns server with the same answers", "", "≥ 0.9× bare", 0.9, "dns")
	ratio("Bulk TCP through a ClusterIP at MTU 1500, iptables mode, 10 services", "bulk/iptables/10", "x-loopback", "kernel loopback, same transfer", "lo-ns/op", "≥ 0.5× loopback", 0.5, "modes/bulk")
	if _, ok := med["bulk/iptables/10000"]; ok {
		ratio("Bulk TCP through a ClusterIP at MTU 1500, iptables mode, 10,000 services", "bulk/iptables/10000", "x-loopback", "kernel loopback, same transfer", "lo-ns/op", "≥ 0.5× loopback", 0.5, "modes/bulk")
	}

	// Scale: examples/scale.
	var scaleKeys []string
	for _, k := range sortedKeys(med) {
		if strings.HasPrefix(k, "scale/") {
			scaleKeys = append(scaleKeys, k)
		}
	}
	if len(scaleKeys) == 0 {
		out = append(out, missing("Scale: build + first sync of every node", "< 60 s and < 16 GiB", "scale"))
	}
	for _, k := range scaleKeys {
		m := med[k]
		var n, s, p int
		fmt.Sscanf(strings.TrimPrefix(k, "scale/"), "%d/%d/%d", &n, &s, &p)
		size := fmt.Sprintf("%d nodes, %d services, %d pods", n, s, p)
		if m["failed"] != 0 {
			out = append(out, goalRow{"Scale: " + size, "the run failed (see its error above the tables)", "< 60 s and < 16 GiB; probe as in 2 nodes", "–", "**no**", cmd("scale")})
			continue
		}
		build := m["fill-s"] + m["start-s"]
		out = append(out, goalRow{"Scale: build + first sync of every node, " + size, fmt.Sprintf("%.1f s (CPU %.1f s), peak RSS %.2f GiB", build, m["cpu-s"], m["peak-MiB"]/1024),
			"< 60 s and < 16 GiB", "–", met(build < 60 && m["peak-MiB"] < 16*1024), cmd("scale")})
		if m["probe-failed"] != 0 {
			out = append(out, goalRow{"Scale: a warm probe through a random node, " + size, "the probes failed (see the error above the tables)", "the cost in a small cluster (≤ 1.1×)", "the same Services in 2 nodes", "**no**", cmd("scale")})
		} else if _, ok := m["x-2node"]; ok {
			out = append(out, goalRow{"Scale: a warm probe through a random node, " + size, fmt.Sprintf("%.0f probes/s, %.2f× the 2-node time (CPU %.2f×)", m["probes/s"], m["x-2node"], m["x-2node-cpu"]),
				"the cost in a small cluster (≤ 1.1×)", fmt.Sprintf("the same Services in 2 nodes: %.0f probes/s", m["2node-probes/s"]), met(m["x-2node"] <= 1.1), cmd("scale")})
		}
	}
	return out
}

func printGoals(w io.Writer, rows []goalRow) {
	fmt.Fprintf(w, "### Goals (issue 24)\n\n| goal | this run | goal | anchor | met | command |\n|---|---|---|---|---|---|\n")
	esc := strings.NewReplacer("|", `\|`) // a regular expression's | would end the cell
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Goal, r.Figure, r.Target, r.Anchor, r.Met, esc.Replace(r.Cmd))
	}
	fmt.Fprintln(w)
}

var scaleLines = []struct {
	re    *regexp.Regexp
	names []string
}{
	{regexp.MustCompile(`^fill the API server: ([0-9.]+) s`), []string{"fill-s"}},
	{regexp.MustCompile(`^start pods and first sync of every node: ([0-9.]+) s \(CPU ([0-9.]+) s`), []string{"start-s", "cpu-s"}},
	{regexp.MustCompile(`^memory: heap ([0-9.]+) MiB after GC \(([0-9.]+) KiB a node\), peak RSS ([0-9.]+) MiB`), []string{"heap-MiB", "KiB/node", "peak-MiB"}},
	{regexp.MustCompile(`^probes, warm: ([0-9.]+)/s through random nodes, ([0-9.]+)/s in 2 nodes \(([0-9.]+)× the wall time, ([0-9.]+)× the CPU\)`), []string{"probes/s", "2node-probes/s", "x-2node", "x-2node-cpu"}},
}

// parseScale reads examples/scale's output. The build lines are required; the probe
// line is optional (absent when the run stopped after building).
func parseScale(text string) (map[string]float64, error) {
	m := map[string]float64{}
	for i, line := range strings.Split(text, "\n") {
		for _, l := range scaleLines {
			sub := l.re.FindStringSubmatch(strings.TrimSpace(line))
			if sub == nil {
				continue
			}
			for j, name := range l.names {
				v, err := strconv.ParseFloat(sub[j+1], 64)
				if err != nil {
					return nil, fmt.Errorf("examples/scale output line %d: %s: %v", i+1, name, err)
				}
				m[name] = v
			}
		}
	}
	for _, need := range []string{"fill-s", "start-s", "peak-MiB"} {
		if _, ok := m[need]; !ok {
			return nil, fmt.Errorf("examples/scale output: no %s line", need)
		}
	}
	return m, nil
}

// shellCmd quotes args for a shell where needed (regular expressions).
func shellCmd(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$|()*?[] ") {
			a = "'" + a + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
