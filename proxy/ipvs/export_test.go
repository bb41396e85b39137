package ipvs

// Exported for the external tests (package ipvs_test), which run the proxier against
// the IPVS emulator and so cannot be in this package: the emulator imports it.
var (
	VSString = vsString
	RSString = rsString
)
