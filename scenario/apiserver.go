package scenario

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/clusterlab/clusterlab/alloc"
	"github.com/clusterlab/clusterlab/service"
)

// restartAPIServer validates a restart_apiserver step: its ranges parse, and name the
// cluster's families in the same order.
func (c *stepCheck) restartAPIServer() {
	rs := c.st.RestartAPIServer
	cidrs, err := parseCIDRs("service_cidr", rs.ServiceCIDR)
	if err != nil {
		c.fail("restart_apiserver.service_cidr", "%v", err)
	}
	cur := c.p.cfg.ServiceCIDRs
	if len(cur) == 0 {
		cur = []netip.Prefix{service.DefaultServiceCIDR}
	}
	if len(cidrs) > 0 && familiesOf(cidrs) != familiesOf(cur) {
		c.fail("restart_apiserver.service_cidr", "the cluster's service families are %s: a restart cannot change them, got %q", familiesOf(cur), rs.ServiceCIDR)
	}
	if rs.NodePortRange != "" {
		if _, err := parsePortRange(rs.NodePortRange); err != nil {
			c.fail("restart_apiserver.node_port_range", "%v", err)
		}
	}
}

// restartAPIServer runs a restart_apiserver step and checks expect.repair.
func (r *runner) restartAPIServer(st *Step, res *StepResult) error {
	rs := st.RestartAPIServer
	cidrs, err := parseCIDRs("service_cidr", rs.ServiceCIDR)
	if err != nil {
		return err
	}
	var ports alloc.PortRange
	if rs.NodePortRange != "" {
		if ports, err = parsePortRange(rs.NodePortRange); err != nil {
			return err
		}
	}
	rep, err := r.c.RestartAPIServer(cidrs, ports)
	if err != nil {
		return err
	}
	cfg := r.c.Config()
	res.Summary = fmt.Sprintf("the API server restarted: service CIDR %s, node ports %d-%d", prefixesJoin(cfg.ServiceCIDRs), cfg.NodePortRange.Base, cfg.NodePortRange.Base+cfg.NodePortRange.Size-1)
	var problems []string
	for _, p := range rep.Problems {
		problems = append(problems, p.String())
		res.Details = append(res.Details, "repair: "+p.String())
	}
	if len(problems) == 0 {
		res.Details = append(res.Details, "repair: nothing to report")
	}
	if st.Expect == nil || st.Expect.Repair == nil {
		return nil
	}
	want := *st.Expect.Repair
	used := make([]bool, len(problems))
	var missing []string
	for _, w := range want {
		found := false
		for i, p := range problems {
			if !used[i] && strings.Contains(p, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	var extra []string
	for i, p := range problems {
		if !used[i] {
			extra = append(extra, p)
		}
	}
	got := strings.Join(problems, "; ")
	if got == "" {
		got = "nothing"
	}
	wantText := strings.Join(want, "; ")
	if wantText == "" {
		wantText = "nothing"
	}
	if len(missing) > 0 {
		wantText += " (missing: " + strings.Join(missing, "; ") + ")"
	}
	if len(extra) > 0 {
		got += " (unexpected: " + strings.Join(extra, "; ") + ")"
	}
	res.Expectations = append(res.Expectations, Expectation{Field: "repair", Want: wantText, Got: got, OK: len(missing) == 0 && len(extra) == 0})
	return nil
}

func prefixesJoin(ps []netip.Prefix) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}
