package vmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"sort"
)

// A cpio "newc" archive writer: the format the kernel unpacks into its initial root
// file system. Entries are written with fixed inode numbers, owner root and mtime 0,
// so the same files give the same bytes (the initramfs cache key depends on that).

type cpioEntry struct {
	name string // without a leading slash
	mode uint32 // type and permission bits
	data []byte // file contents or symlink target
}

const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioLink = 0o120000
)

// cpioTree collects files and symlinks and adds their parent directories.
type cpioTree struct {
	entries map[string]cpioEntry
}

func newCpioTree() *cpioTree { return &cpioTree{entries: map[string]cpioEntry{}} }

func (t *cpioTree) dir(name string) {
	for name != "." && name != "/" && name != "" {
		if _, ok := t.entries[name]; ok {
			return
		}
		t.entries[name] = cpioEntry{name: name, mode: cpioDir | 0o755}
		name = path.Dir(name)
	}
}

func (t *cpioTree) file(name string, perm uint32, data []byte) {
	t.dir(path.Dir(name))
	t.entries[name] = cpioEntry{name: name, mode: cpioFile | perm, data: data}
}

func (t *cpioTree) symlink(name, target string) {
	t.dir(path.Dir(name))
	t.entries[name] = cpioEntry{name: name, mode: cpioLink | 0o777, data: []byte(target)}
}

// has reports whether the tree has an entry of that name and its type bits.
func (t *cpioTree) has(name string) (uint32, bool) {
	e, ok := t.entries[name]
	return e.mode &^ 0o7777, ok
}

// hash is a content hash of the tree (names, modes, data in name order) after a salt,
// as 24 hex digits: the image cache key.
func (t *cpioTree) hash(salt string) string {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", salt)
	for _, n := range names {
		e := t.entries[n]
		fmt.Fprintf(h, "%s %o %d\n", n, e.mode, len(e.data))
		h.Write(e.data)
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// write writes the archive: entries in name order (a directory before what it holds),
// then the trailer.
func (t *cpioTree) write(w io.Writer) error {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	cw := &cpioWriter{w: w}
	for i, n := range names {
		e := t.entries[n]
		if err := cw.entry(uint32(i+1), e.name, e.mode, e.data); err != nil {
			return err
		}
	}
	return cw.entry(0, "TRAILER!!!", 0, nil)
}

type cpioWriter struct {
	w   io.Writer
	off int64
}

func (c *cpioWriter) put(b []byte) error {
	n, err := c.w.Write(b)
	c.off += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.off % 4; r != 0 {
		return c.put(make([]byte, 4-r))
	}
	return nil
}

func (c *cpioWriter) entry(ino uint32, name string, mode uint32, data []byte) error {
	nlink := uint32(1)
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	if err := c.put([]byte(hdr)); err != nil {
		return err
	}
	if err := c.put(append([]byte(name), 0)); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if err := c.put(data); err != nil {
		return err
	}
	return c.pad()
}
