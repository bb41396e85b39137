package emulator

import "fmt"

// The nfacct match module.

// NfacctMatch is -m nfacct --nfacct-name NAME: it always matches and counts the packet
// in the named accounting object.
type NfacctMatch struct{ Name string }

// Module implements Match.
func (*NfacctMatch) Module() string { return "nfacct" }

func (m *NfacctMatch) option(rc *ruleCtx, opt string, _ bool, args []token) error {
	if err := once(rc, m, opt); err != nil {
		return err
	}
	if args[0].val == "" || len(args[0].val) > 31 {
		return fmt.Errorf("invalid nfacct name %q", args[0].val)
	}
	m.Name = args[0].val
	return nil
}

func (m *NfacctMatch) finish(*ruleCtx) error {
	if m.Name == "" {
		return fmt.Errorf("-m nfacct needs --nfacct-name")
	}
	return nil
}

func (m *NfacctMatch) appendArgs(b []byte) []byte {
	// iptables-save prints two spaces here.
	b = append(b, " --nfacct-name  "...)
	return append(b, m.Name...)
}

func (m *NfacctMatch) eval(c *evalCtx) tri {
	c.countNfacct(m.Name)
	return yes
}
