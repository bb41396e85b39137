package alloc

// Snapshot is an allocator's state in a plain, serialisable form, the shape
// of Kubernetes' RangeAllocation: the range as text ("10.96.0.0/12" or
// "30000-32767") and the bitmap as the big-endian bytes of an integer whose
// bit i is set when the i-th usable value is allocated (for IPs offset 0 is
// network+1, for ports it is the range's base). Data taken from a real
// cluster's RangeAllocation object can therefore be restored here.
//
// A snapshot restores only into an allocator of the same range; anything
// else is ErrMismatchedNetwork (ErrMismatchedPortRange for ports).
type Snapshot struct {
	Range string `json:"range"`
	Data  []byte `json:"data"`
}
