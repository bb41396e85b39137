package ipvs

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// GracefulCheckInterval is how often kube-proxy retries deleting real servers that
// still had connections (its rsCheckDeleteInterval).
const GracefulCheckInterval = time.Minute

// vsString is kube-proxy's VirtualServer.String(): "ip:port/PROTO".
func vsString(vs *VirtualServer) string {
	return net.JoinHostPort(vs.Address.String(), strconv.Itoa(int(vs.Port))) + "/" + vs.Protocol
}

// rsString is kube-proxy's RealServer.String(): "ip:port".
func rsString(rs *RealServer) string {
	return net.JoinHostPort(rs.Address.String(), strconv.Itoa(int(rs.Port)))
}

// uniqueRSName is kube-proxy's GetUniqueRSName: "vip:port/PROTO/rip:port".
func uniqueRSName(vs *VirtualServer, rs *RealServer) string { return vsString(vs) + "/" + rsString(rs) }

// gracefulTerminationNeeded is kube-proxy's IsRsGracefulTerminationNeeded: UDP and SCTP
// real servers are deleted at once (their entries die on their next packet, as
// expire_nodest_conn is set); others wait until their connections are gone.
func gracefulTerminationNeeded(proto string) bool {
	return !strings.EqualFold(proto, "UDP") && !strings.EqualFold(proto, "SCTP")
}

type gracefulItem struct {
	vs *VirtualServer
	rs *RealServer
}

// graceful is kube-proxy's GracefulTerminationManager: real servers of endpoints that
// went away, kept with weight 0 while they still have connections.
type graceful struct {
	ipvs Interface
	list map[string]gracefulItem
}

func newGraceful(ipvs Interface) *graceful {
	return &graceful{ipvs: ipvs, list: map[string]gracefulItem{}}
}

func (g *graceful) inList(name string) bool { _, ok := g.list[name]; return ok }

// deleteRS deletes the real server if it may go now; it reports whether the server is
// gone (also when it no longer exists: then with an error).
func (g *graceful) deleteRS(it gracefulItem) (bool, error) {
	rss, err := g.ipvs.GetRealServers(it.vs)
	if err != nil {
		if IsNotFound(err) {
			return true, fmt.Errorf("real server %s: virtual server gone: %w", uniqueRSName(it.vs, it.rs), err)
		}
		return false, err
	}
	for _, rs := range rss {
		if rs.Address != it.rs.Address || rs.Port != it.rs.Port {
			continue
		}
		if gracefulTerminationNeeded(it.vs.Protocol) && rs.ActiveConn+rs.InactiveConn != 0 {
			return false, nil
		}
		if err := g.ipvs.DeleteRealServer(it.vs, rs); err != nil {
			return false, fmt.Errorf("deleting destination %s: %w", rsString(rs), err)
		}
		return true, nil
	}
	return true, fmt.Errorf("real server %s not found", uniqueRSName(it.vs, it.rs))
}

// gracefulDelete is GracefulDeleteRS: delete the real server now if it has no
// connections (or is UDP/SCTP), else set its weight to 0 and keep it on the list. It
// reports whether the server was deleted.
func (g *graceful) gracefulDelete(vs *VirtualServer, rs *RealServer) (bool, error) {
	it := gracefulItem{vs: vs, rs: rs}
	deleted, err := g.deleteRS(it)
	if deleted {
		return true, err
	}
	q := *rs
	q.Weight = 0
	if err := g.ipvs.UpdateRealServer(vs, &q); err != nil {
		return false, err
	}
	g.list[uniqueRSName(vs, rs)] = it
	return false, err
}

// moveOut is MoveRSOutofGracefulDeleteList: the endpoint came back; delete the old real
// server now (the caller adds it again with weight 1).
func (g *graceful) moveOut(name string) error {
	it, ok := g.list[name]
	if !ok {
		return fmt.Errorf("real server %s is not being terminated", name)
	}
	if err := g.ipvs.DeleteRealServer(it.vs, it.rs); err != nil {
		return err
	}
	delete(g.list, name)
	return nil
}

// tryDelete is tryDeleteRs: retry every listed real server; those gone leave the list.
// It returns their names, sorted.
func (g *graceful) tryDelete() ([]string, error) {
	var gone []string
	var errs []error
	for _, name := range g.names() {
		deleted, err := g.deleteRS(g.list[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if deleted {
			delete(g.list, name)
			gone = append(gone, name)
		}
	}
	return gone, errors.Join(errs...)
}

func (g *graceful) names() []string {
	out := make([]string, 0, len(g.list))
	for n := range g.list {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
