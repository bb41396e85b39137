//go:build linux

// Command vmagent is the guest side of package vmtest: the /init of the initramfs the
// host boots under QEMU. It mounts the kernel's file systems, loads the modules listed
// in /etc/modules.load, runs every case of /plan.json and prints each result as a JSON
// line on the console (the serial port), then powers the machine off. It is built at
// test time with CGO_ENABLED=0 and is not meant to run anywhere else: it refuses to
// run unless it is process 1.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterlab/clusterlab/internal/vmtest"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "vmagent is the init of clusterlab's test VM (package internal/vmtest); it does not run on a host")
		os.Exit(2)
	}
	start := time.Now()
	if err := run(start); err != nil {
		fmt.Println(vmtest.FailPrefix + err.Error())
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	os.Exit(1) // init exiting panics the kernel; panic=-1 and -no-reboot end QEMU
}

func run(start time.Time) error {
	for _, m := range []struct{ src, dir, typ string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/run", "tmpfs"}, {"tmpfs", "/tmp", "tmpfs"},
	} {
		if err := unix.Mount(m.src, m.dir, m.typ, 0, ""); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.typ, m.dir, err)
		}
	}
	loaded, err := loadModules("/etc/modules.load")
	if err != nil {
		return err
	}
	var u unix.Utsname
	_ = unix.Uname(&u)
	emit(vmtest.BootedPrefix, vmtest.Booted{Release: unix.ByteSliceToString(u.Release[:]), Modules: loaded,
		Elapsed: time.Since(start).Round(time.Millisecond).String()})
	b, err := os.ReadFile("/plan.json")
	if err != nil {
		return fmt.Errorf("the plan: %w", err)
	}
	var plan vmtest.Plan
	if err := json.Unmarshal(b, &plan); err != nil {
		return fmt.Errorf("the plan: %w", err)
	}
	for i, c := range plan.Cases {
		runCase(i, c)
	}
	fmt.Println(vmtest.EndLine)
	return nil
}

// loadModules loads each listed module file with finit_module, in order (the host
// resolved the dependencies); a line "? FILE" may fail (one of several candidates).
func loadModules(list string) ([]string, error) {
	b, err := os.ReadFile(list)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p, optional := strings.CutPrefix(l, "? ")
		f, err := os.Open(p)
		if err != nil {
			return names, err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			if optional {
				continue
			}
			return names, fmt.Errorf("loading %s: %w", p, err)
		}
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".ko"))
	}
	return names, nil
}

func emit(prefix string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	fmt.Println(prefix + string(b))
}

func runCase(i int, c vmtest.Case) {
	start := time.Now()
	done := vmtest.Result{Case: c.Name, Done: true}
	var err error
	var leftover []string
	switch c.Kind {
	case vmtest.KindIPVSScript:
		leftover, err = runScript(i, c)
	case vmtest.KindIPVSCalls:
		leftover, err = runCalls(i, c)
	case vmtest.KindGoTest:
		done.Exit, err = runGoTest(c)
	default:
		err = fmt.Errorf("unknown case kind %q", c.Kind)
	}
	if err != nil {
		done.Fatal = err.Error()
	}
	if entries, _ := os.ReadDir("/run/netns"); len(entries) > 0 {
		for _, e := range entries {
			leftover = append(leftover, "network namespace "+e.Name())
		}
	}
	done.Leftover = leftover
	done.Elapsed = time.Since(start).Round(time.Millisecond).String()
	emit(vmtest.ResultPrefix, done)
}
