package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/clusterlab/clusterlab/netsim"
)

// Report is the outcome of one run of a scenario under one proxy mode.
type Report struct {
	Name      string `json:"name,omitempty"`
	File      string `json:"file,omitempty"`
	Mode      string `json:"mode"`
	Scheduler string `json:"scheduler,omitempty"`
	Version   string `json:"kube_proxy_version"`
	DNS       string `json:"dns"`
	Seed      uint64 `json:"seed"`
	// Nodes, Services and Pods are the cluster after the manifests were applied.
	Nodes    []NodeInfo    `json:"nodes"`
	Services []ServiceInfo `json:"services"`
	Pods     []PodInfo     `json:"pods"`
	// Notes say what the version, mode and DNS choices mean for this run.
	Notes []string     `json:"notes,omitempty"`
	Steps []StepResult `json:"steps"`
	// Failed counts the steps whose expectations failed or that could not run.
	Failed int  `json:"failed"`
	Passed bool `json:"passed"`
	// Backend is the data path the traffic took when it was not the simulation's
	// ("kernel": Options.Datapath); Refused counts the steps it refused.
	Backend string `json:"backend,omitempty"`
	Refused int    `json:"refused,omitempty"`
}

// NodeInfo describes a node.
type NodeInfo struct {
	Name    string `json:"name"`
	IP      string `json:"ip"`
	PodCIDR string `json:"pod_cidr"`
	Zone    string `json:"zone,omitempty"`
	// ProxyName is the node's proxy name (cluster.proxy.name, nodes[].proxy_name); ""
	// is kube-proxy.
	ProxyName string `json:"proxy_name,omitempty"`
}

// ServiceInfo describes a Service as the API server filled it in.
type ServiceInfo struct {
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	ClusterIP string   `json:"cluster_ip"`
	Ports     []string `json:"ports"` // "80/TCP -> 9376", "80/TCP -> 9376, node port 30080"
}

// PodInfo describes a pod.
type PodInfo struct {
	Name string `json:"name"`
	Node string `json:"node"`
	IP   string `json:"ip"`
}

// StepResult is what one step did and saw.
type StepResult struct {
	Index  int    `json:"index"` // 1-based
	Title  string `json:"title"`
	Action string `json:"action"`
	Line   int    `json:"line,omitempty"`
	// Time is the virtual time since the scenario started when the step ran.
	Time string `json:"time"`
	// Status is ok, failed (an expectation did not hold) or error (the step could not run).
	Status  string   `json:"status"`
	Summary string   `json:"summary"`
	Details []string `json:"details,omitempty"`
	Error   string   `json:"error,omitempty"`

	Traffic      *TrafficResult `json:"traffic,omitempty"`
	DNS          *DNSResult     `json:"dns,omitempty"`
	Count        *int           `json:"count,omitempty"`
	Ready        *int           `json:"ready,omitempty"`
	Expectations []Expectation  `json:"expectations,omitempty"`
	// Trace is the rule-by-rule trace of the first attempt (trace: true).
	Trace *netsim.Trace `json:"trace,omitempty"`
	// DatapathState is each node's rules and conntrack table after the step, on a
	// data path other than the simulation's (Options.DatapathState).
	DatapathState []NodeState `json:"datapath_state,omitempty"`
}

// TrafficResult sums up the attempts of a connect or send step.
type TrafficResult struct {
	From   string `json:"from"`
	Client string `json:"client"` // the source address
	To     string `json:"to"`
	Dst    string `json:"dst"` // the address the traffic was sent to
	// Resolved says how a name became Dst.
	Resolved string `json:"resolved,omitempty"`
	Proto    string `json:"proto"`
	Via      string `json:"via"`
	Attempts int    `json:"attempts"`
	// Results counts attempts by result (connected, replied, delivered, refused, dropped).
	Results map[string]int `json:"results"`
	// Backends counts the answers by the pod that gave them.
	Backends map[string]int `json:"backends,omitempty"`
	// SeenSources counts the source the receiver saw: "client" (the client's own
	// address), node:NAME (a node's address), pod:NS/NAME, or an address.
	SeenSources map[string]int `json:"seen_sources,omitempty"`
	// Reasons counts why attempts were refused or dropped.
	Reasons map[string]int `json:"reasons,omitempty"`
	// Branches are the outcomes of one packet with their probabilities (all_branches).
	Branches []Branch `json:"branches,omitempty"`
	// Answers are the packets the receiving stack sent back to a crafted packet's
	// source (send with packet; "nothing" when it sent none).
	Answers []string `json:"answers,omitempty"`
	// HTTPStatuses counts the HTTP answers by status (connect with http); HTTPBody is
	// the first answer's body.
	HTTPStatuses map[string]int `json:"http_statuses,omitempty"`
	HTTPBody     string         `json:"http_body,omitempty"`
}

// Branch is one possible outcome of a packet and its probability.
type Branch struct {
	Probability float64 `json:"probability"`
	Outcome     string  `json:"outcome"`
	Pod         string  `json:"pod,omitempty"`
}

// DNSResult is the answer to a dns step.
type DNSResult struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	FQDN    string   `json:"fqdn,omitempty"` // the name that answered
	Rcode   string   `json:"rcode"`
	Answers []string `json:"answers"`
	Queries []string `json:"queries,omitempty"` // every query the resolver sent
	// Delay is the time the resolver waited for replies that did not come (type both
	// or options only): a timeout for each round that ended at its timeout.
	Delay string `json:"delay,omitempty"`
	// ByType is the outcome of each query type (type both or options only).
	ByType []DNSTypeResult `json:"by_type,omitempty"`
	// InFlight is what became of each packet the pod's node held together (together
	// only), in the order they were sent: "FORWARD <packet as it left>" or
	// "DROP <packet>: <reason>".
	InFlight []string `json:"in_flight,omitempty"`
}

// DNSTypeResult is the outcome of one query type of a lookup.
type DNSTypeResult struct {
	Type     string   `json:"type"`
	Answered bool     `json:"answered"` // the last query of this type got a reply
	Rcode    string   `json:"rcode,omitempty"`
	Answers  []string `json:"answers"`
}

// Expectation is one checked expectation.
type Expectation struct {
	Field string `json:"field"`
	Want  string `json:"want"`
	Got   string `json:"got"`
	OK    bool   `json:"ok"`
}

// JSON returns the report as indented JSON.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteText writes the report for people: the cluster, then each step with its outcome
// and expectations.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	title := r.Name
	if title == "" {
		title = r.File
	}
	if title != "" {
		fmt.Fprintf(&b, "scenario: %s\n", title)
	}
	mode := r.Mode
	if r.Scheduler != "" {
		mode += " (scheduler " + r.Scheduler + ")"
	}
	fmt.Fprintf(&b, "kube-proxy %s mode, version %s; dns %s; seed %d\n", mode, r.Version, r.DNS, r.Seed)
	if r.Backend != "" {
		fmt.Fprintf(&b, "back end: %s (the simulation is the control plane; traffic, conntrack and waits are the %s's)\n", r.Backend, r.Backend)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	r.writeCluster(&b)
	b.WriteString("\n")
	for i := range r.Steps {
		r.Steps[i].writeText(&b)
	}
	b.WriteString("\n")
	if r.Refused > 0 {
		fmt.Fprintf(&b, "%d of %d steps refused on the %s\n", r.Refused, len(r.Steps), r.Backend)
	}
	if r.Passed {
		fmt.Fprintf(&b, "PASS: %d steps, every expectation held\n", len(r.Steps)-r.Refused)
	} else {
		fmt.Fprintf(&b, "FAIL: %d of %d steps failed\n", r.Failed, len(r.Steps))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) writeCluster(b *strings.Builder) {
	var nodes []string
	for _, n := range r.Nodes {
		s := fmt.Sprintf("%s %s (pods %s", n.Name, n.IP, n.PodCIDR)
		if n.Zone != "" {
			s += ", zone " + n.Zone
		}
		if n.ProxyName != "" {
			s += ", proxy " + n.ProxyName
		}
		nodes = append(nodes, s+")")
	}
	fmt.Fprintf(b, "nodes: %s\n", strings.Join(nodes, ", "))
	for _, s := range r.Services {
		if s.Name == "default/kubernetes" {
			continue
		}
		fmt.Fprintf(b, "service %s: %s %s, %s\n", s.Name, s.Type, s.ClusterIP, strings.Join(s.Ports, "; "))
	}
	if len(r.Pods) > 0 {
		var pods []string
		for _, p := range r.Pods {
			pods = append(pods, fmt.Sprintf("%s %s@%s", p.Name, p.IP, p.Node))
		}
		fmt.Fprintf(b, "pods: %s\n", strings.Join(pods, ", "))
	}
}

func (s *StepResult) writeText(b *strings.Builder) {
	status := map[string]string{"ok": "ok", "failed": "FAILED", "error": "ERROR", "refused": "REFUSED"}[s.Status]
	fmt.Fprintf(b, "[%d] %-7s %s  ... %s\n", s.Index, "t="+s.Time, s.Title, status)
	if s.Summary != "" {
		fmt.Fprintf(b, "      %s\n", s.Summary)
	}
	for _, d := range s.Details {
		fmt.Fprintf(b, "      %s\n", d)
	}
	if s.Error != "" {
		fmt.Fprintf(b, "      error: %s\n", s.Error)
	}
	for _, e := range s.Expectations {
		mark := "ok  "
		if !e.OK {
			mark = "FAIL"
		}
		if e.OK {
			fmt.Fprintf(b, "      %s expect %s: %s\n", mark, e.Field, e.Want)
		} else {
			fmt.Fprintf(b, "      %s expect %s: %s, got %s\n", mark, e.Field, e.Want, e.Got)
		}
	}
	if s.Trace != nil {
		b.WriteString("      trace of the first attempt:\n")
		for _, ln := range strings.Split(strings.TrimRight(s.Trace.String(), "\n"), "\n") {
			fmt.Fprintf(b, "        %s\n", ln)
		}
	}
}

// countsText renders counts as "a 3, b 2" in descending count order (then by name).
func countsText(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range m {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool {
		if kvs[i].v != kvs[j].v {
			return kvs[i].v > kvs[j].v
		}
		return kvs[i].k < kvs[j].k
	})
	var parts []string
	for _, x := range kvs {
		parts = append(parts, fmt.Sprintf("%s %d", x.k, x.v))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
