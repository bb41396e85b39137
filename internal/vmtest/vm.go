package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Kernel is a bootable kernel image and the directory of its modules.
type Kernel struct {
	Image      string // /boot/vmlinuz-RELEASE
	Release    string // 6.1.0-56-amd64
	ModulesDir string // /lib/modules/RELEASE
}

// Environment variables that steer the harness.
const (
	EnvKernel  = "CLUSTERLAB_VM_KERNEL"  // a kernel image to boot instead of the newest /boot/vmlinuz-*
	EnvCache   = "CLUSTERLAB_VM_CACHE"   // where initramfs images are kept (default: the user cache dir)
	EnvAccel   = "CLUSTERLAB_VM_ACCEL"   // QEMU's -accel (default tcg: no nested KVM here)
	EnvConsole = "CLUSTERLAB_VM_CONSOLE" // a file to copy every boot's console output to
)

// FindKernel finds the kernel to boot: $CLUSTERLAB_VM_KERNEL, or the newest
// /boot/vmlinuz-RELEASE that has /lib/modules/RELEASE/modules.dep (Debian's
// linux-image-amd64 installs both; the running kernel is not involved).
func FindKernel() (*Kernel, error) {
	if img := os.Getenv(EnvKernel); img != "" {
		rel := strings.TrimPrefix(filepath.Base(img), "vmlinuz-")
		k := &Kernel{Image: img, Release: rel, ModulesDir: filepath.Join("/lib/modules", rel)}
		if _, err := os.Stat(filepath.Join(k.ModulesDir, "modules.dep")); err != nil {
			return nil, fmt.Errorf("%s=%s: no modules for release %q: %w", EnvKernel, img, rel, err)
		}
		return k, nil
	}
	imgs, _ := filepath.Glob("/boot/vmlinuz-*")
	var found []*Kernel
	for _, img := range imgs {
		rel := strings.TrimPrefix(filepath.Base(img), "vmlinuz-")
		dir := filepath.Join("/lib/modules", rel)
		if _, err := os.Stat(filepath.Join(dir, "modules.dep")); err == nil {
			found = append(found, &Kernel{Image: img, Release: rel, ModulesDir: dir})
		}
	}
	if len(found) == 0 {
		return nil, errors.New("no kernel image with modules (/boot/vmlinuz-R and /lib/modules/R/modules.dep; apt-get install linux-image-amd64)")
	}
	sort.Slice(found, func(i, j int) bool { return versionLess(found[i].Release, found[j].Release) })
	return found[len(found)-1], nil
}

// versionLess orders releases like 6.1.0-56-amd64 by their numbers.
func versionLess(a, b string) bool {
	na, nb := releaseNumbers(a), releaseNumbers(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	if len(na) != len(nb) {
		return len(na) < len(nb)
	}
	return a < b
}

func releaseNumbers(s string) []int {
	var out []int
	n, in := 0, false
	for _, r := range s + "." {
		if r >= '0' && r <= '9' {
			n, in = n*10+int(r-'0'), true
			continue
		}
		if in {
			out = append(out, n)
		}
		n, in = 0, false
	}
	return out
}

// Supported says why a VM cannot be booted here, or returns the kernel it would boot:
// it needs linux/amd64, root (Debian's kernel images are readable by root only, and the
// guest's namespaces are built as root), qemu-system-x86_64, the go tool (the agent is
// built at test time), busybox (static) and a kernel with modules.
func Supported() (*Kernel, error) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("the VM harness boots x86-64 Linux kernels on linux/amd64, this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root (the kernel image under /boot is readable by root only), uid %d", os.Geteuid())
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, errors.New("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
	if _, err := goTool(); err != nil {
		return nil, err
	}
	if _, err := findBusybox(); err != nil {
		return nil, err
	}
	k, err := FindKernel()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(k.Image)
	if err != nil {
		return nil, fmt.Errorf("kernel image: %w", err)
	}
	f.Close()
	return k, nil
}

func goTool() (string, error) {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p, nil
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("the go tool is not found (the guest agent is built at test time)")
	}
	return p, nil
}

func findBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if !fileExists(p) {
			continue
		}
		f, err := elf.Open(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if !static {
			return "", fmt.Errorf("%s is dynamically linked (apt-get install busybox-static)", p)
		}
		return p, nil
	}
	return "", errors.New("busybox is not installed (apt-get install busybox-static)")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// IPVSModules are the modules the IPVS tests load: ip_vs with every scheduler the
// kernel has (twos only exists from Linux 6.2 on), conntrack and NAT, and the links the
// guest's namespaces use.
var IPVSModules = []string{"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_wlc", "ip_vs_sed", "ip_vs_nq",
	"ip_vs_dh", "ip_vs_sh", "ip_vs_mh", "ip_vs_lblc", "ip_vs_lblcr", "ip_vs_fo", "ip_vs_ovf", "ip_vs_twos",
	"nf_conntrack", "nf_nat", "veth", "dummy"}

// modDep is a kernel's modules.dep: module name (dashes as underscores) to its file and
// the files it depends on, as depmod wrote them.
type modDep struct {
	dir   string
	path  map[string]string   // name -> kernel/net/netfilter/ipvs/ip_vs.ko
	deps  map[string][]string // file -> files it needs (transitively, depmod's order)
	alias map[string][]string // modules.alias: plain aliases (crc32c) -> module names
}

func readModDep(dir string) (*modDep, error) {
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	md := &modDep{dir: dir, path: map[string]string{}, deps: map[string][]string{}, alias: map[string][]string{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			return nil, fmt.Errorf("%s/modules.dep:%d: no colon", dir, n)
		}
		md.path[moduleName(file)] = file
		md.deps[file] = strings.Fields(rest)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Aliases without wildcards, for soft dependencies named by alias (libcrc32c's
	// "pre: crc32c").
	if b, err := os.ReadFile(filepath.Join(dir, "modules.alias")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) == 3 && f[0] == "alias" && !strings.ContainsAny(f[1], "*?[") {
				md.alias[f[1]] = append(md.alias[f[1]], strings.ReplaceAll(f[2], "-", "_"))
			}
		}
	}
	return md, nil
}

// softPre returns the "softdep=pre:" modules a module file names in its .modinfo
// section (modprobe loads them first; libcrc32c needs a crc32c implementation).
func (md *modDep) softPre(file string) []string {
	f, err := elf.Open(filepath.Join(md.dir, file))
	if err != nil {
		return nil
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil
	}
	var out []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte("softdep="))
		if !ok {
			continue
		}
		pre := false
		for _, w := range strings.Fields(string(v)) {
			switch w {
			case "pre:":
				pre = true
			case "post:":
				pre = false
			default:
				if pre {
					out = append(out, w)
				}
			}
		}
	}
	return out
}

// moduleName turns kernel/net/netfilter/ipvs/ip_vs_rr.ko(.xz) into ip_vs_rr.
func moduleName(file string) string {
	b := filepath.Base(file)
	if i := strings.Index(b, ".ko"); i >= 0 {
		b = b[:i]
	}
	return strings.ReplaceAll(b, "-", "_")
}

// loadItem is a module file to load; an optional one (a soft dependency's candidate,
// such as crc32c_intel on a CPU without SSE4.2) may fail to load.
type loadItem struct {
	file     string
	optional bool
}

// resolve returns the files to load for the named modules, each after the modules it
// needs (hard dependencies from modules.dep, soft "pre:" ones from the module, every
// candidate of an alias, optional), and the names the kernel does not have (the caller
// decides whether that is an error: ip_vs_twos is missing before 6.2).
func (md *modDep) resolve(names []string) (items []loadItem, missing []string) {
	seen := map[string]bool{}
	var visit func(file string, optional bool)
	visit = func(file string, optional bool) {
		if seen[file] {
			return
		}
		seen[file] = true
		for _, s := range md.softPre(file) {
			cands := md.alias[s]
			if _, ok := md.path[strings.ReplaceAll(s, "-", "_")]; ok {
				cands = []string{strings.ReplaceAll(s, "-", "_")}
			}
			for _, c := range cands {
				if f, ok := md.path[c]; ok {
					visit(f, true)
				}
			}
		}
		deps := md.deps[file]
		for i := len(deps) - 1; i >= 0; i-- { // depmod lists the deepest dependency last
			visit(deps[i], optional)
		}
		items = append(items, loadItem{file, optional})
	}
	for _, n := range names {
		file, ok := md.path[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			missing = append(missing, n)
			continue
		}
		visit(file, false)
	}
	return items, missing
}

// Image is a cached initramfs: the agent as /init, busybox, the modules and the list
// of modules to load.
type Image struct {
	Path    string
	Key     string   // content hash
	Cached  bool     // found in the cache, not written by this call
	Modules []string // module names in load order
	Missing []string // asked for but not in this kernel
}

var agentBuild struct {
	sync.Mutex
	bin []byte
}

// buildAgent builds the guest agent (package vmagent) as a static binary: CGO_ENABLED=0,
// so it runs in an initramfs without a C library. The go tool's build cache makes a
// repeated build a link at most; the binary is kept in memory for the process and its
// temporary directory removed.
func buildAgent(ctx context.Context) ([]byte, error) {
	agentBuild.Lock()
	defer agentBuild.Unlock()
	if agentBuild.bin != nil {
		return agentBuild.bin, nil
	}
	goBin, err := goTool()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "clusterlab-vmagent-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "vmagent")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", out, "github.com/clusterlab/clusterlab/internal/vmtest/vmagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the guest agent: %v\n%s", err, b)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	agentBuild.bin = bin
	return bin, nil
}

// imageFormat changes when the image's layout does, so old cache entries are not used.
const imageFormat = "clusterlab-vm-initramfs-3"

// BuildImage returns the initramfs for k with the named modules (resolved with their
// dependencies from modules.dep), the agent and busybox, from the cache directory when
// an image of the same contents is there.
func BuildImage(ctx context.Context, k *Kernel, modules []string) (*Image, error) {
	return buildImage(ctx, k, Config{Modules: modules})
}

// buildImage is BuildImage for a whole Config: its modules, its host tools (with their
// libraries and the files they read), its host paths and its files. The cache key is
// a hash of every entry of the archive, so a changed test binary makes a new image.
func buildImage(ctx context.Context, k *Kernel, cfg Config) (*Image, error) {
	agent, err := buildAgent(ctx)
	if err != nil {
		return nil, err
	}
	bb, err := findBusybox()
	if err != nil {
		return nil, err
	}
	md, err := readModDep(k.ModulesDir)
	if err != nil {
		return nil, fmt.Errorf("modules of %s: %w", k.Release, err)
	}
	items, missing := md.resolve(cfg.Modules)
	tree := newCpioTree()
	add := func(name string, perm uint32, src string) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		tree.file(name, perm, b)
		return nil
	}
	tree.file("init", 0o755, agent)
	if err := add("bin/busybox", 0o755, bb); err != nil {
		return nil, err
	}
	for _, l := range []string{"sh", "ls", "cat", "ip", "insmod", "modprobe", "poweroff", "dmesg", "mount"} {
		tree.symlink("bin/"+l, "busybox")
	}
	var names []string
	var load bytes.Buffer
	for _, it := range items {
		f := it.file
		if strings.HasSuffix(f, ".ko.xz") || strings.HasSuffix(f, ".ko.zst") || strings.HasSuffix(f, ".ko.gz") {
			return nil, fmt.Errorf("module %s is compressed; the agent loads plain .ko files", f)
		}
		if err := add(filepath.Join("lib/modules", k.Release, f), 0o644, filepath.Join(k.ModulesDir, f)); err != nil {
			return nil, err
		}
		names = append(names, moduleName(f))
		if it.optional {
			load.WriteString("? ")
		}
		fmt.Fprintf(&load, "/lib/modules/%s/%s\n", k.Release, f)
	}
	tree.file("etc/modules.load", 0o644, load.Bytes())
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp"} {
		tree.dir(d)
	}
	if len(cfg.Tools) > 0 || len(cfg.HostPaths) > 0 {
		hf := newHostFiles(tree)
		for _, t := range cfg.Tools {
			if err := hf.addTool(t); err != nil {
				return nil, err
			}
		}
		for _, p := range cfg.HostPaths {
			if err := hf.add(p); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range cfg.Files {
		tree.file(strings.TrimPrefix(path.Clean(f.Path), "/"), f.Mode, f.Data)
	}
	key := tree.hash(imageFormat + "\n" + k.Release)
	dir, err := cacheDir()
	if err != nil {
		return nil, err
	}
	img := &Image{Path: filepath.Join(dir, "initramfs-"+key+".cpio"), Key: key, Modules: names, Missing: missing}
	if fileExists(img.Path) {
		img.Cached = true
		now := time.Now()
		_ = os.Chtimes(img.Path, now, now) // recently used: pruned last
		return img, nil
	}
	tmp, err := os.CreateTemp(dir, "initramfs-*.tmp")
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriter(tmp)
	if err := tree.write(bw); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	if err := errors.Join(bw.Flush(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	if err := os.Rename(tmp.Name(), img.Path); err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	pruneImages(dir, keepImages)
	return img, nil
}

// keepImages is how many initramfs images the cache keeps (each agent change makes a
// new one of some 25 MB).
const keepImages = 4

// pruneImages removes all but the keep most recently written images.
func pruneImages(dir string, keep int) {
	paths, _ := filepath.Glob(filepath.Join(dir, "initramfs-*.cpio"))
	type aged struct {
		path string
		mod  time.Time
	}
	var all []aged
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			all = append(all, aged{p, fi.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.After(all[j].mod) })
	for i := keep; i < len(all); i++ {
		os.Remove(all[i].path)
	}
}

func cacheDir() (string, error) {
	dir := os.Getenv(EnvCache)
	if dir == "" {
		if d, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(d, "clusterlab", "vm")
		} else {
			dir = filepath.Join(os.TempDir(), "clusterlab-vm")
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("VM cache directory: %w", err)
	}
	return dir, nil
}

// Config is one boot.
type Config struct {
	Modules []string      // modules to load (default IPVSModules)
	Timeout time.Duration // the whole boot (default 4 minutes)
	Memory  string        // QEMU -m (default 512M)
	// Tools are host programs to put in the image at their host paths (found in $PATH,
	// /usr/sbin or /sbin; symlinks on the way kept), each with the shared libraries it
	// needs (DT_NEEDED, resolved as the loader does) and the loader; a tool the host
	// lacks is left out. GoTestTools are those of the kernel package.
	Tools []string
	// HostPaths are host files or directories (recursively) to put in the image at the
	// same paths, ELF files with their libraries.
	HostPaths []string
	// Files are more files for the image (test binaries).
	Files []File
}

// File is a file of the image.
type File struct {
	Path string // absolute, in the guest
	Mode uint32 // permission bits
	Data []byte
}

// Boot is what a boot gave back.
type Boot struct {
	Kernel  *Kernel
	Image   *Image
	Booted  Booted   // the agent's setup report
	Results []Result // in the order printed
	Console string   // everything the serial console printed
	Elapsed time.Duration
	Retried string // the first boot's console tail when the kernel died before the agent ran
}

// CaseResults returns the results of one case, its Done result last.
func (b *Boot) CaseResults(name string) []Result {
	var out []Result
	for _, r := range b.Results {
		if r.Case == name {
			out = append(out, r)
		}
	}
	return out
}

// ConsoleTail is the console's last n lines, for failure messages.
func (b *Boot) ConsoleTail(n int) string {
	lines := strings.Split(strings.TrimRight(b.Console, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Require skips tb unless a VM can be booted here (Supported's reason), and returns
// the kernel.
func Require(tb testing.TB) *Kernel {
	tb.Helper()
	k, err := Supported()
	if err != nil {
		tb.Skip("kernel VM unavailable: " + err.Error())
	}
	return k
}

// Run boots k once with the plan: the cached initramfs plus a second archive holding
// /plan.json, under qemu-system-x86_64 with TCG, the console on the serial port. It
// returns when the agent powers the machine off; an agent that fails, a machine that
// does not end in time or a console without the end marker is an error carrying the
// console's tail.
func Run(ctx context.Context, k *Kernel, plan Plan, cfg Config) (*Boot, error) {
	if cfg.Modules == nil {
		cfg.Modules = IPVSModules
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 4 * time.Minute
	}
	if cfg.Memory == "" {
		cfg.Memory = "512M"
	}
	img, err := buildImage(ctx, k, cfg)
	if err != nil {
		return nil, err
	}
	initrd, err := withPlan(img.Path, plan)
	if err != nil {
		return nil, err
	}
	defer os.Remove(initrd)
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	b, runErr := boot(ctx, k, img, initrd, cfg)
	if b.Booted.Release == "" && ctx.Err() == nil {
		// The kernel died before the agent ran (under TCG on a loaded host its early
		// timer checks can fail): nothing of the plan ran, so boot once more.
		first := b.ConsoleTail(8)
		b, runErr = boot(ctx, k, img, initrd, cfg)
		b.Retried = first
	}
	end, fail, perr := b.parse()
	switch {
	case ctx.Err() != nil:
		return b, fmt.Errorf("the VM did not finish in %v (qemu: %v); console:\n%s", cfg.Timeout, runErr, b.ConsoleTail(40))
	case fail != "":
		return b, fmt.Errorf("the guest agent failed: %s; console:\n%s", fail, b.ConsoleTail(40))
	case perr != nil:
		return b, fmt.Errorf("%v; console:\n%s", perr, b.ConsoleTail(40))
	case !end:
		return b, fmt.Errorf("the console has no end marker (qemu: %v); console:\n%s", runErr, b.ConsoleTail(40))
	}
	return b, nil
}

// boot runs QEMU once and reads the console. no_timer_check: a TCG guest on a busy
// host can miss the IO-APIC timer check's deadline and panic ("IO-APIC + timer doesn't
// work!"), as seen here at a load average of 20.
func boot(ctx context.Context, k *Kernel, img *Image, initrd string, cfg Config) (*Boot, error) {
	accel := os.Getenv(EnvAccel)
	if accel == "" {
		accel = "tcg"
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", accel, "-m", cfg.Memory, "-smp", "1",
		"-nodefaults", "-nographic", "-serial", "stdio", "-monitor", "none", "-no-reboot",
		"-kernel", k.Image, "-initrd", initrd,
		"-append", "console=ttyS0 rdinit=/init panic=-1 quiet loglevel=3 nokaslr no_timer_check")
	var console bytes.Buffer
	cmd.Stdout = &console
	cmd.Stderr = &console
	start := time.Now()
	runErr := cmd.Run()
	b := &Boot{Kernel: k, Image: img, Console: console.String(), Elapsed: time.Since(start)}
	if p := os.Getenv(EnvConsole); p != "" {
		_ = os.WriteFile(p, console.Bytes(), 0o644)
	}
	_, _, _ = b.parse()
	return b, runErr
}

// parse reads the framed lines off the console.
func (b *Boot) parse() (end bool, fail string, err error) {
	b.Results = nil
	sc := bufio.NewScanner(strings.NewReader(b.Console))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		// A line may start with the terminal resets the firmware and the kernel print.
		for _, p := range []string{ResultPrefix, BootedPrefix, FailPrefix, EndLine} {
			if i := strings.Index(line, p); i > 0 {
				line = line[i:]
			}
		}
		switch {
		case strings.HasPrefix(line, ResultPrefix):
			var r Result
			if err := json.Unmarshal([]byte(line[len(ResultPrefix):]), &r); err != nil {
				return end, fail, fmt.Errorf("bad result line %q: %w", line, err)
			}
			b.Results = append(b.Results, r)
		case strings.HasPrefix(line, BootedPrefix):
			if err := json.Unmarshal([]byte(line[len(BootedPrefix):]), &b.Booted); err != nil {
				return end, fail, fmt.Errorf("bad booted line %q: %w", line, err)
			}
		case strings.HasPrefix(line, FailPrefix):
			fail = line[len(FailPrefix):]
		case line == EndLine:
			end = true
		}
	}
	return end, fail, sc.Err()
}

// withPlan writes a copy of the image with a second archive holding /plan.json after
// it: the kernel unpacks concatenated archives in order.
func withPlan(image string, plan Plan) (string, error) {
	pj, err := json.Marshal(plan)
	if err != nil {
		return "", err
	}
	src, err := os.Open(image)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst, err := os.CreateTemp("", "clusterlab-initrd-*.cpio")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(dst, src)
	if err == nil {
		t := newCpioTree()
		t.file("plan.json", 0o644, pj)
		err = t.write(dst)
	}
	if err = errors.Join(err, dst.Close()); err != nil {
		os.Remove(dst.Name())
		return "", err
	}
	return dst.Name(), nil
}

// HasModule reports whether the kernel has the named module (modules.dep lists it).
func (k *Kernel) HasModule(name string) bool {
	md, err := readModDep(k.ModulesDir)
	if err != nil {
		return false
	}
	_, ok := md.path[strings.ReplaceAll(name, "-", "_")]
	return ok
}
