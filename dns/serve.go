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

	// Poll is how often the manifests are checked for changes (default 1s).
	Poll time.Duration
	// Tick, when set, replaces the poll timer: each value received triggers
	// one check (tests drive reloads with it).
	Tick <-chan time.Time
	// Log receives the status line and reload messages; nil discards them.
	Log io.Writer
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
	fp, _ := fingerprint(cfg.Manifests)
	src := NewStaticSource(objs...)

	sc := DefaultConfig()
	sc.Zones = cfg.Zones
	sc.TTL = cfg.TTL
	sc.Pods = cfg.Pods
	if cfg.Upstream != "" {
		if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
			if _, perr := netip.ParseAddr(strings.Trim(cfg.Upstream, "[]")); perr != nil {
				return inputError{fmt.Errorf("--upstream %q: want an IP address or host:port", cfg.Upstream)}
			}
		}
		sc.Upstream = newLimitedUpstream(NewUpstream(cfg.Upstream), MaxUpstreamInFlight)
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
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return fmt.Errorf("dns serve: %w", err)
		case <-tick:
			nfp, ferr := fingerprint(cfg.Manifests)
			if ferr == nil && nfp == fp {
				continue
			}
			fp = nfp
			objs, notes, err := loadObjects(cfg.Manifests)
			if err == nil && ferr != nil {
				err = ferr
			}
			if err != nil {
				fmt.Fprintf(logw, "clusterlab dns: reload failed, still serving the previous data: %v\n", err)
			} else {
				src.Set(objs...)
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
