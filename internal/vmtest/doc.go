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
// emulator's script lines (ipvsadm commands, sysctl, conn with close or server-close,
// sleep, -L, -Lc, -L --stats), so the same script runs on the model and on the kernel
// and the two are compared line by line (sleep really waits in the guest while the
// model advances its clock; each result carries the guest's time since the case
// began, so the expiry column can be held to the model's within the guest's lead);
// KindIPVSCalls makes ipvs.Interface calls on the kernel adapter. Listing and ErrClass
// are shared by both sides, so a listing or an error is taken the same way from the
// model as from the kernel.
package vmtest
