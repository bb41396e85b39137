package dns

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

const serveManifest = `apiVersion: v1
kind: Service
metadata: {name: my-service, namespace: default}
spec:
  clusterIP: 10.96.7.7
  ports: [{name: http, port: 80}]
`

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

type serveRun struct {
	udp, tcp string
	tick     chan time.Time
	reloads  chan error
	log      *syncBuffer
	done     chan error
}

// startServe runs Serve in the background on an ephemeral port.
func startServe(t *testing.T, manifests ...string) *serveRun {
	t.Helper()
	return startServeWith(t, nil, manifests...)
}

// startServeWith is startServe with the configuration changed by mutate first.
func startServeWith(t *testing.T, mutate func(*ServeConfig), manifests ...string) *serveRun {
	t.Helper()
	r := &serveRun{tick: make(chan time.Time), reloads: make(chan error, 10), log: &syncBuffer{}, done: make(chan error, 1)}
	listening := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cfg := ServeConfig{
		Manifests: manifests,
		Listen:    "127.0.0.1:0",
		TTL:       5,
		Tick:      r.tick,
		Log:       r.log,
		OnListen: func(u, tc net.Addr) {
			r.udp, r.tcp = u.String(), tc.String()
			close(listening)
		},
		OnReload: func(err error) { r.reloads <- err },
	}
	if mutate != nil {
		mutate(&cfg)
	}
	go func() { r.done <- Serve(ctx, cfg) }()
	select {
	case <-listening:
	case err := <-r.done:
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Serve returned %v after cancel", err)
		}
	})
	return r
}

// reload triggers one poll and waits for the reload it causes.
func (r *serveRun) reload(t *testing.T) error {
	t.Helper()
	r.tick <- time.Now()
	select {
	case err := <-r.reloads:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("no reload")
		return nil
	}
}

func (r *serveRun) a(t *testing.T, name string) []string {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, mdns.TypeA)
	var out []string
	for _, rr := range exchange(t, "udp", r.udp, m).Answer {
		if a, ok := rr.(*mdns.A); ok {
			out = append(out, a.A.String())
		}
	}
	tcp := exchange(t, "tcp", r.tcp, m)
	if len(tcp.Answer) != len(out) {
		t.Errorf("TCP answer %v differs from UDP %v", tcp.Answer, out)
	}
	return out
}

// writeFile replaces path's content atomically (a temporary file renamed over
// it), so that a poll still in flight from the previous tick sees the old or
// the new content, never a half-written file.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestServeReloadsFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "svc.yaml")
	writeFile(t, file, serveManifest)
	r := startServe(t, file)
	if !strings.Contains(r.log.String(), "clusterlab dns: serving cluster.local (in-addr.arpa ip6.arpa) from 1 objects on "+r.udp+" udp+tcp\n") {
		t.Errorf("status line: %q", r.log.String())
	}
	if got := r.a(t, "my-service.default.svc.cluster.local."); len(got) != 1 || got[0] != "10.96.7.7" {
		t.Fatalf("before reload: %v", got)
	}
	// An unchanged file causes no reload. The tick channel is unbuffered, so
	// the second send returns only once the first tick has been handled.
	r.tick <- time.Now()
	r.tick <- time.Now()
	if n := len(r.reloads); n != 0 {
		t.Fatalf("%d reloads without a change", n)
	}
	writeFile(t, file, strings.Replace(serveManifest, "10.96.7.7", "10.96.8.8", 1))
	if err := r.reload(t); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := r.a(t, "my-service.default.svc.cluster.local."); len(got) != 1 || got[0] != "10.96.8.8" {
		t.Fatalf("after reload: %v", got)
	}
	// A broken file keeps the previous data and logs the error with its line.
	writeFile(t, file, serveManifest+"---\napiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {clusterIP: [1]}\n")
	err := r.reload(t)
	if err == nil || !strings.Contains(err.Error(), "svc.yaml:") {
		t.Fatalf("broken reload: %v, want an error naming svc.yaml:<line>", err)
	}
	if !strings.Contains(r.log.String(), "reload failed, still serving the previous data") {
		t.Errorf("log: %q", r.log.String())
	}
	if got := r.a(t, "my-service.default.svc.cluster.local."); len(got) != 1 || got[0] != "10.96.8.8" {
		t.Fatalf("after a failed reload: %v", got)
	}
}

func TestServeDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), serveManifest)
	writeFile(t, filepath.Join(dir, "notes.txt"), "not a manifest")
	r := startServe(t, dir)
	if got := r.a(t, "other.default.svc.cluster.local."); len(got) != 0 {
		t.Fatalf("other before: %v", got)
	}
	writeFile(t, filepath.Join(dir, "b.yml"), strings.NewReplacer("my-service", "other", "10.96.7.7", "10.96.9.9").Replace(serveManifest))
	if err := r.reload(t); err != nil {
		t.Fatal(err)
	}
	if got := r.a(t, "other.default.svc.cluster.local."); len(got) != 1 || got[0] != "10.96.9.9" {
		t.Fatalf("new file in the directory: %v", got)
	}
	if err := os.Remove(filepath.Join(dir, "b.yml")); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(t); err != nil {
		t.Fatal(err)
	}
	if got := r.a(t, "other.default.svc.cluster.local."); len(got) != 0 {
		t.Fatalf("removed file still served: %v", got)
	}
}

func TestServeBadInput(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ok.yaml"), serveManifest)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: http}]\n")
	for _, tc := range []struct {
		name string
		cfg  ServeConfig
		want string
	}{
		{"bad manifest", ServeConfig{Manifests: []string{bad}, Listen: "127.0.0.1:0"}, "bad.yaml:"},
		{"missing file", ServeConfig{Manifests: []string{filepath.Join(dir, "nope.yaml")}, Listen: "127.0.0.1:0"}, "nope.yaml"},
		{"no manifests", ServeConfig{Listen: "127.0.0.1:0"}, "no manifests"},
		{"bad listen", ServeConfig{Manifests: []string{dir}, Listen: "localhost"}, "--listen"},
		{"listen port out of range", ServeConfig{Manifests: []string{dir}, Listen: ":99999"}, `--listen ":99999": port "99999": want a number from 0 to 65535`},
		{"listen port not a number", ServeConfig{Manifests: []string{dir}, Listen: "127.0.0.1:dns"}, `port "dns"`},
		{"bad zone", ServeConfig{Manifests: []string{dir}, Listen: "127.0.0.1:0", Zones: []string{"in-addr.arpa"}}, "cluster domain"},
		{"bad upstream", ServeConfig{Manifests: []string{dir}, Listen: "127.0.0.1:0", Upstream: "dns.example"}, "--upstream"},
		{"upstream port out of range", ServeConfig{Manifests: []string{dir}, Listen: "127.0.0.1:0", Upstream: "127.0.0.1:99999"}, `--upstream "127.0.0.1:99999": port "99999": want a number from 1 to 65535`},
		{"upstream port 0", ServeConfig{Manifests: []string{dir}, Listen: "127.0.0.1:0", Upstream: "127.0.0.1:0"}, `port "0"`},
		{"ttl", ServeConfig{Manifests: []string{dir}, Listen: "127.0.0.1:0", TTL: 4000}, "ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Serve(context.Background(), tc.cfg)
			if err == nil || !IsInputError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v (input error: %v), want an input error mentioning %q", err, IsInputError(err), tc.want)
			}
		})
	}
}
