package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/clusterlab/clusterlab/"

// rules say, for a package, which of clusterlab's packages it must not depend on,
// directly or through others; "k8s.io/" stands for every Kubernetes module.
var rules = map[string][]string{
	"netfilter":               {"*"},
	"netsim":                  {"*except netfilter", "k8s.io/"},
	"alloc":                   {"*"},
	"service":                 {"*except alloc"},
	"proxy":                   {"netsim", "cluster", "service"},
	"proxy/iptables":          {"netsim", "cluster"},
	"proxy/iptables/emulator": {"netsim", "cluster"},
	"proxy/ipvs":              {"netsim", "cluster"},
	"proxy/nodewalk":          {"netsim", "cluster"},
	"proxy/ipvs/emulator":     {"netsim", "cluster"},
	"proxy/userspace":         {"netsim", "cluster"},
	"cluster":                 {"proxy", "proxy/iptables", "proxy/ipvs", "proxy/userspace", "proxy/kubeproxy", "scenario", "dns"},
	"kernel":                  {"netsim", "cluster", "proxy/kubeproxy"},
	"dns":                     {"proxy/kubeproxy", "scenario"},
	"proxy/kubeproxy":         {"scenario", "proptest", "kernel"},
	"scenario":                {"proptest", "hostlink", "kernel", "kernelrun"},
	"kernelrun":               {"proptest", "hostlink"},
	"hostlink":                {"proptest", "kernel"},
}

// TestImportStack holds every package of the module to the rules, counting what it
// imports directly and through other packages of the module (test files aside).
func TestImportStack(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	direct := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		for _, imp := range f.Imports {
			direct[filepath.ToSlash(rel)] = append(direct[filepath.ToSlash(rel)], strings.Trim(imp.Path.Value, `"`))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deps := func(pkg string) map[string]bool {
		seen := map[string]bool{}
		var visit func(p string)
		visit = func(p string) {
			for _, imp := range direct[p] {
				key := imp
				if strings.HasPrefix(imp, module) {
					key = strings.TrimPrefix(imp, module)
				}
				if seen[key] {
					continue
				}
				seen[key] = true
				if strings.HasPrefix(imp, module) {
					visit(key)
				}
			}
		}
		visit(pkg)
		return seen
	}
	var pkgs []string
	for p := range rules {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		if _, ok := direct[p]; !ok {
			t.Errorf("package %s: not found (a rule for a package that moved?)", p)
			continue
		}
		d := deps(p)
		for _, banned := range rules[p] {
			for dep := range d {
				if _, own := direct[dep]; violates(dep, own, banned) {
					t.Errorf("%s depends on %s (rule %q)", p, dep, banned)
				}
			}
		}
	}
}

// violates reports whether a dependency (own: a package of the module, by its path in
// the module) breaks a rule: "*" bans every package of the module, "*except X" every
// package but X, "k8s.io/" every Kubernetes module, a path one package of the module.
func violates(dep string, own bool, rule string) bool {
	switch {
	case rule == "*":
		return own
	case strings.HasPrefix(rule, "*except "):
		return own && dep != strings.TrimPrefix(rule, "*except ")
	case strings.HasSuffix(rule, "/") && strings.Contains(rule, "."):
		return strings.HasPrefix(dep, rule)
	}
	return own && dep == rule
}
