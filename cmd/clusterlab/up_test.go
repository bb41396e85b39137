package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/net/proxy"
)

// syncBuffer is an io.Writer whose contents can be read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `clusterlab up` prints what it opened, a real SOCKS5 client reaches the Service by
// name through it, and cancelling (as Ctrl-C does) stops it with exit 0.
func TestUpCommand(t *testing.T) {
	resetUpFlags(t)
	out := &syncBuffer{}
	rootCmd.SetOut(out)
	rootCmd.SetErr(out)
	defer rootCmd.SetOut(nil)
	defer rootCmd.SetErr(nil)
	pcap := filepath.Join(t.TempDir(), "up.pcapng")
	rootCmd.SetArgs([]string{"up", "../../testdata/scenarios/quickstart.yaml", "--dns", "127.0.0.1:0", "--socks", "127.0.0.1:0", "--http-proxy", "127.0.0.1:0", "--pcap", pcap})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rootCmd.ExecuteContext(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "Ctrl-C stops it.") {
		select {
		case err := <-done:
			t.Fatalf("up exited: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no summary:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond) // waiting for a real program's output
	}
	text := out.String()
	for _, want := range []string{`cluster "quickstart" up: kube-proxy iptables`, "service default/web ClusterIP", "DNS on 127.0.0.1:", "resolvectl dns IFACE", "HTTP proxy on 127.0.0.1:", "(the scenario's 4 steps are not run"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	m := regexp.MustCompile(`SOCKS5 proxy on (127\.0\.0\.1:\d+), connections from external:local`).FindStringSubmatch(text)
	if m == nil {
		cancel()
		t.Fatalf("no SOCKS5 line:\n%s", text)
	}
	d, err := proxy.SOCKS5("tcp", m[1], nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}, Timeout: 30 * time.Second}
	resp, err := hc.Get("http://web.default.svc.cluster.local/")
	if err != nil {
		t.Errorf("through the SOCKS5 proxy: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(body), "pod=default/web-") {
			t.Errorf("answer %q, want a web pod's", body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("up did not stop")
	}
	// The capture holds the connection: the pcapng file has the ClusterIP in it.
	if b, err := os.ReadFile(pcap); err != nil || !bytes.Contains(b, []byte{10, 106, 83, 202}) {
		t.Errorf("pcap %s: %d bytes, %v; want the ClusterIP 10.106.83.202 in it", pcap, len(b), err)
	}
	if !strings.HasSuffix(out.String(), "stopping\n") {
		t.Errorf("output ends %q, want stopping", out.String()[max(0, len(out.String())-40):])
	}
}

// resetUpFlags sets up's flags back to their defaults (rootCmd keeps them between
// executions in one test binary).
func resetUpFlags(t *testing.T) {
	cmd, _, err := rootCmd.Find([]string{"up"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			sv.Replace(nil)
		} else {
			f.Value.Set(f.DefValue)
		}
		f.Changed = false
	})
}

func TestUpBadInput(t *testing.T) {
	defer resetUpFlags(t)
	for _, args := range [][]string{
		{"up", "../../testdata/scenarios/nonexistent.yaml"},
		{"up", "../../testdata/scenarios/quickstart.yaml", "--socks", "localhost"},
		{"up", "../../testdata/scenarios/quickstart.yaml", "--mode", "ebpf"},
		{"up", "../../testdata/scenarios/quickstart.yaml", "--from", "pod:default/nosuch", "--dns", ""},
		{"up", "../../testdata/scenarios/quickstart.yaml", "--routes", "10.96.0.0/12"},
		{"up", "../../testdata/scenarios/quickstart.yaml", "--tun", "--routes", "10.96.0.0"},
	} {
		rootCmd.SetArgs(args)
		rootCmd.SetOut(io.Discard)
		rootCmd.SetErr(io.Discard)
		err := rootCmd.ExecuteContext(context.Background())
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
	}
	rootCmd.SetOut(nil)
	rootCmd.SetErr(nil)
}
