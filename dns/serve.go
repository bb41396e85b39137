package dns

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterlab/clusterlab/service"
)

// ServeConfig is what `clusterlab dns serve` runs with.
type ServeConfig struct {
	Manifests []string // files and directories (*.yaml, *.yml, *.json in a directory)
	Listen    string   // host:port for both UDP and TCP; port 0 picks a free one
	Zones     []string // cluster domain first, then reverse zones (see Config.Zones)
	TTL       uint32
	Pods      PodMode
	Upstream  string // host[:port] of the upstream resolver; "" for none
	// AllowRecursion lists the client networks whose queries for names outside
	// the zones go to the upstream (--allow-recursion); others get REFUSED. Nil:
	// loopback and the cluster's pod networks (the manifests' Nodes' podCIDRs,
	// else DefaultPodCIDR), followed on every reload. Empty, not nil: nobody.
	AllowRecursion []netip.Prefix
	// UpstreamTimeout bounds one upstream exchange (default 2s).
	UpstreamTimeout time.Duration

	// Poll is how often the manifests are checked for changes (default 1s).
	Poll time.Duration
	// Tick, when set, replaces the poll timer: each value received triggers
	// one check (tests drive reloads with it).
	Tick <-chan time.Time
	// Log receives the status line and reload messages; nil discards them.
	Log io.Writer
	// Warn receives warnings (an open forwarder); nil: Log.
	Warn io.Writer
	// OnListen is called once both sockets are bound.
	OnListen func(udp, tcp net.Addr)
	// OnReload is called after every reload attempt with its error (nil on
	// success); not called when the files did not change.
	OnReload func(error)
}

// inputError marks errors caused by the caller's flags or files.
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

// IsInputError reports whether err from Serve was caused by bad flags or bad
// manifests (the CLI exits 2 for those) rather than by the environment.
func IsInputError(err error) bool {
	var ie inputError
	return errors.As(err, &ie)
}

// Serve loads the manifests and answers DNS on cfg.Listen over UDP and TCP
// until ctx is done, reloading when the files change. A manifest error at
// start is an input error (each problem with its file and line); a failed
// reload keeps the previous data and is logged. Cluster IPs are served as
// the manifests give them; what a cluster would have added to hand-written
// manifests (cluster IPs, EndpointSlices from the Pods) is filled in and
// logged (see completeObjects).
func Serve(ctx context.Context, cfg ServeConfig) error {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	if len(cfg.Manifests) == 0 {
		return inputError{errors.New("no manifests given (--manifests FILE_OR_DIR)")}
	}
	if cfg.Listen == "" {
		return inputError{errors.New("no listen address given (--listen HOST:PORT)")}
	}
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return inputError{fmt.Errorf("--listen %q: %w", cfg.Listen, err)}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return inputError{fmt.Errorf("--listen %q: port %q: want a number from 0 to 65535", cfg.Listen, port)}
	}
	objs, notes, err := loadObjects(cfg.Manifests)
	if err != nil {
		return inputError{err}
	}
	fp := fingerprintKey(cfg.Manifests)
	src := NewStaticSource(objs...)

	sc := DefaultConfig()
	sc.Zones = cfg.Zones
	sc.TTL = cfg.TTL
	sc.Pods = cfg.Pods
	var limited *limitedUpstream
	var acl *RecursionACL
	if cfg.Upstream != "" {
		if _, port, err := net.SplitHostPort(cfg.Upstream); err != nil {
			if _, perr := netip.ParseAddr(strings.Trim(cfg.Upstream, "[]")); perr != nil {
				return inputError{fmt.Errorf("--upstream %q: want an IP address or host:port", cfg.Upstream)}
			}
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return inputError{fmt.Errorf("--upstream %q: port %q: want a number from 1 to 65535", cfg.Upstream, port)}
		}
		limited = newLimitedUpstream(NewUpstream(cfg.Upstream), MaxUpstreamInFlight)
		limited.perClient = MaxUpstreamPerClient
		sc.Upstream = limited
		sc.UpstreamTimeout = cfg.UpstreamTimeout
		acl = NewRecursionACL(cfg.AllowRecursion...)
		if cfg.AllowRecursion == nil {
			acl.Set(defaultRecursionACL(objs))
		}
		sc.AllowRecursion = acl
	}
	if host, _, _ := net.SplitHostPort(cfg.Listen); host != "" {
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
			sc.NSAddrs = []netip.Addr{ip}
		}
	}
	srv, err := New(src, sc)
	if err != nil {
		return inputError{err}
	}

	pc, ln, err := listenBoth(cfg.Listen)
	if err != nil {
		return err
	}
	guard := newLoopGuard(srv)
	udp := &mdns.Server{PacketConn: pc, Handler: guard}
	tcp := &mdns.Server{Listener: ln, Handler: guard}
	errc := make(chan error, 2)
	for _, s := range []*mdns.Server{udp, tcp} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func(s *mdns.Server) { errc <- s.ActivateAndServe() }(s)
		select {
		case <-started:
		case err := <-errc:
			pc.Close()
			ln.Close()
			return fmt.Errorf("dns serve: %w", err)
		}
	}
	defer func() {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
	}()

	if sc.Upstream != nil {
		if err := guard.checkLoop(ctx, sc.Upstream, cfg.Upstream); err != nil {
			return inputError{err}
		}
	}
	fmt.Fprintf(logw, "clusterlab dns: serving %s (%s) from %d objects on %s udp+tcp\n",
		strings.TrimSuffix(srv.Zones()[0], "."), strings.Join(trimDots(srv.Zones()[1:]), " "), len(objs), pc.LocalAddr())
	writeNotes(logw, notes)
	if acl != nil && !loopbackListen(cfg.Listen) {
		warnw := cfg.Warn
		if warnw == nil {
			warnw = logw
		}
		fmt.Fprintf(warnw, "clusterlab dns: warning: --listen %s is not a loopback address and --upstream is set: this server is an open forwarder for the clients it lets recurse; names outside the cluster zones are forwarded only for %s (--allow-recursion), others get REFUSED\n",
			cfg.Listen, aclText(acl))
	}
	if cfg.OnListen != nil {
		cfg.OnListen(pc.LocalAddr(), ln.Addr())
	}

	tick := cfg.Tick
	if tick == nil {
		poll := cfg.Poll
		if poll <= 0 {
			poll = time.Second
		}
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	var reported UpstreamStats
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return fmt.Errorf("dns serve: %w", err)
		case <-tick:
			if limited != nil {
				reported = reportUpstream(logw, limited.Stats(), reported)
			}
			// The files' state: their hash, or the error reading them (a deleted
			// file). An unchanged state is not reloaded, nor its error logged again.
			nfp := fingerprintKey(cfg.Manifests)
			if nfp == fp {
				continue
			}
			fp = nfp
			aclFollows := acl
			if cfg.AllowRecursion != nil {
				aclFollows = nil
			}
			objs, notes, err := reload(cfg.Manifests, src, aclFollows)
			if err != nil {
				fmt.Fprintf(logw, "clusterlab dns: reload failed, still serving the previous data: %v\n", err)
			} else {
				fmt.Fprintf(logw, "clusterlab dns: reloaded %d objects (serial %d)\n", len(objs), srv.Serial())
				writeNotes(logw, notes)
			}
			if cfg.OnReload != nil {
				cfg.OnReload(err)
			}
		}
	}
}

func trimDots(zs []string) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = strings.TrimSuffix(z, ".")
	}
	return out
}

// loadObjects loads the manifests (skipping kinds it does not serve) and
// completes them as a cluster would (completeObjects), returning a note for
// each thing skipped or filled in.
func loadObjects(paths []string) ([]runtime.Object, []string, error) {
	ms, skipped, err := loadManifests(paths)
	if err != nil {
		return nil, nil, err
	}
	objs, notes := completeObjects(service.Objects(ms))
	if n := skippedNote(skipped); n != "" {
		notes = append([]string{n}, notes...)
	}
	return objs, notes, nil
}

func writeNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "clusterlab dns: %s\n", n)
	}
}

// listenBoth binds UDP and TCP on the same address; with port 0 it finds a
// port free for both.
func listenBoth(addr string) (net.PacketConn, net.Listener, error) {
	var lastErr error
	for i := 0; i < 20; i++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns serve: %w", err) // "listen udp ADDR: ..."
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		lastErr = err
		if _, port, _ := net.SplitHostPort(addr); port != "0" {
			break
		}
	}
	return nil, nil, fmt.Errorf("dns serve: %w", lastErr) // "listen tcp ADDR: ..."
}

// reload loads the manifests anew and, only when the whole set loads and
// validates, replaces what src serves and (when acl is not nil) the default
// recursion ACL, which follows the Nodes' pod CIDRs. On error nothing changes:
// the previous answers stay.
func reload(paths []string, src *StaticSource, acl *RecursionACL) ([]runtime.Object, []string, error) {
	objs, notes, err := loadObjects(paths)
	if err != nil {
		return nil, nil, err
	}
	src.Set(objs...)
	if acl != nil {
		acl.Set(defaultRecursionACL(objs))
	}
	return objs, notes, nil
}

// fingerprintKey is fingerprint, or a hash of its error: the state of the files,
// which changes when their contents do or when the reason they cannot be read does.
func fingerprintKey(paths []string) [32]byte {
	fp, err := fingerprint(paths)
	if err != nil {
		return sha256.Sum256([]byte("error\x00" + err.Error()))
	}
	return fp
}

// reportUpstream logs how many queries the upstream caps and deadline answered
// SERVFAIL since the last report (prev), and returns the new totals.
func reportUpstream(w io.Writer, now, prev UpstreamStats) UpstreamStats {
	if now == prev {
		return now
	}
	fmt.Fprintf(w, "clusterlab dns: upstream: SERVFAIL for %d queries over the %d in flight, %d over the %d in flight per client, %d timed out (since the last report)\n",
		now.Busy-prev.Busy, MaxUpstreamInFlight, now.ClientBusy-prev.ClientBusy, MaxUpstreamPerClient, now.TimedOut-prev.TimedOut)
	return now
}

// defaultRecursionACL is loopback and the pod networks of the manifests' Nodes
// (spec.podCIDRs, or spec.podCIDR), or DefaultPodCIDR when no Node gives one.
func defaultRecursionACL(objs []runtime.Object) []netip.Prefix {
	out := append([]netip.Prefix(nil), LoopbackPrefixes...)
	seen := map[netip.Prefix]bool{}
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil && !seen[p.Masked()] {
				seen[p.Masked()] = true
				out = append(out, p.Masked())
			}
		}
	}
	if len(seen) == 0 {
		out = append(out, DefaultPodCIDR)
	}
	return out
}

// aclText is the ACL for a message: its networks, or "no client".
func aclText(a *RecursionACL) string {
	if s := a.String(); s != "" {
		return s
	}
	return "no client"
}

// loopbackListen reports whether the listen address is a loopback one (an
// unspecified or empty host listens on every interface: not loopback).
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// fingerprint hashes the contents of the files LoadPaths would read, so a
// change to any of them (or a file added to or removed from a directory)
// is seen whatever the file system's timestamp resolution.
func fingerprint(paths []string) ([32]byte, error) {
	h := sha256.New()
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return [32]byte{}, err
		}
		files := []string{p}
		if st.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return [32]byte{}, err
			}
			files = files[:0]
			for _, e := range entries {
				switch strings.ToLower(filepath.Ext(e.Name())) {
				case ".yaml", ".yml", ".json":
					if !e.IsDir() {
						files = append(files, filepath.Join(p, e.Name()))
					}
				}
			}
			sort.Strings(files)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return [32]byte{}, err
			}
			fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
			h.Write(data)
		}
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, nil
}
