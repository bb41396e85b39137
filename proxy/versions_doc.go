package proxy

import (
	"fmt"
	"strings"
)

// VersionsMarkdown renders docs/VERSIONS.md from the tables: the releases modelled, the
// feature gates with their stages, and every behaviour change with how far it is
// modelled and the test that shows it (TestVersionsDoc keeps the file in step).
func VersionsMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, `# kube-proxy versions in clusterlab

Generated from package proxy's tables (proxy/behaviour*.go, proxy/gates.go) by
`+"`go test ./proxy -run TestVersionsDoc -update`"+`; do not edit by hand.

A scenario's `+"`cluster.proxy.version`"+` (or `+"`proxy.NodeConfig.Version`"+` in the library)
selects a kube-proxy release from %s to %s; `+"`feature_gates:`"+` overrides gates as
`+"`--feature-gates`"+` does. Each behaviour change below is one switch in the code
(`+"`NodeConfig.Has(name)`"+`), with its PR or KEP and a test that shows a flow whose outcome
differs between the release before and the release after. "Row" is the row of the
team's reference table of kube-proxy changes by version.

## Feature gates

| gate | alpha | beta | GA | default on from | KEP |
|---|---|---|---|---|---|
`, OldestVersion, NewestVersion)
	for _, g := range Gates() {
		on := "—"
		for v := OldestVersion; v <= NewestVersion; v++ {
			if g.Default(v) {
				on = v.String()
				break
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", g.Name, stage(g.Alpha), stage(g.Beta), stage(g.GA), on, g.Ref)
	}
	b.WriteString("\n## Behaviour changes\n\n| row | area | change | release | gate | modes | PR / KEP | modelled | test |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range Changes() {
		rel := stage(c.Version)
		if c.Kernel != "" {
			rel = "Linux " + c.Kernel
		}
		modes := strings.Join(c.Modes, ", ")
		if modes == "" {
			modes = "all"
		}
		mod := string(c.Modelled)
		if c.Note != "" {
			mod += " (" + c.Note + ")"
		}
		row := "—"
		if c.Row != 0 {
			row = fmt.Sprint(c.Row)
		}
		test := c.Test
		if test != "" {
			test = "`" + test + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | **%s**: %s | %s | %s | %s | %s | %s | %s |\n", row, c.Area, c.Name, mdCell(c.Doc), rel, dash(c.Gate), modes, dash(c.Ref), mdCell(mod), dash(test))
	}
	return b.String()
}

func stage(v Version) string {
	if v == 0 {
		return "—"
	}
	return v.String()
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// mdCell makes text safe in a Markdown table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
