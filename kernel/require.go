package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// Linux capability bits, as in include/uapi/linux/capability.h.
const (
	capNetAdmin = 12
	capSysAdmin = 21
)

// HarnessSupported says why a Harness cannot be built here, or nil if it can: it needs
// Linux, CAP_SYS_ADMIN and CAP_NET_ADMIN (root), and the ip tool (iproute2).
func HarnessSupported() error {
	if runtime.GOOS != "linux" {
		return errors.New("network namespaces need Linux, this is " + runtime.GOOS)
	}
	if err := haveCaps(capSysAdmin, capNetAdmin); err != nil {
		return err
	}
	if !HaveTool("ip") {
		return errors.New("the ip tool (iproute2) is not installed")
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return fmt.Errorf("no network namespace support: %w", err)
	}
	return nil
}

// haveCaps checks the effective capability set in /proc/self/status.
func haveCaps(bits ...uint) error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("cannot read capabilities: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return fmt.Errorf("cannot parse CapEff %q: %w", v, err)
		}
		for _, bit := range bits {
			if caps&(1<<bit) == 0 {
				names := map[uint]string{capNetAdmin: "CAP_NET_ADMIN", capSysAdmin: "CAP_SYS_ADMIN"}
				return fmt.Errorf("needs root: %s missing (uid %d)", names[bit], os.Geteuid())
			}
		}
		return nil
	}
	return errors.New("cannot find CapEff in /proc/self/status")
}

// RequireHarness skips the test unless a Harness can be built here.
func RequireHarness(t testing.TB) {
	t.Helper()
	if err := HarnessSupported(); err != nil {
		t.Skip("kernel harness unavailable: " + err.Error())
	}
}

// RequireRoot skips the test unless the process has CAP_NET_ADMIN and CAP_SYS_ADMIN.
func RequireRoot(t testing.TB) {
	t.Helper()
	if err := haveCaps(capSysAdmin, capNetAdmin); err != nil {
		t.Skip(err.Error())
	}
}

// RequireTools skips the test unless every named tool is installed.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if !HaveTool(tool) {
			t.Skipf("%s is not installed", tool)
		}
	}
}

// RequireIPVS skips the test unless the kernel has IPVS, with CheckIPVS's reason.
func RequireIPVS(t testing.TB) {
	t.Helper()
	if err := CheckIPVS(); err != nil {
		t.Skip(err.Error())
	}
}

// testNetnsPrefix starts the names of NewTestNetns's namespaces: cltmp<pid>-<n>-ns, so
// that a later run deletes those of a crashed one (removeStaleNetns).
const testNetnsPrefix = "cltmp"

var testNetnsSeq atomic.Int64

// NewTestNetns makes an empty network namespace for a test or benchmark (only lo, down;
// no links, rules or addresses) and returns its name, for adapters such as NFTables that
// need nothing more. The namespace is deleted when tb ends; tb skips when namespaces
// cannot be made here (HarnessSupported). Leftovers of crashed runs are removed first.
func NewTestNetns(tb testing.TB) string {
	tb.Helper()
	RequireHarness(tb)
	ctx := context.Background()
	removeStaleNetns(ctx, execRunner{}, netnsDir, testNetnsPrefix)
	name := fmt.Sprintf("%s%d-%d-ns", testNetnsPrefix, os.Getpid(), testNetnsSeq.Add(1))
	registerNetns(name) // for the signal handler and the reaper (cleanup.go)
	c := command{argv: []string{"ip", "netns", "add", name}}
	if ce := commandError(c, execRunner{}.run(ctx, c)); ce != nil {
		unregisterNetns(name)
		tb.Fatal(ce)
	}
	tb.Cleanup(func() {
		c := command{argv: []string{"ip", "netns", "del", name}}
		if ce := commandError(c, execRunner{}.run(context.Background(), c)); ce != nil {
			tb.Errorf("delete namespace %s: %v", name, ce)
		} else {
			unregisterNetns(name)
		}
		if _, err := os.Stat(filepath.Join(netnsDir, name)); !errors.Is(err, os.ErrNotExist) {
			tb.Errorf("namespace %s still exists (stat: %v)", name, err)
		}
	})
	return name
}
