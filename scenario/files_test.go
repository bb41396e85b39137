package scenario

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestScenarioFilesPass: every scenario under testdata/scenarios passes, as
// `clusterlab run FILE` would run it.
func TestScenarioFilesPass(t *testing.T) {
	files, err := filepath.Glob("../testdata/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Run(context.Background(), s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Passed {
				var b strings.Builder
				rep.WriteText(&b)
				t.Errorf("%s failed:\n%s", f, b.String())
			}
		})
	}
}
