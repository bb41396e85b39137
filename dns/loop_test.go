package dns

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// TestServeDetectsForwardingLoop: dns serve with --upstream at its own address stops at
// once with an input error naming the loop, instead of forwarding its own queries to
// itself (one query used to become thousands of upstream queries and sockets).
func TestServeDetectsForwardingLoop(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.5, ports: [{port: 80}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A free port for both the server and its upstream: a UDP port found free may be
	// taken for TCP by another test's process, so a bind failure picks another.
	for try := 0; ; try++ {
		l, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.LocalAddr().String()
		l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = Serve(ctx, ServeConfig{Manifests: []string{dir}, Listen: addr, Upstream: addr})
		cancel()
		if err != nil && strings.Contains(err.Error(), "address already in use") && try < 10 {
			continue
		}
		if err == nil || !IsInputError(err) || !strings.Contains(err.Error(), "a forwarding loop") {
			t.Fatalf("Serve with itself upstream: %v, want an input error about the loop", err)
		}
		return
	}
}

// TestUpstreamInFlightCap: beyond its cap the limited upstream refuses at once rather
// than opening more exchanges.
func TestUpstreamInFlightCap(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 8)
	var mu sync.Mutex
	inFlight, most := 0, 0
	slow := UpstreamFunc(func(ctx context.Context, req *mdns.Msg, _ string) (*mdns.Msg, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
		return req, nil
	})
	l := newLimitedUpstream(slow, 4)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Exchange(context.Background(), new(mdns.Msg), "udp")
		}()
	}
	for i := 0; i < 4; i++ {
		<-entered // all four hold their slots, inside the upstream
	}
	if _, err := l.Exchange(context.Background(), new(mdns.Msg), "udp"); !errors.Is(err, errUpstreamBusy) {
		t.Errorf("the fifth exchange: %v, want it refused", err)
	}
	close(release)
	wg.Wait()
	if most != 4 {
		t.Errorf("at most %d in flight, want 4", most)
	}
	if _, err := l.Exchange(context.Background(), new(mdns.Msg), "udp"); err != nil {
		t.Errorf("after they finished: %v", err)
	}
}
