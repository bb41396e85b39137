package vmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBinary is a package's test binary, cross-built for the guest.
type TestBinary struct {
	Pkg  string // import path
	Dir  string // the package's directory on the host (and in the guest)
	Data []byte // the static binary
	Hash string // of Data, 12 hex digits
}

var testBinaries = struct {
	sync.Mutex
	m map[string]*TestBinary
}{m: map[string]*TestBinary{}}

// BuildTestBinary builds pkg's test binary (`go test -c`, CGO_ENABLED=0 so that it is
// static) once per process; pkg is an import path or a directory ("./kernel",
// relative to the calling test's directory). The go tool's build cache makes a
// repeated build a link.
func BuildTestBinary(ctx context.Context, pkg string) (*TestBinary, error) {
	testBinaries.Lock()
	defer testBinaries.Unlock()
	if tb := testBinaries.m[pkg]; tb != nil {
		return tb, nil
	}
	goBin, err := goTool()
	if err != nil {
		return nil, err
	}
	list := exec.CommandContext(ctx, goBin, "list", "-f", "{{.ImportPath}}\t{{.Dir}}", pkg)
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %v", pkg, errText(err))
	}
	imp, dir, ok := strings.Cut(strings.TrimSpace(string(out)), "\t")
	if !ok || strings.Contains(dir, "\n") {
		return nil, fmt.Errorf("go list %s: want one package, got %q", pkg, out)
	}
	tmp, err := os.MkdirTemp("", "clusterlab-vmtest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "pkg.test")
	cmd := exec.CommandContext(ctx, goBin, "test", "-c", "-o", bin, imp)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the test binary of %s: %v\n%s", imp, err, b)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("%s has no test files? %w", imp, err)
	}
	sum := sha256.Sum256(data)
	tb := &TestBinary{Pkg: imp, Dir: dir, Data: data, Hash: hex.EncodeToString(sum[:6])}
	testBinaries.m[pkg] = tb
	return tb, nil
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return err.Error()
}

// GoTestRun is one run of a test binary in the guest.
type GoTestRun struct {
	Name string   // the subtest's name (default: the package's last element)
	Pkg  string   // as for BuildTestBinary
	Args []string // the binary's arguments ("-test.run=^TestX$", "-test.v")
	Env  []string // added to the guest's environment ("CLUSTERLAB_DIFFFUZZ_BACKEND=legacy")
	// Timeout kills the run in the guest after this long (default: none; the boot's
	// timeout ends everything).
	Timeout time.Duration
}

// GoTestResult is what a run gave: its output lines and exit status.
type GoTestResult struct {
	Run     GoTestRun
	Output  []string
	Exit    int    // -1: killed or not started (Fatal says why)
	Fatal   string // the agent's reason it could not run or finish it
	Left    []string
	Elapsed string // in the guest
	Ran     bool   // the case's closing result came back
}

// Passed reports whether the run exited 0 and left nothing behind.
func (r *GoTestResult) Passed() bool {
	return r.Ran && r.Exit == 0 && r.Fatal == "" && len(r.Left) == 0
}

// guestBinDir is where test binaries are put in the guest.
const guestBinDir = "/clusterlab/tests"

// GoTestConfig fills the defaults a boot running test binaries needs into cfg:
// GoTestModules, GoTestTools and GoTestHostPaths when cfg has none of its own, and
// 1536M of memory (the initramfs, test binaries included, is unpacked into RAM).
func GoTestConfig(cfg Config) Config {
	if cfg.Modules == nil {
		cfg.Modules = GoTestModules
	}
	if cfg.Tools == nil {
		cfg.Tools = GoTestTools
	}
	if cfg.HostPaths == nil {
		cfg.HostPaths = GoTestHostPaths
	}
	if cfg.Memory == "" {
		cfg.Memory = "1536M"
	}
	return cfg
}

// RunGoTestsBoot boots k once and runs every run in order (each a case of one plan):
// each package's test binary is built, put in the image with the package's testdata/
// at the package's own path (the binary's working directory, as under `go test`), and
// the tools and modules of cfg (GoTestConfig's defaults). Each binary runs with
// -test.timeout (the run's Timeout, else the boot's) unless its Args give one.
func RunGoTestsBoot(ctx context.Context, k *Kernel, runs []GoTestRun, cfg Config) (*Boot, []*GoTestResult, error) {
	cfg = GoTestConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = 4 * time.Minute
	}
	var plan Plan
	results := make([]*GoTestResult, len(runs))
	seen := map[string]bool{}
	names := map[string]bool{}
	for i, r := range runs {
		tb, err := BuildTestBinary(ctx, r.Pkg)
		if err != nil {
			return nil, nil, err
		}
		guestBin := fmt.Sprintf("%s/%s-%s.test", guestBinDir, filepath.Base(tb.Pkg), tb.Hash)
		if !seen[guestBin] {
			seen[guestBin] = true
			cfg.Files = append(cfg.Files, File{Path: guestBin, Mode: 0o755, Data: tb.Data})
			if td := filepath.Join(tb.Dir, "testdata"); fileExists(td) {
				cfg.HostPaths = append(append([]string{}, cfg.HostPaths...), td)
			}
		}
		if r.Name == "" {
			r.Name = filepath.Base(tb.Pkg)
		}
		for n := 2; names[r.Name]; n++ {
			r.Name = fmt.Sprintf("%s#%d", strings.TrimRight(r.Name, "#0123456789"), n)
		}
		names[r.Name] = true
		args := append([]string{}, r.Args...)
		hasTimeout := false
		for _, a := range args {
			hasTimeout = hasTimeout || strings.HasPrefix(a, "-test.timeout")
		}
		limit := r.Timeout
		if limit == 0 {
			limit = cfg.Timeout
		}
		if !hasTimeout {
			args = append(args, "-test.timeout="+limit.String())
		}
		g := &GoTest{Binary: guestBin, Dir: tb.Dir, Args: args, Env: r.Env}
		if r.Timeout > 0 {
			g.Timeout = int((r.Timeout + 10*time.Second) / time.Second) // after -test.timeout's own report
		}
		plan.Cases = append(plan.Cases, Case{Name: r.Name, Kind: KindGoTest, GoTest: g})
		results[i] = &GoTestResult{Run: r, Exit: -1}
	}
	b, err := Run(ctx, k, plan, cfg)
	if b != nil {
		for i, c := range plan.Cases {
			for _, res := range b.CaseResults(c.Name) {
				if res.Done {
					results[i].Ran = true
					results[i].Exit, results[i].Fatal, results[i].Left, results[i].Elapsed = res.Exit, res.Fatal, res.Leftover, res.Elapsed
					continue
				}
				results[i].Output = append(results[i].Output, res.Output)
			}
		}
	}
	return b, results, err
}

// RunGoTests runs test binaries in one boot of the VM as subtests of t: each run is a
// subtest that fails, showing the guest's output, when the binary fails in the guest
// (or leaves a namespace behind), and logs its output with -v otherwise. t skips with
// the reason when no VM can be booted here (Require). The boot's kernel release and
// times are logged.
func RunGoTests(t *testing.T, runs []GoTestRun, cfg Config) *Boot {
	t.Helper()
	k := Require(t)
	b, results, err := RunGoTestsBoot(context.Background(), k, runs, cfg)
	if b != nil {
		t.Logf("kernel %s, boot %v (agent ready after %s, modules %d), image cached %v",
			b.Booted.Release, b.Elapsed.Round(100*time.Millisecond), b.Booted.Elapsed, len(b.Booted.Modules), b.Image != nil && b.Image.Cached)
		if b.Retried != "" {
			t.Logf("booted twice: the first kernel died before the agent ran:\n%s", b.Retried)
		}
	}
	if results == nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Run(r.Run.Name, func(t *testing.T) {
			out := strings.Join(r.Output, "\n")
			switch {
			case !r.Ran:
				t.Errorf("the run did not finish in the guest (%v); its output:\n%s", err, out)
			case !r.Passed():
				t.Errorf("in the guest: %s %s: exit %d%s%s (%s); its output:\n%s", r.Run.Pkg, strings.Join(r.Run.Args, " "), r.Exit,
					cond(r.Fatal != "", ", "+r.Fatal), cond(len(r.Left) > 0, fmt.Sprintf(", left behind %q", r.Left)), r.Elapsed, out)
			case testing.Verbose():
				t.Logf("in the guest (%s):\n%s", r.Elapsed, out)
			default:
				t.Logf("passed in the guest (%s)", r.Elapsed)
			}
		})
	}
	if err != nil && !t.Failed() {
		t.Error(err)
	}
	return b
}

// RunGoTest runs one package's test binary in the VM with args (RunGoTests with one
// run and the default Config).
func RunGoTest(t *testing.T, pkg string, args ...string) *Boot {
	t.Helper()
	return RunGoTests(t, []GoTestRun{{Pkg: pkg, Args: args}}, Config{})
}

func cond(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}
