package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad host_services are errors naming the file, the line and the field.
func TestHostServicesErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, yaml, want string }{
		{"missing address", "host_services:\n  - name: api\n", "bad.yaml:2: host_services[0].address: required"},
		{"no port", "host_services:\n  - address: 192.0.2.10\n", `bad.yaml:2: host_services[0].address: want IP:PORT with a port of 1-65535, got "192.0.2.10"`},
		{"port 0", "host_services:\n  - address: 192.0.2.10:0\n", `host_services[0].address: want IP:PORT with a port of 1-65535`},
		{"in the service CIDR", "host_services:\n  - address: 10.96.5.5:80\n", "bad.yaml:2: host_services[0].address: 10.96.5.5 is inside cluster.service_cidr (10.96.0.0/12)"},
		{"in a changed pod CIDR", "cluster:\n  pod_cidr: 192.0.0.0/16\nhost_services:\n  - address: 192.0.2.10:80\n", "bad.yaml:4: host_services[0].address: 192.0.2.10 is inside cluster.pod_cidr (192.0.0.0/16)"},
		{"loopback", "host_services:\n  - address: 127.0.0.1:80\n", "host_services[0].address: 127.0.0.1 is not a usable unicast address"},
		{"twice", "host_services:\n  - address: 192.0.2.10:80\n  - address: 192.0.2.10:80\n", "bad.yaml:3: host_services[1].address: 192.0.2.10:80 is listed twice (host_services[0])"},
		{"bad target", "host_services:\n  - address: 192.0.2.10:80\n    target: localhost\n", `bad.yaml:3: host_services[0].target: want HOST:PORT of the real server, got "localhost"`},
		{"bad target port", "host_services:\n  - address: 192.0.2.10:80\n    target: localhost:99999\n", `host_services[0].target: want a port of 1-65535, got "99999"`},
		{"an external host's address", "cluster:\n  external_hosts: [{name: laptop, ip: 192.0.2.10}]\nhost_services:\n  - address: 192.0.2.10:80\n", "host_services[0].address: 192.0.2.10 is the address of cluster.external_hosts[0] (laptop)"},
		{"an external host's name", "cluster:\n  external_hosts: [{name: host-services}]\nhost_services:\n  - address: 192.0.2.10:80\n", `bad.yaml:2: cluster.external_hosts[0].name: "host-services" is the name of the host that owns host_services' addresses`},
		{"unknown field", "host_services:\n  - address: 192.0.2.10:80\n    port: 80\n", "bad.yaml:3: host_services[0].port: unknown field"},
	} {
		file := filepath.Join(dir, "bad.yaml")
		os.WriteFile(file, []byte(tc.yaml), 0o644)
		s, err := Load(file)
		if err == nil {
			_, err = s.prepare("")
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.name, err, tc.want)
		}
	}
}
