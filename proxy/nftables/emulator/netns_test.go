package emulator

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// newNetns creates a throwaway network namespace for the test and deletes it when the
// test ends; it skips the test when not root or when ip or nft is missing.
func newNetns(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and loads rules into it with nft")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	name := strings.NewReplacer("/", "-", " ", "-").Replace(fmt.Sprintf("nftemu-%s-%d", t.Name(), os.Getpid()))
	if len(name) > 60 {
		name = name[:60]
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
