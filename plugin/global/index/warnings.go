package index

import (
	"fmt"
	"slices"
)

// Reasons for warnings.
const (
	ReasonClusterNameClash = "cluster_name_clash"
	ReasonDuplicateMirror  = "duplicate_mirror"
	ReasonUnlinkedCluster  = "unlinked_cluster" // a mirror of a cluster no Link names
	ReasonPortMismatch     = "port_mismatch"
	ReasonDuplicateHost    = "duplicate_hostname"
	// ReasonUnnamedMirrorAddress: a headless mirror lists addresses without hostnames.
	ReasonUnnamedMirrorAddress = "mirror_address_without_hostname"
)

func warnf(ws *[]Warning, reason, format string, args ...any) {
	*ws = append(*ws, Warning{Reason: reason, Detail: fmt.Sprintf(format, args...)})
}

// warnDuplicateHosts warns of each endpoint in v that has several addresses of one family.
func (s *Service) warnDuplicateHosts(v View) {
	for t := range v.Targets() {
		if len(t.A) > 1 || len(t.AAAA) > 1 {
			s.warnDuplicateHost(t.Cluster, t.Host)
		}
	}
}

func (s *Service) warnDuplicateHost(cluster, host string) {
	w := Warning{ReasonDuplicateHost, fmt.Sprintf("cluster %q has several endpoints with hostname %q: its per-pod name answers all of them", cluster, host), cluster, host}
	if !slices.Contains(s.Warnings, w) {
		s.Warnings = append(s.Warnings, w)
	}
}

// warnIfDuplicateHost warns of host in cluster if it has several ready addresses of one family.
func (s *Service) warnIfDuplicateHost(cluster, host string) {
	if v, _ := s.Host(cluster, host); len(v.A) > 1 || len(v.AAAA) > 1 {
		s.warnDuplicateHost(cluster, host)
	}
}
