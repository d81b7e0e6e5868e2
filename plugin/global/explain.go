package global

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
)

// The explanations of names, answered in class CH (with `explain on`, the default): TXT lines
// that say why the IN answer for the same name is what it is. dig CH TXT foo.db.global is the
// debugger: a summary first, then one line per endpoint in the name's scope, answered or left out
// (and why), in tier order. The zone's apex tells the replica's state. Each is rendered from the
// selection the IN answer is made of; nothing here is on the IN path.

// replica is what the apex's explanation says of the replica answering.
type replica struct {
	synced          bool
	leader          string // the writer's last known leader, "none"
	leading, writer bool
	version         string
	topology        *index.Topology
}

// explainReplica is the apex's explanation: this replica's state, then per member cluster its
// tier, global services and record counts, as the index counted them when it published: no
// record is read.
func explainReplica(rep replica, snap *index.Snapshot) []string {
	topo := rep.topology
	clusters := snap.Clusters()
	records := 0
	for _, c := range clusters {
		records += c.Ready + c.NotReady + c.Terminating + c.GatewayDown
	}
	lines := []string{contract.Line{}.Add(contract.KeySynced, rep.synced).Add(contract.KeyServices, snap.Len()).
		Add(contract.KeyRecords, records).Add(contract.KeySerial, snap.Serial).Add(contract.KeyAge, age(snap.Published)).
		Add(contract.KeyCluster, topo.Local).Add(contract.KeyNamedBy, topo.NamedBy()).Add(contract.KeyLeader, rep.leader).
		Add(contract.KeyLeading, rep.leading).Add(contract.KeyWriter, rep.writer).Add(contract.KeyVersion, rep.version).String()}
	names := slices.SortedFunc(maps.Keys(clusters), func(a, b string) int {
		return cmp.Or(cmp.Compare(topo.Tier(a), topo.Tier(b)), cmp.Compare(a, b))
	})
	for _, name := range names {
		c := clusters[name]
		lines = append(lines, contract.Line{}.Add(contract.KeyCluster, name).Add(contract.KeyTier, topo.Tier(name)).
			Add(contract.KeyWhy, topo.Why(name)).Add(contract.KeyLocality, topo.DescribeLocality(name)).Add(contract.KeyFrom, cmp.Or(topo.From(name), "nothing")).
			Add(contract.KeyServices, c.Services).Add(contract.KeyReady, c.Ready).Add(contract.KeyNotReady, c.NotReady).
			Add(contract.KeyTerminating, c.Terminating).Add(contract.KeyGatewayDown, c.GatewayDown).String())
	}
	return lines
}

// explainSelection is the explanation of a name below the apex, from its selection, no longer
// than a reply of size bytes can hold.
func explainSelection(s *selection, size int) []string {
	n := s.name
	switch {
	case s.ambiguous():
		return explainAmbiguous(s)
	case n.form == formNone && s.scheme == schemeMCS:
		return []string{"exists=false: not a name of this zone (names mcs): [<hostname>.<clusterid>.]<svc>.<ns>.svc, [_<port>.]_<proto>.<svc>.<ns>.svc, dns-version; <clusterid>.<svc>.<ns>.svc must not exist"}
	case n.form == formNone:
		return []string{"exists=false: not a name of this zone: [[<host>.]<cluster>.]<svc>.<ns>, [_<port>.]_<proto>.<svc>.<ns> or their short forms"}
	case n.form == formVersion:
		return []string{"exists=true: the version of the Multi-Cluster Services DNS specification this zone answers, " + mcsVersion}
	case n.form == formAboveNameserver, s.svc == nil && n.short && n.svc == nameserverParent && s.exists:
		return []string{"exists=true: an empty non-terminal above the zone's nameserver, " + nameserver(s.zone)}
	case n.form == formNamespace && !s.exists:
		return []string{fmt.Sprintf("exists=false: no global service answers in namespace %q", n.ns)}
	case n.form == formNamespace:
		return []string{fmt.Sprintf("exists=true: an empty non-terminal: global services answer in namespace %q", n.ns)}
	case s.svc == nil && !s.exists:
		return []string{fmt.Sprintf("exists=false: no global service %s", serviceName(n))}
	case s.svc == nil:
		return []string{fmt.Sprintf("exists=true: an empty non-terminal: namespace %s has global services that answer", n.svc)}
	}
	return explainService(s, size)
}

// explainAmbiguous explains a short name that several namespaces have: each candidate's summary.
func explainAmbiguous(s *selection) []string {
	lines := []string{fmt.Sprintf("name=%s ambiguous=true namespaces=%s: ask for %s.<namespace>, or list one in prefer_namespaces",
		s.name.svc, strings.Join(s.namespaces(), ","), s.name.svc)}
	for i := range s.candidates {
		lines = append(lines, explainService(&s.candidates[i], 0)[0])
	}
	return lines
}

// explainService is the explanation of a name of a global service, the summary first: each record
// in the name's scope, answered or why not, in the answer's order (ready first, IPv4 first, then
// by tier: the client's, when the answer is ranked from it).
func explainService(s *selection, size int) []string {
	n, svc := s.name, s.svc
	topo := svc.Topology()
	type line struct {
		r    *index.Record
		tier uint8
	}
	var lines []line
	answered, leftOut := 0, 0
	for r := range svc.Records().All() {
		if !n.scopes(r) {
			continue
		}
		if s.answers(r) {
			answered++
		} else {
			leftOut++
		}
		lines = append(lines, line{r, s.tier(r)})
	}
	slices.SortStableFunc(lines, func(a, b line) int {
		return cmp.Or(cmp.Compare(notReady(a.r), notReady(b.r)), cmp.Compare(a.r.Family(), b.r.Family()), cmp.Compare(a.tier, b.tier))
	})
	// Names below the apex are explained once synced only: SERVFAIL before.
	summary := fmt.Sprintf("service=%s records=%d left-out=%d synced=true serial=%d age=%d policy=%s from=%s",
		svc.Key, answered, leftOut, s.snap.Serial, age(svc.Built()), strings.ReplaceAll(s.policy.String(), " ", "-"), s.from)
	summary += explainQuerier(s)
	if !s.exists {
		summary += " exists=false: no ready record here"
	}
	out := append([]string{summary}, explainTiers(s)...)
	member := map[string]string{}
	for _, m := range svc.Members {
		member[topo.ClusterOf(m)] = m.Namespace + "/" + m.Name
	}
	// Lines past what a reply of size bytes holds are not made (the server truncates the reply
	// and says so): a TXT record takes at least its text and 13 bytes.
	least := 0
	for _, l := range out {
		least += len(l) + 13
	}
	for _, l := range lines {
		if least > size {
			break
		}
		r := l.r
		state, more := recordState(s, r)
		why := topo.Why(r.Cluster)
		if s.client != nil {
			why = topo.ClientWhy(r, s.client)
		}
		text := fmt.Sprintf("addr=%s host=%s cluster=%s tier=%d why=%s member=%s state=%s%s",
			r.Addr(), r.Host, r.Cluster, l.tier, why, member[r.Cluster], state, more)
		out, least = append(out, text), least+len(text)+13
	}
	return out
}

// notReady is 1 for a record that is not ready, else 0: ready records come first.
func notReady(r *index.Record) int {
	if r.Ready {
		return 0
	}
	return 1
}

// recordState is the state= of record r's line, and what follows it: the ports of an SRV name,
// or where the SRV answer of an address name differs from its address answers.
func recordState(s *selection, r *index.Record) (state, more string) {
	n := s.name
	state = strings.ReplaceAll(r.State(), "_", "-")
	switch {
	case n.form == formSRV || n.form == formProto:
		if more = portsOf(r, n); more == "" && r.Ready {
			state = "no-matching-port"
		}
	case s.inSRV(r) != s.answers(r):
		// The SRV answer keeps whole tiers of targets, the address answers of addresses of one
		// family: where a tier holds one family only, they can differ.
		more = map[bool]string{true: " srv=answered", false: " srv=left-out"}[s.inSRV(r)]
	}
	switch {
	case s.answers(r), state != index.StateReady:
	case s.zoned && !s.inZone(r):
		state = "other-zone"
	case n.form == formProto:
		state = "answered-by-port-names" // an empty non-terminal answers nothing itself
	default:
		state = "beyond-nearest"
	}
	return state, more
}

// explainQuerier says, with client_locality, whom the answer is ranked from: the client's place
// and how it was learned, or unknown: the cluster's view.
func explainQuerier(s *selection) string {
	switch {
	case s.learned == "":
		return ""
	case s.client == nil:
		return " client=unknown"
	}
	return " client=" + s.svc.Topology().Describe(s.client) + " client-from=" + s.learned
}

// portsOf is " port=P,Q" for the ports of r that n asks for, "" for none.
func portsOf(r *index.Record, n name) string {
	var ps []string
	for _, p := range r.Ports {
		if n.matchesPort(p) {
			ps = append(ps, strconv.Itoa(int(p.Port)))
		}
	}
	if len(ps) == 0 {
		return ""
	}
	return " port=" + strings.Join(ps, ",")
}

// explainTiers says, under a nearest policy, which tiers of members the name answers, and why
// each other is left out.
func explainTiers(s *selection) []string {
	if s.policy.Nearest == 0 {
		return nil
	}
	type tier struct {
		clusters []string
		ready    int
	}
	tiers := map[uint8]*tier{}
	add := func(t uint8, cluster string) {
		if tiers[t] == nil {
			tiers[t] = &tier{}
		}
		if cs := tiers[t].clusters; !slices.Contains(cs, cluster) {
			tiers[t].clusters = append(cs, cluster)
		}
	}
	if s.client == nil {
		for _, c := range s.svc.Clusters() {
			if s.name.cluster == "" || c.Name == s.name.cluster {
				add(c.Tier, c.Name)
			}
		}
	} else { // the client's tiers are its records', a cluster's in several
		for r := range s.svc.Records().All() {
			if s.name.scopes(r) {
				add(s.tier(r), r.Cluster)
			}
		}
	}
	for _, rs := range [][]index.Record{s.view.A, s.view.AAAA} {
		for _, r := range rs {
			add(r.Tier, r.Cluster)
			tiers[r.Tier].ready++
		}
	}
	var lines []string
	for _, t := range slices.Sorted(maps.Keys(tiers)) {
		answered := s.answersTier(t)
		line := fmt.Sprintf("tier=%d clusters=%s ready=%d answered=%t", t, strings.Join(tiers[t].clusters, ","), tiers[t].ready, answered)
		switch {
		case answered:
		case tiers[t].ready == 0:
			line += " why=no-ready-record"
		default:
			line += fmt.Sprintf(" why=nearer-tiers-hold-%d", s.policy.Nearest)
		}
		lines = append(lines, line)
	}
	return lines
}

// serviceName is the <ns>/<svc> a name asks for, or the bare name of a short one.
func serviceName(n name) string {
	if n.short {
		return n.svc + " in any namespace"
	}
	return n.ns + "/" + n.svc
}

// age is the whole seconds since t.
func age(t time.Time) int64 { return int64(time.Since(t).Seconds()) }

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// split cuts s into the 255-byte strings a TXT record holds.
func split(s string) []string {
	var out []string
	for len(s) > 255 {
		out, s = append(out, s[:255]), s[255:]
	}
	return append(out, s)
}
