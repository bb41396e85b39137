package hostlink

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/clusterlab/clusterlab/netsim"
)

// httpProxy is an HTTP proxy whose connections start in the cluster: CONNECT tunnels
// (https_proxy, curl -p, any TLS or TCP client) and plain requests with an absolute URI
// (http_proxy, curl -x), forwarded with net/http's transport.
type httpProxy struct {
	dial  Dialer
	logf  func(string, ...any)
	rp    *httputil.ReverseProxy
	track func(net.Conn) func() // registers a hijacked connection until its func is called
}

func newHTTPProxy(dial Dialer, logf func(string, ...any), track func(net.Conn) func()) *httpProxy {
	tr := &http.Transport{
		DialContext:           dial,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	hp := &httpProxy{dial: dial, logf: logf, track: track}
	hp.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			logf("http proxy: %s %s: %v", r.Method, r.URL, err)
			http.Error(w, fmt.Sprintf("clusterlab: %s: %v", r.URL.Host, err), http.StatusBadGateway)
		},
	}
	return hp
}

func (hp *httpProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		hp.connect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		hp.rp.ServeHTTP(w, r)
	default:
		http.Error(w, "clusterlab: a proxy: send CONNECT host:port or a request with an absolute http:// URI", http.StatusBadRequest)
	}
}

func (hp *httpProxy) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		http.Error(w, fmt.Sprintf("clusterlab: CONNECT wants host:port, got %q", target), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
	out, err := hp.dial(ctx, "tcp", target)
	cancel()
	if err != nil {
		hp.logf("http proxy: CONNECT %s: %v", target, err)
		http.Error(w, fmt.Sprintf("clusterlab: %s: %v", target, err), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		out.Close()
		http.Error(w, "clusterlab: CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		out.Close()
		return
	}
	done := hp.track(c)
	defer done()
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		c.Close()
		out.Close()
		return
	}
	netsim.Splice(bufferedConn{c, brw.Reader}, out)
}
