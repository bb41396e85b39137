package kubeproxy

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/proxy/iptables/emulator"
)

// fillStale sets every exported field reachable in v (a settable struct) to a non-zero
// value: what an earlier packet would have left there.
func fillStale(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		switch {
		case f.Type() == reflect.TypeFor[netip.Addr]():
			f.Set(reflect.ValueOf(netip.MustParseAddr("192.0.2.99")))
		case f.Kind() == reflect.Struct:
			fillStale(t, f)
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.String:
			f.SetString("stale0")
		case f.CanInt():
			f.SetInt(7)
		case f.CanUint():
			f.SetUint(7)
		default:
			t.Fatalf("fillStale: field %s of %s: kind %s not handled", v.Type().Field(i).Name, v.Type(), f.Kind())
		}
	}
}

// TestFromNetsimWritesEveryField: fromNetsim fills every field of the emulator's packet,
// field by field, into the packet a handler reuses: one full of an earlier packet's
// values comes out as a zero one does, with and without a conntrack entry, before and
// after conntrack, with an expiry or none. A field added to emulator.Packet or its Conntrack and not written
// fails here.
func TestFromNetsimWritesEveryField(t *testing.T) {
	ctx := &netsim.Context{}
	conn := &netsim.Conn{
		Orig:   netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.244.0.5"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 40000, DstPort: 80},
		Reply:  netfilter.Tuple{Proto: netfilter.ProtoTCP, Src: netip.MustParseAddr("10.244.1.7"), Dst: netip.MustParseAddr("10.244.0.5"), SrcPort: 8080, DstPort: 40000},
		Status: netfilter.StatusConfirmed | netfilter.StatusDstNAT, Mark: 3,
		Expires: time.Unix(100, 0),
	}
	plain := netsim.Packet{Proto: netfilter.ProtoTCP, Src: conn.Orig.Src, Dst: conn.Orig.Dst, SrcPort: 40000, DstPort: 80, TTL: 64, InIface: "eth0", Data: make([]byte, 60)}
	tracked := plain
	tracked.Conn, tracked.CtState, tracked.CtReply = conn, netfilter.CtEstablished, false
	noExpiry := tracked // an entry not yet confirmed has no expiry
	noExpiry.Conn = &netsim.Conn{Orig: conn.Orig, Reply: conn.Reply}
	for _, p := range []*netsim.Packet{&plain, &tracked, &noExpiry} {
		for _, table := range []string{emulator.TableRaw, emulator.TableNAT} {
			var fresh, stale emulator.Packet
			fromNetsim(&fresh, p, ctx, table)
			fillStale(t, reflect.ValueOf(&stale).Elem())
			fromNetsim(&stale, p, ctx, table)
			if !reflect.DeepEqual(fresh, stale) {
				t.Errorf("conn %v, table %s: a reused packet came out\n%+v\nwant (from a zero one)\n%+v", p.Conn != nil, table, stale, fresh)
			}
		}
	}
}
