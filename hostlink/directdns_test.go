package hostlink

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// With dns: direct (no kube-dns in the network) the DNS port is not opened, and says
// why, but the SOCKS5 proxy still resolves names, in-process, for an external host.
func TestDirectDNS(t *testing.T) {
	b, err := os.ReadFile("testdata/web.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "direct.yaml")
	text := strings.Replace(string(b), "cluster:\n", "cluster:\n  dns: direct\n", 1)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, k := startLive(t, file, "iptables", "")
	if k.DNSAddr.IsValid() {
		t.Errorf("DNS served on %s with dns: direct", k.DNSAddr)
	}
	if got := strings.Join(k.Opened(), "\n"); !strings.Contains(got, "DNS not served: the scenario's cluster DNS is direct") {
		t.Errorf("Opened() does not say why DNS is not served:\n%s", got)
	}
	d, _ := proxy.SOCKS5("tcp", k.SOCKSAddr.String(), nil, proxy.Direct)
	hc := &http.Client{Transport: &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}, Timeout: 30 * time.Second}
	w, err := httpWhoami(hc, "http://web.default.svc.cluster.local/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(w.Pod, "default/web-") {
		t.Errorf("answered by %q", w.Pod)
	}
}
