package answer

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

// Replica is what the apex's explanation says of the replica answering.
type Replica struct {
	Synced          bool
	Leader          string // the writer's last known leader, "none"
	Leading, Writer bool
	Version         string
	Topology        *index.Topology
}

// explainReplica is the apex's explanation: this replica's state, then per member cluster its
// tier, global services and record counts, as the index counted them when it published: no
// record is read.
func explainReplica(rep Replica, snap *index.Snapshot) []string {
	topo := rep.Topology
	clusters := snap.Clusters()
	records := 0
	for _, c := range clusters {
		records += c.Ready + c.NotReady + c.Terminating + c.GatewayDown
	}
	lines := []string{contract.Line{}.Add(contract.KeySynced, rep.Synced).Add(contract.KeyServices, snap.Len()).
		Add(contract.KeyRecords, records).Add(contract.KeySerial, snap.Serial).Add(contract.KeyAge, age(snap.Published)).
		Add(contract.KeyCluster, topo.Local).Add(contract.KeyNamedBy, topo.NamedBy()).Add(contract.KeyLeader, rep.Leader).
		Add(contract.KeyLeading, rep.Leading).Add(contract.KeyWriter, rep.Writer).Add(contract.KeyVersion, rep.Version).String()}
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

// explainNameserver is the explanation of the nameserver's name, qname: the addresses it answers.
func explainNameserver(qname string, addrs []netip.Addr) []string {
	return []string{contract.Line{}.Add(contract.KeyNameserver, qname).Add(contract.KeyAddrs, joinAddrs(addrs)).String()}
}

// explainUnsynced is the explanation of any name below the apex before the first sync.
func explainUnsynced() []string {
	return []string{contract.Line{}.Add(contract.KeySynced, "false: waiting for the Kubernetes API; IN answers SERVFAIL until then").String()}
}

// explainSelection is the explanation of a name below the apex, from its selection, no longer
// than a reply of size bytes can hold.
func explainSelection(s *selection, size int) []string {
	switch {
	case s.ambiguous():
		return explainAmbiguous(s)
	case s.kind == kindService:
		return explainService(s, size)
	}
	return existsLine(s.exists, s.what())
}

// existsLine is the explanation of a name that is no global service's: whether it exists, and what
// it is or why not.
func existsLine(b bool, what string) []string {
	return []string{contract.Line{}.Add(contract.KeyExists, fmt.Sprintf("%t: %s", b, what)).String()}
}

// explainAmbiguous explains a short name that several namespaces have: each candidate's summary.
func explainAmbiguous(s *selection) []string {
	lines := []string{contract.Line{}.Add(contract.KeyName, s.name.svc).Add(contract.KeyAmbiguous, true).Add(contract.KeyNamespaces,
		strings.Join(s.namespaces(), ",")+": ask for "+s.name.svc+".<namespace>, or list one in prefer_namespaces").String()}
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
	summary := contract.Line{}.Add(contract.KeyService, svc.Key).Add(contract.KeyRecords, answered).Add(contract.KeyLeftOut, leftOut).
		Add(contract.KeySynced, true).Add(contract.KeySerial, s.snap.Serial).Add(contract.KeyAge, age(svc.Built())).
		Add(contract.KeyPolicy, strings.ReplaceAll(s.policy.String(), " ", "-")).Add(contract.KeyFrom, s.from)
	summary = explainQuerier(summary, s)
	if !s.exists {
		summary = summary.Add(contract.KeyExists, "false: no ready record here")
	}
	out := append([]string{summary.String()}, explainTiers(s)...)
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
		text := append(contract.Line{}.Add(contract.KeyAddr, r.Addr()).Add(contract.KeyHost, r.Host).Add(contract.KeyCluster, r.Cluster).
			Add(contract.KeyTier, l.tier).Add(contract.KeyWhy, why).Add(contract.KeyMember, member[r.Cluster]).Add(contract.KeyState, state), more...).String()
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
func recordState(s *selection, r *index.Record) (state string, more contract.Line) {
	n := s.name
	state = strings.ReplaceAll(r.State(), "_", "-")
	switch {
	case n.form.ofPorts():
		if more = portsOf(r, n); more == nil && r.Ready {
			state = "no-matching-port"
		}
	case s.inSRV(r) != s.answers(r):
		// The SRV answer keeps whole tiers of targets, the address answers of addresses of one
		// family: where a tier holds one family only, they can differ.
		more = contract.Line{}.Add(contract.KeySRV, map[bool]string{true: "answered", false: "left-out"}[s.inSRV(r)])
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

// explainQuerier adds to l, with client_locality, whom the answer is ranked from: the client's
// place and how it was learned, or unknown: the cluster's view.
func explainQuerier(l contract.Line, s *selection) contract.Line {
	switch {
	case s.learned == "":
		return l
	case s.client == nil:
		return l.Add(contract.KeyClient, "unknown")
	}
	return l.Add(contract.KeyClient, s.svc.Topology().Describe(s.client)).Add(contract.KeyClientFrom, s.learned)
}

// portsOf is port=P,Q for the ports of r that n asks for, nil for none.
func portsOf(r *index.Record, n name) contract.Line {
	var ps []string
	for _, p := range r.Ports {
		if n.ports.Matches(p) {
			ps = append(ps, strconv.Itoa(int(p.Port)))
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return contract.Line{}.Add(contract.KeyPort, strings.Join(ps, ","))
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
		line := contract.Line{}.Add(contract.KeyTier, t).Add(contract.KeyClusters, strings.Join(tiers[t].clusters, ",")).
			Add(contract.KeyReady, tiers[t].ready).Add(contract.KeyAnswered, answered)
		switch {
		case answered:
		case tiers[t].ready == 0:
			line = line.Add(contract.KeyWhy, "no-ready-record")
		default:
			line = line.Add(contract.KeyWhy, fmt.Sprintf("nearer-tiers-hold-%d", s.policy.Nearest))
		}
		lines = append(lines, line.String())
	}
	return lines
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
