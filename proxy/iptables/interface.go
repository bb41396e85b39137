package iptables

import "context"

// Interface is how the rule generator writes a ruleset and reads one back. It has two
// implementations: the emulator in this package (a state-based fake that also evaluates
// packets) and the kernel adapter in package kernel (iptables-restore / iptables-save,
// nft or legacy backend, optionally inside a named network namespace). One Interface
// serves one address family, as in kube-proxy.
type Interface interface {
	// Restore applies iptables-restore input. Without NoFlush every table named in data
	// is replaced whole; with NoFlush only the chains declared in data (":CHAIN ...")
	// are flushed and refilled, as iptables-restore --noflush does. Either the whole
	// input applies or none of it does.
	Restore(ctx context.Context, data []byte, opts RestoreOptions) error
	// Save returns iptables-save output for the named tables, or all tables if none
	// are named.
	Save(ctx context.Context, tables ...string) ([]byte, error)
}

// RestoreOptions are the iptables-restore flags the generator uses.
type RestoreOptions struct {
	NoFlush  bool // --noflush
	Counters bool // --counters: restore the [pkts:bytes] counters in data
}
