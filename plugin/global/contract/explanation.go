package contract

import (
	"fmt"
	"strings"
)

// An explanation (`dig CH TXT <name>`) is TXT strings of key=value words, one line each. The
// keys readers depend on are named here; Line writes a line, ParseLine reads one.
const (
	// The apex's first line: the replica.
	KeySynced   = "synced"   // true once the first sync is done
	KeyServices = "services" // global services (the apex); a member cluster's (its lines)
	KeyRecords  = "records"
	KeySerial   = "serial"
	KeyAge      = "age"     // seconds since the answer's data changed
	KeyCluster  = "cluster" // this cluster's name (the apex); a member cluster (its lines)
	KeyNamedBy  = "named-by"
	KeyLeader   = "leader"
	KeyLeading  = "leading"
	KeyWriter   = "writer"
	KeyVersion  = "version"
	// The apex's other lines: one per member cluster.
	KeyTier        = "tier"
	KeyWhy         = "why"
	KeyLocality    = "locality"
	KeyFrom        = "from"
	KeyReady       = "ready"
	KeyNotReady    = "not-ready"
	KeyTerminating = "terminating"
	KeyGatewayDown = "gateway-down"
	// A name's explanation: what it is, or its summary (the first line) and, under nearest, one
	// line per tier; then one line per record.
	KeyExists     = "exists" // false: prose why; true: prose what
	KeyName       = "name"
	KeyAmbiguous  = "ambiguous"
	KeyNamespaces = "namespaces"
	KeyService    = "service"
	KeyLeftOut    = "left-out"
	KeyPolicy     = "policy"
	KeyClient     = "client"
	KeyClientFrom = "client-from"
	KeyClusters   = "clusters"
	KeyAnswered   = "answered"
	KeyAddr       = "addr"
	KeyHost       = "host"
	KeyMember     = "member"
	KeyState      = "state"
	KeyPort       = "port"
	KeySRV        = "srv"
	// The nameserver's name.
	KeyNameserver = "nameserver"
	KeyAddrs      = "addrs"
)

// Field is one key=value word of a line.
type Field struct{ Key, Value string }

// Line is one line of an explanation, its fields in order.
type Line []Field

// Add appends key=value to l (value as fmt.Sprint writes it), and returns l.
func (l Line) Add(key string, value any) Line { return append(l, Field{key, fmt.Sprint(value)}) }

// String writes l: its fields, key=value, separated by spaces.
func (l Line) String() string {
	var b strings.Builder
	for i, f := range l {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.Key)
		b.WriteByte('=')
		b.WriteString(f.Value)
	}
	return b.String()
}

// ParseLine reads the key=value words of s, leniently: a word without = belongs to the value
// before it (`exists=false: no global service db/nope`), so new keys and prose both parse.
func ParseLine(s string) Line {
	var l Line
	for _, w := range strings.Fields(s) {
		k, v, ok := strings.Cut(w, "=")
		switch {
		case ok && k != "":
			l = append(l, Field{Key: k, Value: v})
		case len(l) == 0:
			l = append(l, Field{Value: w})
		default:
			l[len(l)-1].Value += " " + w
		}
	}
	return l
}

// Get returns the value of key, "" without it.
func (l Line) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// Has reports whether l has key.
func (l Line) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

// Lookup returns the value of key, and whether l has it.
func (l Line) Lookup(key string) (string, bool) {
	for _, f := range l {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}
