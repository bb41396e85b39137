package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/scenario"
)

// FlowEvent is one live packet traced while the scenario's steps ran, as /api/flows
// streams it (Hubble's flow list): the step it belongs to, the packet as it was first
// seen, the nodes it crossed and its end.
type FlowEvent struct {
	Step   int      `json:"step"` // 1-based
	Index  int      `json:"index"`
	Packet string   `json:"packet"`
	Nodes  []string `json:"nodes"`
	NAT    []string `json:"nat,omitempty"`
	End    string   `json:"end"`
	Text   string   `json:"text"`
}

// maxFlows is how many live packets /api/flows traces a step (90 connections are some
// 600 packets).
const maxFlows = 80

func flowEvent(step, index int, t *netsim.Trace) FlowEvent {
	ev := FlowEvent{Step: step, Index: index, Nodes: []string{}, End: "in flight"}
	for _, s := range t.Steps {
		if ev.Packet == "" && s.Packet != "" {
			ev.Packet = s.Packet
		}
		if s.Node != "" && (len(ev.Nodes) == 0 || ev.Nodes[len(ev.Nodes)-1] != s.Node) {
			ev.Nodes = append(ev.Nodes, s.Node)
		}
		switch s.Kind {
		case netsim.StepNAT:
			if _, after, ok := strings.Cut(s.Detail, "=> "); ok {
				ev.NAT = append(ev.NAT, s.Verdict+" → "+strings.TrimSuffix(after, ")"))
			}
		case netsim.StepEnd:
			ev.End = s.Verdict
			if s.Detail != "" {
				ev.End += " (" + s.Detail + ")"
			}
		}
	}
	ev.Text = t.String()
	return ev
}

// Flows runs the scenario's steps under mode with live flows traced, and calls emit
// with each step's state and the flows it made, in order. It stops early when ctx is
// done or emit fails.
func (srv *Server) Flows(ctx context.Context, mode string, emit func(kind string, v any) error) error {
	ss, err := scenario.Open(srv.s, mode)
	if err != nil {
		return err
	}
	defer ss.Close()
	ss.LiveTraffic()
	total, capped := 0, 0
	for !ss.Done() {
		if err := ctx.Err(); err != nil {
			return err
		}
		ft := ss.TraceFlows(netsim.FlowFilter{Limit: maxFlows})
		st, err := ss.Step(ctx)
		ft.Stop()
		if err != nil {
			return err
		}
		if err := emit("step", st.Result); err != nil {
			return err
		}
		traces := ft.Traces()
		for i, tr := range traces {
			if err := emit("flow", flowEvent(st.Result.Index, total+i+1, tr)); err != nil {
				return err
			}
		}
		total += len(traces)
		if len(traces) >= maxFlows {
			capped++
		}
	}
	note := fmt.Sprintf("%d packets traced", total)
	if capped > 0 {
		note += fmt.Sprintf(" (the first %d of each step; %d steps sent more)", maxFlows, capped)
	}
	return emit("done", map[string]string{"note": note})
}

func (srv *Server) flows(w http.ResponseWriter, r *http.Request) {
	mode, err := srv.modeParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	emit := func(kind string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, b); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	if err := srv.Flows(r.Context(), mode, emit); err != nil && r.Context().Err() == nil {
		emit("failed", map[string]string{"error": err.Error()})
	}
}
