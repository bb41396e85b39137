package emulator

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/netfilter"
)

// IPSets is the ipset model the set match reads: the set types kube-proxy's IPVS mode
// uses (hash:ip, hash:ip,port, hash:ip,port,ip, hash:ip,port,net, hash:net,
// bitmap:port), loadable from `ipset save` text.
type IPSets struct {
	sets  map[string]*IPSet
	order []string
}

// NewIPSets returns an empty collection.
func NewIPSets() *IPSets { return &IPSets{sets: make(map[string]*IPSet)} }

// Get returns the named set, or nil.
func (s *IPSets) Get(name string) *IPSet {
	if s == nil {
		return nil
	}
	return s.sets[name]
}

// Names returns the set names in creation order.
func (s *IPSets) Names() []string { return slices.Clone(s.order) }

// IPSet is one set: its type, family and members.
type IPSet struct {
	Name    string
	Type    string // "hash:ip,port", ...
	Family  Family
	Options []string // the create line's other options, kept for Save
	dims    []dimKind
	members map[string]setMember // canonical member text → member
	keys    []string             // insertion order
	nets    []setMember          // members with a prefix (hash:net and ...,net), checked linearly
}

type dimKind uint8

const (
	dimIP dimKind = iota
	dimPort
	dimNet
)

var setTypes = map[string][]dimKind{
	"hash:ip":          {dimIP},
	"hash:net":         {dimNet},
	"hash:ip,port":     {dimIP, dimPort},
	"hash:ip,port,ip":  {dimIP, dimPort, dimIP},
	"hash:ip,port,net": {dimIP, dimPort, dimNet},
	"hash:net,port":    {dimNet, dimPort},
	"bitmap:port":      {dimPort},
}

// setMember is one element: per dimension an address prefix or a (protocol, port).
type setMember struct {
	prefixes []netip.Prefix // per address dimension, in order
	proto    uint8          // for the port dimension (0: any, as bitmap:port)
	port     uint16
	hasPort  bool
	nomatch  bool
	text     string
	extra    string // options after the element (comment, timeout, ...), kept for Save
}

// ParseIPSetSave parses `ipset save` output (create and add lines). Errors name the
// line.
func ParseIPSetSave(data []byte, file string) (*IPSets, error) {
	s := NewIPSets()
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		perr := func(format string, args ...any) error {
			return &ParseError{File: file, Line: n + 1, Err: fmt.Errorf(format, args...)}
		}
		f := strings.Fields(line)
		switch f[0] {
		case "create", "-N":
			if len(f) < 3 {
				return nil, perr("create needs a name and a type")
			}
			dims, ok := setTypes[f[2]]
			if !ok {
				return nil, perr("unsupported set type %q", f[2])
			}
			if s.sets[f[1]] != nil {
				return nil, perr("set %s already exists", f[1])
			}
			set := &IPSet{Name: f[1], Type: f[2], Family: IPv4, dims: dims, members: make(map[string]setMember)}
			for i := 3; i < len(f); i++ {
				if f[i] == "family" && i+1 < len(f) {
					switch f[i+1] {
					case "inet":
					case "inet6":
						set.Family = IPv6
					default:
						return nil, perr("unknown family %q", f[i+1])
					}
					i++
					continue
				}
				set.Options = append(set.Options, f[i])
			}
			s.sets[set.Name] = set
			s.order = append(s.order, set.Name)
		case "add", "-A":
			if len(f) < 3 {
				return nil, perr("add needs a set and an element")
			}
			set := s.sets[f[1]]
			if set == nil {
				return nil, perr("set %s does not exist", f[1])
			}
			// The options after the element, as written: the text after the third
			// field (found field by field, so a set named like its element is not
			// mistaken for it).
			extra, pos := strings.Join(f[3:], " "), 0
			for k := 0; k < 3; k++ {
				i := strings.Index(line[pos:], f[k])
				if i < 0 {
					pos = -1
					break
				}
				pos += i + len(f[k])
			}
			if pos >= 0 {
				extra = strings.TrimSpace(line[pos:])
			}
			if err := set.Add(f[2], extra); err != nil {
				return nil, perr("%v", err)
			}
		default:
			return nil, perr("unknown ipset command %q (want create or add)", f[0])
		}
	}
	return s, nil
}

// Add adds an element in ipset syntax ("10.96.0.1,tcp:443"); extra holds element
// options (nomatch, comment, timeout) as written.
func (set *IPSet) Add(elem, extra string) error {
	parts := strings.Split(elem, ",")
	if len(parts) != len(set.dims) {
		return fmt.Errorf("element %q does not fit set type %s", elem, set.Type)
	}
	m := setMember{text: elem, extra: extra, nomatch: strings.Contains(" "+extra+" ", " nomatch ")}
	for i, d := range set.dims {
		p := parts[i]
		switch d {
		case dimIP, dimNet:
			pre, err := parsePrefix(p, set.Family)
			if err != nil {
				return fmt.Errorf("element %q: %v", elem, err)
			}
			if d == dimIP && strings.Contains(p, "/") && pre.Bits() != pre.Addr().BitLen() {
				return fmt.Errorf("element %q: %s takes addresses, not networks", elem, set.Type)
			}
			m.prefixes = append(m.prefixes, pre)
		case dimPort:
			proto, port := "", p
			if a, b, ok := strings.Cut(p, ":"); ok {
				proto, port = a, b
			}
			n, err := strconv.ParseUint(port, 10, 16)
			if err != nil {
				return fmt.Errorf("element %q: invalid port %q", elem, port)
			}
			m.port, m.hasPort = uint16(n), true
			if set.Type != "bitmap:port" {
				m.proto = netfilter.ProtoTCP
				if proto != "" {
					pn, err := ParseProto(proto)
					if err != nil {
						return fmt.Errorf("element %q: %v", elem, err)
					}
					m.proto = pn
				}
			}
		}
	}
	key := m.key(set)
	if _, dup := set.members[key]; !dup {
		set.keys = append(set.keys, key)
	}
	set.members[key] = m
	set.nets = set.nets[:0]
	for _, k := range set.keys {
		mm := set.members[k]
		for _, pr := range mm.prefixes {
			if pr.Bits() != pr.Addr().BitLen() {
				set.nets = append(set.nets, mm)
				break
			}
		}
	}
	return nil
}

// key is the member's lookup key: the dimensions in canonical form.
func (m setMember) key(set *IPSet) string {
	var b strings.Builder
	ai := 0
	for i, d := range set.dims {
		if i > 0 {
			b.WriteByte(',')
		}
		if d == dimPort {
			if m.proto != 0 {
				b.WriteString(ProtoName(m.proto) + ":")
			}
			b.WriteString(strconv.Itoa(int(m.port)))
			continue
		}
		pr := m.prefixes[ai]
		ai++
		if pr.Bits() == pr.Addr().BitLen() {
			b.WriteString(pr.Addr().String())
		} else {
			b.WriteString(pr.String())
		}
	}
	return b.String()
}

type setResult uint8

const (
	setMiss setResult = iota
	setHit
	setNomatch
)

// test looks the packet up in the set; dirs picks, per dimension, the destination
// (true) or source (false) field.
func (set *IPSet) test(p *Packet, dirs []bool) setResult {
	if len(dirs) < len(set.dims) || FamilyOf(p.Dst) != set.Family {
		return setMiss
	}
	// The key is m.key's text, built in a buffer that stays on the stack (the map
	// lookup by string(key) does not copy it).
	var kbuf [96]byte
	var abuf [4]netip.Addr
	key, addrs := kbuf[:0], abuf[:0]
	var proto uint8
	var port uint16
	for i, d := range set.dims {
		if i > 0 {
			key = append(key, ',')
		}
		switch d {
		case dimIP, dimNet:
			a := p.Src
			if dirs[i] {
				a = p.Dst
			}
			addrs = append(addrs, a)
			if a.IsValid() {
				key = a.AppendTo(key)
			} else {
				key = append(key, a.String()...)
			}
		case dimPort:
			if !p.hasPorts() {
				return setMiss
			}
			port = p.SrcPort
			if dirs[i] {
				port = p.DstPort
			}
			proto = p.Proto
			if set.Type != "bitmap:port" {
				key = append(key, ProtoName(proto)...)
				key = append(key, ':')
			}
			key = strconv.AppendUint(key, uint64(port), 10)
		}
	}
	if m, ok := set.members[string(key)]; ok {
		if m.nomatch {
			return setNomatch
		}
		return setHit
	}
	// Members with networks: the most specific match wins (nomatch entries included).
	best, bestBits := setMiss, -1
	for _, m := range set.nets {
		if m.hasPort && (m.port != port || (m.proto != 0 && m.proto != proto)) {
			continue
		}
		ok, bits := true, 0
		for i, pr := range m.prefixes {
			if !pr.Contains(addrs[i]) {
				ok = false
				break
			}
			bits += pr.Bits()
		}
		if ok && bits > bestBits {
			bestBits = bits
			best = setHit
			if m.nomatch {
				best = setNomatch
			}
		}
	}
	return best
}

// Save renders the sets as `ipset save` prints them (without the kernel's generated
// bucketsize/initval options).
func (s *IPSets) Save() []byte {
	var b []byte
	for _, name := range s.order {
		set := s.sets[name]
		b = fmt.Appendf(b, "create %s %s", set.Name, set.Type)
		if set.Type != "bitmap:port" {
			fam := "inet"
			if set.Family == IPv6 {
				fam = "inet6"
			}
			b = fmt.Appendf(b, " family %s", fam)
		}
		for _, o := range set.Options {
			b = append(b, ' ')
			b = append(b, o...)
		}
		b = append(b, '\n')
		for _, k := range set.keys {
			m := set.members[k]
			b = fmt.Appendf(b, "add %s %s", set.Name, m.text)
			if m.extra != "" {
				b = append(b, ' ')
				b = append(b, m.extra...)
			}
			b = append(b, '\n')
		}
	}
	return b
}
