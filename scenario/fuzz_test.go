package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParse: Parse never panics, and a scenario it accepts marshals to text it accepts
// again.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../testdata/scenarios/*.yaml")
	for _, p := range append(files, "demo.yaml") {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(smallScenario))
	f.Add([]byte(faultsScenario))
	f.Add([]byte("steps:\n  - connect: {from: pod:a, to: 'b:1'}\n"))
	f.Add([]byte("cluster: {nodes: [{name: x, labels: {a: b}}]}\nsteps: [{at: 1s, heal: true}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		watchdog := time.AfterFunc(2*time.Second, func() { panic(fmt.Sprintf("Parse hangs on %q", data)) })
		defer watchdog.Stop()
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !IsInputError(err) {
				t.Fatalf("error %v is not an input error", err)
			}
			return
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if _, err := Parse("again.yaml", out); err != nil {
			t.Fatalf("accepted, marshalled, rejected: %v\n--- input\n%s\n--- marshalled\n%s", err, data, out)
		}
	})
}
