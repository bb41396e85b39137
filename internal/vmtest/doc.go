// Package vmtest boots a real Linux kernel in a small QEMU virtual machine for tests
// that need kernel features the host lacks (IPVS here: the CI machine's kernel has no
// CONFIG_IP_VS). It is test support: nothing outside tests imports it.
//
//	host (go test)                                    guest (qemu-system-x86_64 -accel tcg)
//	─────────────────────────────────────────         ─────────────────────────────────────
//	Supported / Require: root, qemu, go, busybox,     /init = vmagent (static Go, this
//	  /boot/vmlinuz-R + /lib/modules/R                  package's vmagent command)
//	BuildImage: agent (go build, CGO_ENABLED=0)       mounts proc, sys, dev, run
//	  + busybox + modules resolved from modules.dep   finit_module(/etc/modules.load)
//	  (hard and soft deps) → newc cpio, cached by     reads /plan.json
//	  content hash in the user cache dir              runs each Case in namespaces of
//	Run: image + a second cpio with /plan.json          its own (kernel.IPVS over netlink,
//	  ──► -kernel -initrd -append console=ttyS0 ──►     real TCP/UDP connections)
//	  ◄── serial console: JSON lines ◄──────────────  prints BOOTED, RESULT…, END; powers off
//	Boot.Results, CaseResults
//
// One boot runs a whole Plan, so a test batches its cases: a boot under TCG costs tens
// of seconds on a loaded two-core machine (docs/PERFORMANCE.md). The kernel is Debian's
// linux-image-amd64 (6.1 on bookworm), found under /boot; CLUSTERLAB_VM_KERNEL names
// another image, CLUSTERLAB_VM_CACHE the cache directory, CLUSTERLAB_VM_ACCEL QEMU's
// accelerator (tcg by default: nested KVM hung in early boot where it was tried), and
// CLUSTERLAB_VM_CONSOLE a file to copy the console to.
//
// The case kinds (plan.go) are what the agent can run: KindIPVSScript takes the IPVS
// emulator's script lines (ipvsadm commands, sysctl, conn, -L), so the same script runs
// on the model and on the kernel and the two are compared line by line;
// KindIPVSCalls makes ipvs.Interface calls on the kernel adapter. Listing and ErrClass
// are shared by both sides, so a listing or an error is taken the same way from the
// model as from the kernel.
//
// KindGoTest runs a package's own tests in the guest: RunGoTests (or RunGoTest for one
// package) cross-builds each package's test binary (go test -c, CGO_ENABLED=0, once
// per process), puts it in the image with the package's testdata/ at the package's
// host path (its working directory, as under go test), the host's ip, iptables and
// ip6tables (nft and legacy), nft, conntrack, ipset and ipvsadm with their shared
// libraries, the loader and the files they read (GoTestTools, GoTestHostPaths), and
// the netfilter modules package kernel needs (GoTestModules); the agent runs each
// binary with its arguments and environment, streams its output back line by line and
// reports its exit status, and each run becomes a subtest that fails with the guest's
// output when the binary fails there or leaves a namespace behind. os.Args[0] is the
// binary's absolute path, so a test that re-executes itself works in the guest too.
// The image cache key hashes every file, test binaries included.
package vmtest
