package kernel

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Counters returns the kernel's packet counters of network namespace ns as the
// namespace sees them (/proc/net/snmp and /proc/net/netstat): each nonzero one as
// "Group.Name=value", space-separated, in the files' order, settings (Ip.Forwarding,
// Ip.DefaultTTL, Tcp's Rto and MaxConn values) left out. They say where a namespace's
// packets went: UDP datagrams received with no socket (Udp.NoPorts) or dropped at a
// full buffer (Udp.RcvbufErrors), IP discards, ICMP sent and received.
func (h *Harness) Counters(ns *Netns) (string, error) {
	var out []string
	err := ns.h.do(func() error {
		for _, f := range []string{"/proc/thread-self/net/snmp", "/proc/thread-self/net/netstat"} {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			cs, err := NonzeroCounters(string(b))
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			out = append(out, cs...)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("counters of %s: %w", ns, err)
	}
	return strings.Join(out, " "), nil
}

// counterSettings are the values of /proc/net/snmp that are settings, not counts.
var counterSettings = map[string]bool{"Ip.Forwarding": true, "Ip.DefaultTTL": true,
	"Tcp.RtoAlgorithm": true, "Tcp.RtoMin": true, "Tcp.RtoMax": true, "Tcp.MaxConn": true}

// NonzeroCounters reads the text of /proc/net/snmp or /proc/net/netstat (pairs of
// lines "Group: Name1 Name2 ..." and "Group: value1 value2 ...") and returns each
// nonzero counter as "Group.Name=value", settings left out. A line without its pair,
// a pair of two groups or of different lengths, or a value that is no integer is an
// error naming the line.
func NonzeroCounters(text string) ([]string, error) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil, nil
	}
	var out []string
	for i := 0; i < len(lines); i += 2 {
		if i+1 >= len(lines) {
			return nil, fmt.Errorf("line %d: %q has no line of values", i+1, lines[i])
		}
		g, names, ok1 := strings.Cut(lines[i], ":")
		g2, values, ok2 := strings.Cut(lines[i+1], ":")
		if !ok1 || !ok2 || g != g2 || g == "" || strings.ContainsAny(g, " \t") {
			return nil, fmt.Errorf("line %d: %q and %q are not one group's names and values", i+1, lines[i], lines[i+1])
		}
		ns, vs := strings.Fields(names), strings.Fields(values)
		if len(ns) != len(vs) {
			return nil, fmt.Errorf("line %d: group %s has %d names and %d values", i+2, g, len(ns), len(vs))
		}
		for k, v := range vs {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s.%s: %q is not a number", i+2, g, ns[k], v)
			}
			name := g + "." + ns[k]
			if n != 0 && !counterSettings[name] {
				out = append(out, name+"="+v)
			}
		}
	}
	return out, nil
}
