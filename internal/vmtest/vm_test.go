package vmtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readCpio parses a newc archive back into its entries (name -> mode, data).
func readCpio(t *testing.T, b []byte) (names []string, modes map[string]uint32, data map[string]string) {
	t.Helper()
	modes, data = map[string]uint32{}, map[string]string{}
	off := 0
	field := func(i int) int {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("offset %d field %d: %v", off, i, err)
		}
		return int(v)
	}
	for {
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("offset %d: magic %q", off, b[off:off+6])
		}
		mode, size, nameLen := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+nameLen-1])
		off = (off + 110 + nameLen + 3) &^ 3
		content := string(b[off : off+size])
		off = (off + size + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("trailer ends at %d of %d", off, len(b))
			}
			return
		}
		names = append(names, name)
		modes[name], data[name] = uint32(mode), content
	}
}

func TestCpioArchive(t *testing.T) {
	tr := newCpioTree()
	tr.file("init", 0o755, []byte("#!agent"))
	tr.file("lib/modules/6.1/kernel/ip_vs.ko", 0o644, []byte("odd size"))
	tr.symlink("bin/sh", "busybox")
	tr.dir("proc")
	var buf bytes.Buffer
	if err := tr.write(&buf); err != nil {
		t.Fatal(err)
	}
	names, modes, data := readCpio(t, buf.Bytes())
	want := []string{"bin", "bin/sh", "init", "lib", "lib/modules", "lib/modules/6.1", "lib/modules/6.1/kernel", "lib/modules/6.1/kernel/ip_vs.ko", "proc"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
	if modes["init"] != cpioFile|0o755 || modes["bin/sh"] != cpioLink|0o777 || modes["proc"] != cpioDir|0o755 {
		t.Errorf("modes %o %o %o", modes["init"], modes["bin/sh"], modes["proc"])
	}
	if data["bin/sh"] != "busybox" || data["lib/modules/6.1/kernel/ip_vs.ko"] != "odd size" {
		t.Errorf("data %q", data)
	}
	var again bytes.Buffer
	_ = tr.write(&again)
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("the same tree gave different bytes (the cache key relies on it)")
	}
	// The cpio tool, where installed, reads it too.
	if _, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command("cpio", "-t", "--quiet")
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cpio -t: %v", err)
		}
		if got := strings.Fields(string(out)); !slices.Equal(got, want) {
			t.Errorf("cpio -t lists %q", got)
		}
	}
}

func TestResolveModules(t *testing.T) {
	dir := t.TempDir()
	dep := `kernel/net/netfilter/ipvs/ip_vs_rr.ko: kernel/net/netfilter/ipvs/ip_vs.ko kernel/net/netfilter/nf_conntrack.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/ipvs/ip_vs.ko: kernel/net/netfilter/nf_conntrack.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/nf_conntrack.ko: kernel/lib/libcrc32c.ko
kernel/lib/libcrc32c.ko:
kernel/drivers/net/veth.ko:
`
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	md, err := readModDep(dir)
	if err != nil {
		t.Fatal(err)
	}
	items, missing := md.resolve([]string{"ip_vs_rr", "veth", "ip-vs", "ip_vs_twos"})
	var got []string
	for _, it := range items {
		got = append(got, moduleName(it.file))
	}
	if want := []string{"libcrc32c", "nf_conntrack", "ip_vs", "ip_vs_rr", "veth"}; !slices.Equal(got, want) {
		t.Errorf("load order %q, want %q", got, want)
	}
	if !slices.Equal(missing, []string{"ip_vs_twos"}) {
		t.Errorf("missing %q", missing)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte("no colon here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readModDep(dir); err == nil || !strings.Contains(err.Error(), "modules.dep:1") {
		t.Errorf("bad modules.dep: %v, want an error naming the line", err)
	}
}

func TestVersionLess(t *testing.T) {
	rel := []string{"6.12.0-1-amd64", "6.1.0-56-amd64", "6.1.0-9-amd64", "5.10.0-30-amd64"}
	slices.SortFunc(rel, func(a, b string) int {
		if versionLess(a, b) {
			return -1
		}
		if versionLess(b, a) {
			return 1
		}
		return 0
	})
	if want := []string{"5.10.0-30-amd64", "6.1.0-9-amd64", "6.1.0-56-amd64", "6.12.0-1-amd64"}; !slices.Equal(rel, want) {
		t.Errorf("sorted %q, want %q", rel, want)
	}
}

func TestParseConsole(t *testing.T) {
	b := &Boot{Console: "SeaBIOS\r\n\x1bc\x1b[?7l\x1b[2J" + BootedPrefix + `{"release":"6.1.0-56-amd64","modules":["ip_vs"]}` + "\r\n" +
		"[    3.1] some kernel message\r\n" +
		ResultPrefix + `{"case":"a","step":0,"destination":"10.1.0.2:80"}` + "\r\n" +
		ResultPrefix + `{"case":"a","done":true,"elapsed":"1s"}` + "\r\n" + EndLine + "\r\n"}
	end, fail, err := b.parse()
	if err != nil || !end || fail != "" {
		t.Fatalf("parse: end %v fail %q err %v", end, fail, err)
	}
	if b.Booted.Release != "6.1.0-56-amd64" || len(b.Results) != 2 || b.Results[0].Destination != "10.1.0.2:80" || !b.Results[1].Done {
		t.Errorf("parsed %+v %+v", b.Booted, b.Results)
	}
	if got := b.CaseResults("a"); len(got) != 2 {
		t.Errorf("CaseResults: %+v", got)
	}
	b = &Boot{Console: FailPrefix + "mount proc: EPERM\n"}
	if end, fail, _ := b.parse(); end || fail != "mount proc: EPERM" {
		t.Errorf("a failing agent: end %v fail %q", end, fail)
	}
	b = &Boot{Console: ResultPrefix + "{not json\n"}
	if _, _, err := b.parse(); err == nil {
		t.Error("a garbled result line: want an error")
	}
}

func TestPruneImages(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	for i := range 6 {
		p := filepath.Join(dir, "initramfs-"+strconv.Itoa(i)+".cpio")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, base, base.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "other"), nil, 0o644)
	pruneImages(dir, 4)
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"initramfs-2.cpio", "initramfs-3.cpio", "initramfs-4.cpio", "initramfs-5.cpio", "other"}; !slices.Equal(names, want) {
		t.Errorf("left %q, want %q", names, want)
	}
}

// TestHostFiles: a host path is copied with its symlinks as symlinks (relative and
// absolute, chained), a directory recursively, and where the tree has a directory at
// a host symlink (busybox's bin against a merged-/usr host's bin -> usr/bin) the next
// component is linked instead, replacing a busybox applet link of the same name.
func TestHostFiles(t *testing.T) {
	root := t.TempDir()
	mk := func(p, data string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln := func(p, target string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/bin/ip", "the real ip")
	ln("bin", "usr/bin")
	ln("usr/sbin/ip", filepath.Join(root, "bin/ip"))
	mk("usr/sbin/xtables-nft-multi", "xtables")
	ln("usr/sbin/iptables-nft-restore", "xtables-nft-multi")
	mk("etc/iproute2/rt_tables", "255 local")
	mk("etc/iproute2/rt_tables.d/x.conf", "1 x")

	tr := newCpioTree()
	tr.symlink(rel(filepath.Join(root, "bin/ip")), "busybox") // busybox's applet
	tr.dir(rel(filepath.Join(root, "bin")))
	hf := newHostFiles(tr)
	for _, p := range []string{"usr/sbin/ip", "usr/sbin/iptables-nft-restore", "etc/iproute2", "no/such/file"} {
		if err := hf.add(filepath.Join(root, p)); err != nil {
			t.Fatalf("add %s: %v", p, err)
		}
	}
	want := map[string]string{
		"usr/sbin/ip":                     "L" + filepath.Join(root, "bin/ip"),
		"bin/ip":                          "L" + filepath.Join(root, "usr/bin/ip"),
		"usr/bin/ip":                      "Fthe real ip",
		"usr/sbin/iptables-nft-restore":   "Lxtables-nft-multi",
		"usr/sbin/xtables-nft-multi":      "Fxtables",
		"etc/iproute2/rt_tables":          "F255 local",
		"etc/iproute2/rt_tables.d/x.conf": "F1 x",
	}
	for p, w := range want {
		e, ok := tr.entries[rel(filepath.Join(root, p))]
		if !ok {
			t.Errorf("%s: not in the tree", p)
			continue
		}
		got := "F" + string(e.data)
		if e.mode&^0o7777 == cpioLink {
			got = "L" + string(e.data)
		}
		if got != w {
			t.Errorf("%s: %q, want %q", p, got, w)
		}
	}
	if _, ok := tr.entries[rel(filepath.Join(root, "no"))]; ok {
		t.Error("a missing path made entries")
	}
}
