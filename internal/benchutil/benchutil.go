// Package benchutil holds what the benchmarks and the scale and bench reports measure
// beside their figures: the process's CPU time and the machine's load average. On a
// shared machine the CPU time per operation moves less with the load than the wall
// time does, and the load average says how shared the machine was.
package benchutil

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUTime is the process's user + system CPU time so far (getrusage: every thread, GC
// workers included), 0 where it cannot be read.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// LoadAvg1 is the 1-minute load average, -1 where /proc/loadavg cannot be read.
func LoadAvg1() float64 {
	f := loadFields()
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// LoadAvg is the 1, 5 and 15-minute load averages as /proc/loadavg gives them,
// "1.00, 0.50, 0.25", or "unknown".
func LoadAvg() string {
	f := loadFields()
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func loadFields() []string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// Usage is what getrusage and the runtime say of the process so far: user and system
// CPU time, minor page faults (first touches of fresh memory) and completed GC cycles.
type Usage struct {
	User, Sys time.Duration
	MinFlt    int64
	GCs       uint32
}

// ReadUsage reads the process's Usage (zero where getrusage fails).
func ReadUsage() Usage {
	var u Usage
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		u.User, u.Sys, u.MinFlt = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), int64(ru.Minflt)
	}
	u.GCs = gcCycles()
	return u
}

// Sub is u - v.
func (u Usage) Sub(v Usage) Usage {
	return Usage{User: u.User - v.User, Sys: u.Sys - v.Sys, MinFlt: u.MinFlt - v.MinFlt, GCs: u.GCs - v.GCs}
}

// Add is u + v.
func (u Usage) Add(v Usage) Usage {
	return Usage{User: u.User + v.User, Sys: u.Sys + v.Sys, MinFlt: u.MinFlt + v.MinFlt, GCs: u.GCs + v.GCs}
}
