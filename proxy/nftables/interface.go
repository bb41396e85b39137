package nftables

import (
	"context"

	"sigs.k8s.io/knftables"
)

// Interface is how the Proxier writes its table. knftables.Fake, a real
// knftables.Interface (nft on a host or in a network namespace) and the netsim adapter
// (applying tx.String() to the evaluator) implement it. One Interface serves one
// family and kube-proxy's table in it.
type Interface interface {
	// NewTransaction returns an empty transaction for the family and table.
	NewTransaction() *knftables.Transaction
	// Run applies the transaction atomically: all of it or nothing.
	Run(ctx context.Context, tx *knftables.Transaction) error
}

// Lister is what an Interface may also do to read the table back, as kube-proxy does on
// every sync (chain and set names, to find stale ones) and on full syncs (map and set
// elements, to diff against instead of flushing). knftables.Fake and
// knftables.Interface implement it. Without it the Proxier trusts its own record of
// what its successful transactions wrote, which is exact as long as nothing else
// changes the table.
type Lister interface {
	// List returns the names of the objects of a type ("chain", "set", ...).
	List(ctx context.Context, objectType string) ([]string, error)
	// ListElements returns the elements of a "set" or "map".
	ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error)
}

// knftables' fake and real implementations are Interfaces and Listers.
var (
	_ Interface = (*knftables.Fake)(nil)
	_ Lister    = (*knftables.Fake)(nil)
	_ Interface = knftables.Interface(nil)
	_ Lister    = knftables.Interface(nil)
)
