// Command curl-a-clusterip runs a scenario's cluster as `clusterlab up` does, opens a
// SOCKS5 proxy into it on a loopback port, and has a real program fetch a ClusterIP
// Service by its DNS name: curl --socks5-hostname when curl is installed, else Go's
// golang.org/x/net/proxy client. It does it twice: with the proxy's connections
// starting at an external host (kube-proxy masquerades them: the backend sees a node's
// address) and starting at the client pod (the backend sees the pod's own address).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"time"

	"golang.org/x/net/proxy"

	"github.com/clusterlab/clusterlab/hostlink"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/scenario"
)

func main() {
	if err := run(os.Stdout, "testdata/scenarios/curl-a-clusterip.yaml"); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer, file string) error {
	s, err := scenario.Load(file)
	if err != nil {
		return err
	}
	live, err := scenario.Start(s, scenario.Options{})
	if err != nil {
		return err
	}
	defer live.Close()
	for _, from := range []string{"", "pod:default/client"} {
		link, err := hostlink.Open(live, hostlink.Config{From: from, SOCKS: "127.0.0.1:0"})
		if err != nil {
			return err
		}
		body, how, err := fetch(link.SOCKSAddr.String(), "http://web.default.svc.cluster.local/")
		link.Close()
		if err != nil {
			return fmt.Errorf("from %s: %w", link.From(), err)
		}
		who, err := netsim.ParseWhoami(body)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s from %s: answered by %s on %s; it saw the client as %s\n", how, link.From(), who.Pod, who.Node, describe(live, who.Client))
	}
	return nil
}

// fetch gets url through the SOCKS5 proxy, with curl if it is installed.
func fetch(socks, url string) (body, how string, err error) {
	if curl, err := exec.LookPath("curl"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, "-sS", "--socks5-hostname", socks, url).Output()
		return string(out), "curl", err
	}
	d, err := proxy.SOCKS5("tcp", socks, nil, proxy.Direct)
	if err != nil {
		return "", "", err
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}, Timeout: 30 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), "Go", err
}

// describe names the owner of the source address a backend saw.
func describe(live *scenario.Live, client string) string {
	ap, err := netip.ParseAddrPort(client)
	if err != nil {
		return client
	}
	c := live.Cluster()
	for _, n := range c.Nodes() {
		if n.IsLocalAddr(ap.Addr()) {
			return fmt.Sprintf("%s, node %s's address (masqueraded)", ap.Addr(), n.Name())
		}
	}
	for _, p := range c.Pods() {
		if p.IP() == ap.Addr() {
			return fmt.Sprintf("%s, pod %s's own address", ap.Addr(), p.Key())
		}
	}
	return ap.Addr().String()
}
