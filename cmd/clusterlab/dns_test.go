package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// lineWriter hands each written chunk to a channel.
type lineWriter struct {
	mu sync.Mutex
	ch chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.ch <- string(p):
	default:
	}
	return len(p), nil
}

// TestDNSServeCommand runs `dns serve` in-process on an ephemeral port,
// queries it, and stops it through its context.
func TestDNSServeCommand(t *testing.T) {
	cmd := newDNSServeCmd()
	out := &lineWriter{ch: make(chan string, 4)}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs([]string{"--manifests", "../../testdata/dns/cluster.yaml", "--listen", "127.0.0.1:0",
		"--zone", "cluster.local", "--zone", "0.10.in-addr.arpa", "--pods", "verified", "--ttl", "30"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var line string
	select {
	case line = <-out.ch:
	case err := <-done:
		t.Fatalf("dns serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no status line")
	}
	m := regexp.MustCompile(`^clusterlab dns: serving cluster\.local \(0\.10\.in-addr\.arpa\) from \d+ objects on (127\.0\.0\.1:\d+) udp\+tcp\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("status line %q", line)
	}
	q := new(mdns.Msg)
	q.SetQuestion("10-240-0-1.podns.pod.cluster.local.", mdns.TypeA)
	resp, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(q, m[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Answer) != 1 || !strings.HasSuffix(resp.Answer[0].String(), "30\tIN\tA\t10.240.0.1") {
		t.Errorf("answer %v, want the verified pod record with TTL 30", resp.Answer)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("after cancel: %v", err)
	}
}

func TestDNSServeBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--manifests", "../../testdata/dns/nonexistent.yaml", "--listen", "127.0.0.1:0"},
		{"--manifests", "../../testdata/dns/cluster.yaml", "--listen", "127.0.0.1:0", "--pods", "sometimes"},
		{"--listen", "127.0.0.1:0"},
	} {
		cmd := newDNSServeCmd()
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetOut(&lineWriter{ch: make(chan string, 1)})
		err := cmd.ExecuteContext(context.Background())
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
	}
}
