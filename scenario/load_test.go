package scenario

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const smallScenario = `name: small
cluster:
  seed: 7
  nodes:
    - name: node-a
      zone: z1
    - name: node-b
  proxy:
    mode: iptables
manifests:
  - apiVersion: v1
    kind: Service
    metadata:
      name: web
    spec:
      selector: {app: web}
      ports:
        - port: 80
          targetPort: 8080
  - apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
    spec:
      replicas: 2
      selector:
        matchLabels: {app: web}
      template:
        metadata:
          labels: {app: web}
        spec:
          containers:
            - name: web
              image: nginx
              ports:
                - containerPort: 8080
steps:
  - connect:
      from: pod:default/client
      to: web:80
      count: 5
    expect:
      result: connected
      backends: 2
  - advance: 10s
`

func TestParseMarshalRoundTrip(t *testing.T) {
	s, err := Parse("small.yaml", []byte(smallScenario))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Steps) != 2 || s.Steps[0].Connect.Count != 5 || *s.Steps[0].Expect.Backends != 2 || s.Steps[1].Advance.D().String() != "10s" {
		t.Fatalf("decoded %+v", s.Steps)
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Parse("again.yaml", out)
	if err != nil {
		t.Fatalf("marshalled scenario does not parse: %v\n%s", err, out)
	}
	opts := []cmp.Option{cmpopts.IgnoreUnexported(Scenario{}, Manifest{}), cmpopts.IgnoreFields(Scenario{}, "File", "Dir", "Manifests")}
	if d := cmp.Diff(s, s2, opts...); d != "" {
		t.Errorf("round trip changed the scenario:\n%s", d)
	}
	if !strings.Contains(string(out), "kind: Deployment") {
		t.Errorf("inline objects lost:\n%s", out)
	}
}
