package emulator

// UnknownMatch: a match module the emulator does not model, kept verbatim.

// UnknownMatch is a match module the emulator does not model (physdev, limit, mac,
// owner, ...). It keeps its options exactly as written, is printed back verbatim and
// shown in traces, and is undecidable: a single-path evaluation assumes it does not
// match; an all-branches exploration follows both possibilities.
type UnknownMatch struct {
	Name string
	Args []string // raw option tokens, quotes and "!" included

	ipvs *ipvsSpec // -m ipvs: its options as the evaluator reads them (see ipvs.go)
}

// Module implements Match.
func (m *UnknownMatch) Module() string { return m.Name }

func (m *UnknownMatch) appendArgs(b []byte) []byte {
	for _, a := range m.Args {
		b = append(b, ' ')
		b = append(b, a...)
	}
	return b
}

func (m *UnknownMatch) eval(c *evalCtx) tri {
	if m.ipvs != nil {
		return m.ipvs.eval(c)
	}
	return unknown
}
