package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeLocalDNS is the ConfigMap of NodeLocal DNSCache (kubernetes cluster/addons/dns/nodelocaldns).
const nodeLocalDNS = "node-local-dns"

// clusterDNSAddr reaches the cluster DNS: --cluster-dns-addr, else a ready endpoint of its Service.
func (hc *healthChecker) clusterDNSAddr(ctx context.Context) (string, error) {
	if hc.opts.clusterDNSAddr != "" {
		return hc.opts.clusterDNSAddr, nil
	}
	ns, name, ok := strings.Cut(hc.opts.clusterDNS, "/")
	if !ok {
		return "", fmt.Errorf("--cluster-dns %q is not namespace/name", hc.opts.clusterDNS)
	}
	slices, err := hc.k.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return "", err
	}
	for _, s := range slices.Items {
		port := slicePort(s)
		for _, ep := range s.Endpoints {
			if port == 0 || len(ep.Addresses) == 0 || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			if hc.flags.directPods || ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				return net.JoinHostPort(ep.Addresses[0], strconv.Itoa(port)), nil
			}
			pod, err := hc.k.client.CoreV1().Pods(ns).Get(ctx, ep.TargetRef.Name, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return hc.reach(ctx, pod, port)
		}
	}
	return "", fmt.Errorf("Service %s has no ready endpoint with a TCP port", hc.opts.clusterDNS)
}

// slicePort is the TCP DNS port of slice s (kube-dns names it dns-tcp), 0 without one.
func slicePort(s discoveryv1.EndpointSlice) int {
	port := 0
	for _, p := range s.Ports {
		if p.Port == nil || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) {
			continue
		}
		if p.Name != nil && *p.Name == "dns-tcp" || port == 0 {
			port = int(*p.Port)
		}
	}
	return port
}

// checkForwarding asks the cluster DNS for each zone's SOA: the plugin's own (ns1.dns.<zone>)
// proves the zone reaches it; the public .global TLD, or nothing, answers otherwise.
func (hc *healthChecker) checkForwarding(ctx context.Context) error {
	addr, err := hc.clusterDNSAddr(ctx)
	if err != nil {
		return err
	}
	var problems []string
	for _, zone := range hc.in.config.Zones {
		if p := forwards(ctx, addr, zone); p != "" {
			problems = append(problems, p)
		}
	}
	return problemsErr(problems)
}

// forwards asks addr for zone's SOA and says what is wrong with the answer, "" when it is the plugin's.
func forwards(ctx context.Context, addr, zone string) string {
	m := new(dns.Msg)
	m.SetQuestion(zone, dns.TypeSOA)
	r, err := exchange(ctx, addr, m)
	if err != nil {
		return fmt.Sprintf("%s: the cluster DNS does not answer: %v", zone, err)
	}
	for _, rr := range r.Answer {
		soa, ok := rr.(*dns.SOA)
		if !ok {
			continue
		}
		if strings.EqualFold(soa.Ns, "ns1.dns."+zone) && strings.EqualFold(soa.Mbox, "hostmaster.dns."+zone) {
			return ""
		}
		return fmt.Sprintf("%s: the cluster DNS answers the SOA of %s (%s), not this plugin's (ns1.dns.%s): the zone is not forwarded to the plugin", zone, soa.Hdr.Name, soa.Ns, zone)
	}
	return fmt.Sprintf("%s: the cluster DNS answers %s with no SOA: the zone is not forwarded to the plugin", zone, dns.RcodeToString[r.Rcode])
}

// checkNodeLocal: where NodeLocal DNSCache runs, pods ask it, and it sends what it has no block
// for to the node's upstream resolvers: each zone needs a block forwarding elsewhere.
func (hc *healthChecker) checkNodeLocal(ctx context.Context) error {
	cm, err := hc.k.client.CoreV1().ConfigMaps("kube-system").Get(ctx, nodeLocalDNS, metav1.GetOptions{})
	if isNotFound(err) {
		return errSkip
	}
	if err != nil {
		return err
	}
	blocks, err := parseCorefile("ConfigMap kube-system/"+nodeLocalDNS, cm.Data["Corefile"])
	if err != nil {
		return err
	}
	var problems []string
	for _, zone := range hc.in.config.Zones {
		if p := nodeLocalForwards(blocks, zone); p != "" {
			problems = append(problems, p)
		}
	}
	return problemsErr(problems)
}
