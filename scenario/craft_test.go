package scenario

import (
	"strings"
	"testing"
)

const craftScenario = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - name: syn
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {tcp_flags: SYN, seq: "1000"}}
    expect: {result: delivered, reaches: [default/web-0], ctstate: {node-b: NEW, node-a: NEW}}
  - name: syn-ack
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {tcp_flags: "SYN,ACK", seq: "5000", ack: 1001, reply: true}}
    expect: {result: delivered, ctstate: {node-a: ESTABLISHED, node-b: ESTABLISHED}}
  - name: ack
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {seq: next, ack: 5001}}
    expect: {result: delivered, reaches: [default/web-0], ctstate: {node-b: ESTABLISHED}}
  - name: out of window
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {seq: next+2000000000, ack: 5001, window: 1000}}
    expect: {result: dropped, ctstate: {node-b: INVALID}, decided_by: {chain: KUBE-FORWARD, rule: "--ctstate INVALID"}}
  - name: server data
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {tcp_flags: "PSH,ACK", seq: next, ack: 1001, reply: true}}
    expect: {result: delivered, ctstate: {node-a: ESTABLISHED, node-b: ESTABLISHED}}
  - name: fragmentation needed
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, proto: icmp, packet: {icmp_type: fragmentation-needed, reply: true}}
    expect: {result: delivered, ctstate: {node-a: RELATED, node-b: RELATED}}
  - name: liberal
    node_settings: {node: node-b, tcp_be_liberal: true}
  - name: out of window, liberal client node
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {seq: next+2000000000, ack: 5001}}
    expect: {result: dropped, ctstate: {node-b: ESTABLISHED, node-a: INVALID}, decided_by: {chain: KUBE-FORWARD, rule: "--ctstate INVALID"}}
  - name: liberal everywhere
    node_settings: {node: all, tcp_be_liberal: true}
  - name: out of window, liberal
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {seq: next+2000000000, ack: 5001}}
    expect: {result: delivered, reaches: [default/web-0], ctstate: {node-b: ESTABLISHED, node-a: ESTABLISHED}}
  - name: echo to the pod
    connect: {from: pod:default/client, to: pod:default/web-0:80, proto: icmp}
    expect: {result: replied}
  - name: echo to the ClusterIP
    connect: {from: pod:default/client, to: service:default/web:80, proto: icmp}
    expect: {result: dropped}
`

// TestCraftedPackets: crafted segments on a connection's tuple from both sides through
// the iptables mode: the handshake's states, an out-of-window ACK INVALID and dropped
// by KUBE-FORWARD's INVALID rule (still dropped, at the server's node, when only the
// client's node has tcp_be_liberal; accepted when both have it), an ICMP error from the
// server RELATED at both nodes, an echo answered by a pod but not by a ClusterIP.
func TestCraftedPackets(t *testing.T) {
	rep := mustRun(t, mustParse(t, craftScenario), "iptables")
	if !rep.Passed {
		t.Fatalf("%s", reportText(rep))
	}
	wrong := strings.Replace(craftScenario, "ctstate: {node-b: INVALID}", "ctstate: {node-b: ESTABLISHED}", 1)
	rep = mustRun(t, mustParse(t, wrong), "iptables")
	for _, st := range rep.Steps {
		for _, e := range st.Expectations {
			if !e.OK && (st.Title != "out of window" || e.Field != "ctstate.node-b" || e.Got != "INVALID") {
				t.Errorf("%s: %+v", st.Title, e)
			}
		}
	}
	if rep.Passed {
		t.Error("a wrong ctstate passed")
	}
}

// TestCraftedPacketErrors: a crafted packet's fields and the ctstate expectation are
// checked when the file is loaded.
func TestCraftedPacketErrors(t *testing.T) {
	head := "cluster: {nodes: [{name: node-a}]}\nsteps:\n  - "
	cases := []struct{ step, want string }{
		{"send: {from: pod:default/c, to: 10.0.0.1:80, packet: {seq: next}}", "needs the connection's src_port"},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, packet: {tcp_flags: \"SYN,NOPE\"}}", `unknown TCP flag "NOPE"`},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, packet: {seq: later}}", `seq "later"`},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, packet: {window: 70000}}", "packet.window: want 0-65535"},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, proto: icmp, packet: {icmp_type: bogus, reply: true}}", "icmp_type"},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, proto: icmp, packet: {icmp_type: fragmentation-needed}}", "from the server's side (reply: true)"},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, proto: icmp, packet: {seq: \"1\"}}", "are for TCP segments"},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, proto: udp, packet: {}}", "a crafted packet is tcp or icmp"},
		{"connect: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, packet: {}}", "only send steps send crafted packets"},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, packet: {}}\n    expect: {ctstate: {node-z: INVALID}}", `no node "node-z"`},
		{"send: {from: pod:default/c, to: 10.0.0.1:80, src_port: 4, packet: {}}\n    expect: {ctstate: {node-a: BROKEN}}", "want one of NEW, ESTABLISHED"},
		{"send: {from: pod:default/c, to: 10.0.0.1:80}\n    expect: {ctstate: {node-a: NEW}}", "only send (with a crafted packet) steps have ctstate"},
		{"connect: {from: pod:default/c, to: 10.0.0.1:80, proto: icmp, via: netstack}", "icmp traffic needs via: probe"},
	}
	for _, tc := range cases {
		_, err := Parse("bad.yaml", []byte(head+tc.step+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.step, err, tc.want)
		}
	}
}

// TestCraftedPacketsDelivered: with deliver: true a crafted packet is handed to the
// stack it reaches, and the step reports that stack's answer: a listener's SYN-ACK, a
// RST for an ACK of no connection, RST-ACK from a closed port, an echo reply.
// answered_with needs deliver, and names flags, ICMP or nothing.
func TestCraftedPacketsDelivered(t *testing.T) {
	const sc = `cluster: {dns: off, nodes: [{name: node-a}, {name: node-b}]}
manifests:
  - {apiVersion: v1, kind: Service, metadata: {name: web}, spec: {selector: {app: web}, ports: [{port: 80}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: web-0, labels: {app: web}}, spec: {nodeName: node-a, containers: [{name: w, image: i, ports: [{containerPort: 80}]}]}}
  - {apiVersion: v1, kind: Pod, metadata: {name: client}, spec: {nodeName: node-b, containers: [{name: c, image: i}]}}
steps:
  - name: syn to the listener
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4000, packet: {tcp_flags: SYN, seq: "1000", deliver: true}}
    expect: {answered_with: "ack, syn"}
  - name: ack of nothing
    send: {from: pod:default/client, to: service:default/web:80, src_port: 4001, packet: {tcp_flags: ACK, seq: "7000", ack: 9000, deliver: true}}
    expect: {answered_with: RST}
  - name: syn to a closed port
    send: {from: pod:default/client, to: pod:default/web-0:81, src_port: 4002, packet: {tcp_flags: SYN, seq: "1", deliver: true}}
    expect: {answered_with: "RST,ACK"}
  - name: echo
    send: {from: pod:default/client, to: pod:default/web-0:80, proto: icmp, src_port: 7, packet: {deliver: true}}
    expect: {answered_with: ICMP}
`
	rep := mustRun(t, mustParse(t, sc), "iptables")
	if !rep.Passed {
		t.Fatalf("%s", reportText(rep))
	}
	if a := step(t, rep, "ack of nothing").Traffic.Answers; len(a) != 1 || !strings.HasSuffix(a[0], "[R]") {
		t.Errorf("answers %q, want one RST", a)
	}
	wrong := strings.Replace(sc, "answered_with: RST}", "answered_with: nothing}", 1)
	if rep := mustRun(t, mustParse(t, wrong), "iptables"); rep.Passed {
		t.Error("answered_with: nothing passed for a RST")
	}
	_, err := Parse("test.yaml", []byte(`cluster: {dns: off, nodes: [{name: node-a}]}
steps:
  - send: {from: node:node-a, to: 10.0.0.1:80, src_port: 4000, packet: {tcp_flags: SYN}}
    expect: {answered_with: RST}
  - send: {from: node:node-a, to: 10.0.0.1:80, src_port: 4000, packet: {tcp_flags: SYN, deliver: true}}
    expect: {answered_with: "RST,URG"}
`))
	for _, want := range []string{
		"test.yaml:4: steps[0].expect.answered_with: only send (with a crafted packet, deliver: true) steps have answered_with",
		`test.yaml:6: steps[1].expect.answered_with: want nothing, ICMP or TCP flags (RST, ACK, "RST,ACK", SYN, FIN, PSH), got "RST,URG"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}
