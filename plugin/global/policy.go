package global

import (
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"
)

// policySource says who set the policy of an answer.
type policySource uint8

const (
	fromDefault    policySource = iota // the instance's, `policy MODE` without zones (all unless set)
	fromAnnotation                     // the service owner's, index.AnnotationPolicy
	fromZone                           // the zone's, `policy MODE ZONES...`
)

var policySources = [...]string{fromDefault: "default", fromAnnotation: "annotation", fromZone: "zone"}

func (s policySource) String() string { return policySources[s] }

// policyOf returns the policy of answers for svc (nil: none) in zone, and who set it: the zone's,
// else the service owner's, else the instance's.
func (g *Global) policyOf(zone string, svc *index.Service) (index.Policy, policySource) {
	if p, ok := g.policies[zone]; ok {
		return p, fromZone
	}
	if svc != nil {
		if p, ok := svc.Policy(); ok {
			return p, fromAnnotation
		}
	}
	return g.policies[""], fromDefault
}

// failedOver counts an answer of svc under a nearest policy when it skipped a nearer tier for
// having no ready record: only a name of the whole service (not one cluster's, or one pod's) can.
func failedOver(svc *index.Service, n name) {
	if n.cluster == "" && svc.Depleted() {
		telemetry.FailoverAnswers.Inc()
	}
}
