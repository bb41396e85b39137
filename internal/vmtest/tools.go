package vmtest

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// GoTestTools are the host programs a test of package kernel (and of the emulators'
// differentials built on it) runs: iproute2's ip (netns add/exec/del, the harness's
// links), iptables and ip6tables of both backends (the xtables-*-multi binaries under
// every name package kernel calls them by), nft, conntrack, ipset and ipvsadm.
var GoTestTools = func() []string {
	out := []string{"ip", "nft", "conntrack", "ipset", "ipvsadm"}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, b := range []string{"", "-nft", "-legacy"} {
			for _, s := range []string{"", "-save", "-restore"} {
				out = append(out, fam+b+s)
			}
		}
	}
	return out
}()

// GoTestHostPaths are the host files those tools read: iptables' extensions (dlopened,
// so no DT_NEEDED names them) and the protocol, service and ethertype names, and
// iproute2's tables.
var GoTestHostPaths = []string{"/usr/lib/x86_64-linux-gnu/xtables", "/etc/protocols", "/etc/services",
	"/etc/ethertypes", "/etc/iproute2", "/usr/share/iproute2", "/usr/lib/iproute2", "/etc/nsswitch.conf"}

// GoTestModules are the modules a kernel-package test needs: links (veth, dummy,
// bridge and br_netfilter), conntrack with its netlink interface and NAT, nf_tables
// with the expressions kube-proxy's nftables mode and iptables-nft use, x_tables with
// the iptables tables, matches and targets kube-proxy and the differential fuzzer
// write, nfacct and ipset. Add IPVSModules for IPVS.
var GoTestModules = []string{
	"veth", "dummy", "bridge", "br_netfilter",
	"nf_conntrack", "nf_conntrack_netlink", "nf_nat", "nfnetlink_acct", "nfnetlink_log",
	"nf_tables", "nft_chain_nat", "nft_ct", "nft_nat", "nft_masq", "nft_redir", "nft_reject", "nft_reject_inet",
	"nft_reject_ipv4", "nft_reject_ipv6", "nft_fib", "nft_fib_inet", "nft_fib_ipv4", "nft_fib_ipv6", "nft_numgen",
	"nft_hash", "nft_limit", "nft_log", "nft_objref", "nft_quota", "nft_compat", "nft_connlimit",
	"x_tables", "ip_tables", "ip6_tables", "iptable_filter", "iptable_nat", "iptable_mangle", "iptable_raw",
	"ip6table_filter", "ip6table_nat", "ip6table_mangle", "ip6table_raw", "ipt_REJECT", "ip6t_REJECT",
	"xt_addrtype", "xt_comment", "xt_conntrack", "xt_state", "xt_mark", "xt_connmark", "xt_multiport", "xt_tcpudp",
	"xt_MASQUERADE", "xt_nat", "xt_REDIRECT", "xt_statistic", "xt_recent", "xt_set", "xt_physdev", "xt_nfacct",
	"xt_LOG", "xt_NFLOG", "xt_limit", "xt_CT", "xt_iprange", "xt_length", "xt_pkttype", "xt_owner", "xt_CHECKSUM",
	"xt_mac", "xt_NETMAP", "xt_connlimit", "xt_hashlimit", "xt_string", "xt_u32", "xt_dscp", "xt_DSCP", "xt_TCPMSS",
	"xt_tcpmss", "xt_esp", "xt_sctp", "xt_HL", "xt_hl", "xt_ecn", "xt_helper", "xt_connbytes", "xt_quota", "xt_time",
	"ip_set", "ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip", "ip_set_hash_ipportnet",
	"ip_set_hash_net", "ip_set_hash_netport", "ip_set_bitmap_port", "ip_set_hash_ipmark", "ip_set_list_set",
}

// libDirs are where the loader looks for a library no RUNPATH names (Debian's
// multiarch directories, then the plain ones).
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// hostFiles copies host files into a cpio tree at their own paths. Every symlink met
// on the way is copied as a symlink (so /usr/sbin/iptables-nft-restore stays a link to
// xtables-nft-multi, which dispatches on its name), except where the tree already has a
// directory at that path (busybox's /bin against a merged-/usr host's /bin -> usr/bin):
// there the next component is linked to its resolved path instead (resolve). An ELF file brings its interpreter and the libraries it needs.
type hostFiles struct {
	tree *cpioTree
	done map[string]bool
}

func newHostFiles(tree *cpioTree) *hostFiles {
	return &hostFiles{tree: tree, done: map[string]bool{}}
}

// addTool adds a program by name, as package kernel finds it ($PATH, then the sbin
// directories); one the host lacks is skipped.
func (hf *hostFiles) addTool(name string) error {
	p, err := exec.LookPath(name)
	if err != nil {
		for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
			if fi, err := os.Stat(filepath.Join(d, name)); err == nil && fi.Mode().IsRegular() {
				p = filepath.Join(d, name)
				break
			}
		}
	}
	if p == "" {
		return nil
	}
	if !filepath.IsAbs(p) {
		if p, err = filepath.Abs(p); err != nil {
			return err
		}
	}
	return hf.add(p)
}

// add adds a host path (a file, a directory recursively, a symlink and its target); a
// path that does not exist is skipped.
func (hf *hostFiles) add(p string) error {
	p = filepath.Clean(p)
	if hf.done[p] {
		return nil
	}
	hf.done[p] = true
	real, err := hf.resolve(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("VM image: %s: %w", p, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("VM image: %s: %w", real, err)
	}
	if fi.IsDir() {
		entries, err := os.ReadDir(real)
		if err != nil {
			return fmt.Errorf("VM image: %w", err)
		}
		hf.tree.dir(rel(real))
		for _, e := range entries {
			if err := hf.add(filepath.Join(real, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	if _, ok := hf.tree.has(rel(real)); ok {
		return nil
	}
	b, err := os.ReadFile(real)
	if err != nil {
		return fmt.Errorf("VM image: %w", err)
	}
	hf.tree.file(rel(real), uint32(fi.Mode().Perm()), b)
	if len(b) > 4 && string(b[:4]) == "\x7fELF" {
		return hf.addELFDeps(real)
	}
	return nil
}

// resolve follows p's symlinks component by component, copying each symlink into the
// tree, and returns the real path. Where the tree has a directory at a host symlink
// (busybox's /bin or the modules' /lib against a merged-/usr host's /lib -> usr/lib),
// the next component is linked instead: lib/x86_64-linux-gnu -> /usr/lib/x86_64-linux-gnu.
func (hf *hostFiles) resolve(p string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for hops := 0; len(parts) > 0; {
		next := filepath.Join(cur, parts[0])
		parts = parts[1:]
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("too many symlinks")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if typ, ok := hf.tree.has(rel(next)); ok && typ == cpioDir {
			if len(parts) > 0 {
				to, err := filepath.EvalSymlinks(next)
				if err != nil {
					return "", err
				}
				// Busybox's applet links give way to the host's programs (its ip
				// has no netns); directories stay.
				if typ, ok := hf.tree.has(rel(filepath.Join(next, parts[0]))); !ok || typ != cpioDir {
					hf.tree.symlink(rel(filepath.Join(next, parts[0])), filepath.Join(to, parts[0]))
				}
			}
		} else {
			hf.tree.symlink(rel(next), target)
		}
		if filepath.IsAbs(target) {
			cur = "/"
		} // else relative to the link's directory, which cur is
		parts = append(strings.Split(strings.Trim(filepath.Clean(target), "/"), "/"), parts...)
	}
	return cur, nil
}

// addELFDeps adds an ELF file's interpreter and needed libraries (transitively,
// through add).
func (hf *hostFiles) addELFDeps(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return nil // not an ELF file after all (or one debug/elf cannot read): copy only
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err == nil {
				if err := hf.add(strings.TrimRight(string(b), "\x00")); err != nil {
					return err
				}
			}
		}
	}
	needed, _ := f.DynString(elf.DT_NEEDED)
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		rp, _ := f.DynString(tag)
		for _, s := range rp {
			for _, d := range strings.Split(s, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(p)))
			}
		}
	}
	dirs = append(dirs, libDirs...)
	sort.Strings(needed)
	for _, lib := range needed {
		found := false
		for _, d := range dirs {
			if c := filepath.Join(d, lib); fileExists(c) {
				if err := hf.add(c); err != nil {
					return err
				}
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("VM image: %s needs %s, not found in %v", p, lib, dirs)
		}
	}
	return nil
}

// rel is a tree name: the absolute path without its leading slash.
func rel(p string) string { return strings.TrimPrefix(path.Clean(p), "/") }
