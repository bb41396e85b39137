package benchutil

import "runtime/metrics"

var gcSample = []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}

// gcCycles is the number of completed GC cycles (runtime/metrics: no stop-the-world,
// unlike runtime.ReadMemStats).
func gcCycles() uint32 {
	s := []metrics.Sample{gcSample[0]}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return uint32(s[0].Value.Uint64())
}
