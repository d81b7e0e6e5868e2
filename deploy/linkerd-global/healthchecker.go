package main

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
)

// checkOptions are check's own flags: Linkerd's (-o, --pre, --proxy, --wait, -n) and how to reach DNS.
type checkOptions struct {
	output         string
	pre, proxy     bool
	wait           time.Duration
	proxyNamespace string
	dnsAddr        string // one replica, instead of every pod
	clusterDNS     string // namespace/name of the cluster DNS Service
	clusterDNSAddr string // the cluster DNS, instead of a pod of that Service
}

// healthChecker holds what the checks found for the checks after them.
type healthChecker struct {
	flags *globalFlags
	opts  *checkOptions

	k       *kube
	server  *k8sversion.Info // the API server's version, as "can query the Kubernetes API" read it
	ns      string
	in      *installation
	apexes  map[string]line // pod (or --dns-addr) -> the first line of its apex explanation
	members []line          // the member-cluster lines of one replica's apex explanation
	closers []func()
}

func (hc *healthChecker) close() {
	for _, c := range hc.closers {
		c()
	}
}

// reach opens port of pod for the rest of the run.
func (hc *healthChecker) reach(ctx context.Context, pod *corev1.Pod, port int) (string, error) {
	addr, stop, err := reacher{k: hc.k, direct: hc.flags.directPods}.open(ctx, pod, port)
	if err == nil {
		hc.closers = append(hc.closers, stop)
	}
	return addr, err
}
