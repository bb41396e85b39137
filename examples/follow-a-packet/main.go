// Command follow-a-packet is the lesson of the same name: it serves `clusterlab ui` on
// the demo's cluster (loopback, a free port) and prints, for each question the lesson
// asks, what the page answers, read from the same API the page uses. With -serve it keeps
// serving until Ctrl-C, for the lesson in a browser.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"

	"github.com/clusterlab/clusterlab/scenario"
	"github.com/clusterlab/clusterlab/ui"
)

func main() {
	serve := flag.Bool("serve", false, "keep serving the page until Ctrl-C")
	flag.Parse()
	if err := run(os.Stdout, *serve); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer, serve bool) error {
	s, err := scenario.DemoScenario()
	if err != nil {
		return err
	}
	srv, err := ui.New(s)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(w, "the page: %s/\n\n", base)

	// 1. Where does the client's packet to my-service's VIP go, hook by hook?
	var tr scenario.TraceResult
	if err := getJSON(base+"/api/trace?from=pod:default/client&to=service:default/my-service:80", &tr); err != nil {
		return err
	}
	o := tr.Outcomes[0]
	fmt.Fprintf(w, "1. %s packet from %s to %s (%s): %s\n", tr.Proto, tr.From, tr.To, tr.Dst, o.Outcome.String())
	for _, st := range o.Trace.Steps {
		switch {
		case st.Kind == "hook":
			fmt.Fprintf(w, "   [%s] %s  %s\n", st.Node, st.Hook, st.Packet)
		case st.Kind == "rule" && st.Matched != nil && *st.Matched && strings.HasPrefix(st.Verdict, "DNAT"):
			fmt.Fprintf(w, "      the rule that chose the backend: %s/%s line %d => %s\n", st.Table, st.Chain, st.Line, st.Verdict)
		}
	}

	// 2. Every branch: which backends, with which probability?
	var all scenario.TraceResult
	if err := getJSON(base+"/api/trace?from=pod:default/client&to=service:default/my-service:80&all_branches=true", &all); err != nil {
		return err
	}
	fmt.Fprintf(w, "2. every branch:\n")
	for _, b := range all.Outcomes {
		fmt.Fprintf(w, "   p=%.4f  %s\n", b.Probability, b.Outcome.String())
	}

	// 3. The answer: where is it un-DNATed, and whom does the client think answered?
	var rep scenario.TraceResult
	if err := getJSON(base+"/api/trace?from=pod:default/client&to=service:default/my-service:80&reply=true", &rep); err != nil {
		return err
	}
	hook := ""
	for _, st := range rep.Reply.Outcome.Trace.Steps {
		if st.Kind == "hook" {
			hook = "[" + st.Node + "] " + st.Hook
		}
		if st.Kind == "nat" && strings.Contains(st.Detail, "=>") {
			fmt.Fprintf(w, "3. the answer from %s is un-DNATed at %s; the client sees it from %s\n", rep.Reply.From, hook, rep.Reply.Outcome.SeenSrc)
		}
	}

	// 4. The same packet under every mode.
	fmt.Fprintf(w, "4. every mode:\n")
	for _, m := range srv.View().Modes {
		var t scenario.TraceResult
		if err := getJSON(base+"/api/trace?from=pod:default/client&to=service:default/my-service:80&mode="+m, &t); err != nil {
			return err
		}
		fmt.Fprintf(w, "   %-9s %s\n", m, t.Outcomes[0].Outcome.String())
	}
	if !serve {
		return nil
	}
	fmt.Fprintf(w, "\nserving %s/ until Ctrl-C\n", base)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
	return nil
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
