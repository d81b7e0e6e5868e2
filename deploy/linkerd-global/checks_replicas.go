package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

// target is one replica's DNS as the checks reach it.
type target struct {
	name string // the pod's, or the --dns-addr
	pod  *corev1.Pod
	addr string
}

// replicas reaches every replica of the installation (or the --dns-addr one); problems are the
// pods that cannot be asked.
func (hc *healthChecker) replicas(ctx context.Context) (targets []target, problems []string, err error) {
	if hc.opts.dnsAddr != "" {
		return []target{{name: hc.opts.dnsAddr, addr: hc.opts.dnsAddr}}, nil, nil
	}
	pods, err := hc.in.pods(ctx, hc.k)
	if err != nil {
		return nil, nil, err
	}
	if len(pods) == 0 {
		return nil, nil, fmt.Errorf("Deployment %s/%s has no pods", hc.ns, hc.in.deploy.Name)
	}
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodRunning {
			problems = append(problems, fmt.Sprintf("pod %s is %s", p.Name, cmp.Or(string(p.Status.Phase), "not running")))
			continue
		}
		addr, err := hc.reach(ctx, p, dnsPort(p))
		if err != nil {
			problems = append(problems, fmt.Sprintf("pod %s: %v", p.Name, err))
			continue
		}
		targets = append(targets, target{name: p.Name, pod: p, addr: addr})
	}
	return targets, problems, nil
}

// checkSynced asks every replica for its state (dig CH TXT <zone>): each must say synced=true.
func (hc *healthChecker) checkSynced(ctx context.Context) error {
	targets, problems, err := hc.replicas(ctx)
	if err != nil {
		return err
	}
	hc.apexes, hc.members = map[string]line{}, nil
	zone := hc.in.config.Zones[0]
	for _, t := range targets {
		rcode, lines, err := explanation(ctx, t.addr, zone)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s does not answer DNS: %v", t.name, err))
			continue
		case len(lines) == 0:
			problems = append(problems, fmt.Sprintf("%s answers CH TXT %s with %s and no explanation (is `explain off` set?)", t.name, zone, dns.RcodeToString[rcode]))
			continue
		}
		hc.apexes[t.name] = lines[0]
		if hc.members == nil {
			hc.members = lines[1:]
		}
		if lines[0].Get(contract.KeySynced) != "true" {
			problems = append(problems, fmt.Sprintf("%s has not synced with the Kubernetes API (it answers SERVFAIL)", t.name))
		}
	}
	return problemsErr(problems)
}

// checkWarnings reads each replica's gauges of what it could not use as it is: objects with
// problems, and global services blocked by an object it does not manage.
func (hc *healthChecker) checkWarnings(ctx context.Context) error {
	if hc.opts.dnsAddr != "" {
		return errSkip // a DNS address alone says nothing of the metrics
	}
	targets, problems, err := hc.replicas(ctx)
	if err != nil {
		return err
	}
	for _, t := range targets {
		port := containerPort(t.pod, 0, "metrics")
		if port == 0 {
			problems = append(problems, fmt.Sprintf("%s has no port named metrics", t.name))
			continue
		}
		addr, err := hc.reach(ctx, t.pod, port)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", t.name, err))
			continue
		}
		samples, err := scrape(ctx, addr, "coredns_global_")
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: metrics: %v", t.name, err))
			continue
		}
		problems = append(problems, warningsOf(t.name, samples)...)
	}
	return problemsErr(problems)
}

// warningsOf says what the gauges of replica who report.
func warningsOf(who string, samples map[string]float64) []string {
	var out []string
	for series, v := range samples {
		switch {
		case v == 0:
		case strings.HasPrefix(series, "coredns_global_objects_with_problems{"):
			out = append(out, fmt.Sprintf("%s: %g %s objects skipped or partly used (its log says why; coredns_global_skipped_total by reason)", who, v, labelValue(series, "kind")))
		case series == "coredns_global_writer_conflicts":
			out = append(out, fmt.Sprintf("%s: %g global services blocked by an object of the same name this plugin does not manage (Events GlobalServiceConflict)", who, v))
		}
	}
	return out
}

// labelValue is the value of label in a series such as name{a="b"}.
func labelValue(series, label string) string {
	_, rest, ok := strings.Cut(series, label+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// problemsErr is one error listing problems, one a line, or nil.
func problemsErr(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(sorted(problems), "\n"))
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
