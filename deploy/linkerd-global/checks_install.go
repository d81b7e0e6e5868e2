package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/contract"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeversion "k8s.io/apimachinery/pkg/util/version"
)

// The categories, as `linkerd check` prints them.
const (
	categoryInstall  = "linkerd-global"
	categoryReplicas = "linkerd-global-replicas"
	categoryDNS      = "linkerd-global-dns"
	categoryTopology = "linkerd-global-topology"
	categoryPre      = "linkerd-global-pre"
)

// categories are the checks of an installed extension.
func (hc *healthChecker) categories() []category {
	return []category{
		{categoryInstall, append(hc.apiChecks(),
			checker{description: "linkerd-global Namespace exists", hintAnchor: "gdns-ns-exists", fatal: true, check: hc.checkNamespace},
			checker{description: "linkerd-global Deployment exists", hintAnchor: "gdns-deploy-exists", fatal: true, check: hc.checkDeployment},
			checker{description: "linkerd-global Deployment is ready", hintAnchor: "gdns-deploy-ready", retry: true, check: hc.checkDeploymentReady},
			checker{description: "RBAC grants what the Corefile's options need", hintAnchor: "gdns-rbac", check: hc.checkRBAC},
			checker{description: "RBAC grants the topology reads", hintAnchor: "gdns-rbac-topology", warning: true, check: hc.checkTopologyRBAC},
			checker{description: "RBAC grants reading Linkerd's Links", hintAnchor: "gdns-rbac-links", check: hc.checkLinksRBAC},
			checker{description: "an admission policy guards Linkerd's mirror labels", hintAnchor: "gdns-mirror-policy", warning: true, check: hc.checkMirrorPolicy},
		)},
		{categoryReplicas, []checker{
			{description: "every replica reports synced", hintAnchor: "gdns-synced", retry: true, check: hc.checkSynced},
			{description: "a leader holds the writer Lease and renews it", hintAnchor: "gdns-leader", retry: true, check: hc.checkLeader},
			{description: "no global service carries a warning", hintAnchor: "gdns-warnings", warning: true, check: hc.checkWarnings},
			{description: "the plugin's version matches the CLI's", hintAnchor: "gdns-version", warning: true, check: hc.checkVersion},
		}},
		{categoryDNS, []checker{
			{description: "the cluster DNS forwards the zones to the plugin", hintAnchor: "gdns-forward", check: hc.checkForwarding},
			{description: "NodeLocal DNSCache forwards the zones", hintAnchor: "gdns-nodelocal", check: hc.checkNodeLocal},
		}},
		{categoryTopology, []checker{
			{description: "this cluster has a name", hintAnchor: "gdns-cluster-name", check: hc.checkClusterName},
			{description: "every Linkerd Link's cluster has a name and a locality", hintAnchor: "gdns-link-locality", check: hc.checkLinks},
		}},
	}
}

// preCategories are the checks that need nothing installed: can it be?
func (hc *healthChecker) preCategories() []category {
	return []category{{categoryPre, append(hc.apiChecks(),
		checker{description: "can create the extension's objects", hintAnchor: "gdns-pre-create", check: hc.checkCanCreate},
		checker{description: "the cluster DNS Service exists", hintAnchor: "gdns-pre-cluster-dns", warning: true, check: hc.checkClusterDNSExists},
		checker{description: "Linkerd's Link CRD is installed", hintAnchor: "gdns-pre-links", warning: true, check: hc.checkLinkCRD},
	)}}
}

func (hc *healthChecker) apiChecks() []checker {
	return []checker{
		{description: "can initialize the client", hintAnchor: "gdns-k8s-api", fatal: true, check: func(context.Context) (err error) {
			hc.k, err = hc.flags.client()
			return err
		}},
		{description: "can query the Kubernetes API", hintAnchor: "gdns-k8s-api", fatal: true, check: func(context.Context) (err error) {
			hc.server, err = hc.k.client.Discovery().ServerVersion()
			return err
		}},
		{description: "the Kubernetes version is one this release was tested on", hintAnchor: "gdns-k8s-version", warning: true, check: hc.checkKubernetesVersion},
	}
}

// kubernetesTested is the oldest and the newest Kubernetes release `make test-k8s` passed on, as
// the Makefile's K8S_TESTED names them ("v1.30.14 v1.37.2"), set at build time. The chart states
// only the lowest version it needs: a newer Kubernetes is warned of here, never refused, so that
// upgrading the cluster blocks no `helm upgrade`.
var kubernetesTested = ""

// checkKubernetesVersion warns when the API server's minor release (hc.server, read by the check
// before) is outside kubernetesTested.
func (hc *healthChecker) checkKubernetesVersion(context.Context) error {
	tested := strings.Fields(kubernetesTested)
	if len(tested) != 2 {
		return errSkip // a build that does not know its range (go build, not make)
	}
	server, err := kubeversion.ParseGeneric(hc.server.GitVersion)
	if err != nil {
		return fmt.Errorf("the API server's version %q: %w", hc.server.GitVersion, err)
	}
	oldest, newest := kubeversion.MustParseGeneric(tested[0]), kubeversion.MustParseGeneric(tested[1])
	// From the oldest minor's first release to before the minor after the newest.
	if server.LessThan(kubeversion.MajorMinor(oldest.Major(), oldest.Minor())) || !server.LessThan(kubeversion.MajorMinor(newest.Major(), newest.Minor()+1)) {
		return fmt.Errorf("Kubernetes %s: this release was tested on %d.%d to %d.%d (%s and %s); it may work, but nothing here says so",
			hc.server.GitVersion, oldest.Major(), oldest.Minor(), newest.Major(), newest.Minor(), tested[0], tested[1])
	}
	return nil
}

func (hc *healthChecker) checkNamespace(ctx context.Context) (err error) {
	hc.ns, err = findNamespace(ctx, hc.k, hc.flags.namespace)
	return err
}

func (hc *healthChecker) checkDeployment(ctx context.Context) (err error) {
	hc.in, err = findInstallation(ctx, hc.k, hc.ns)
	return err
}

func (hc *healthChecker) checkDeploymentReady(ctx context.Context) error {
	d, err := hc.k.client.AppsV1().Deployments(hc.ns).Get(ctx, hc.in.deploy.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	switch s := d.Status; {
	case s.ObservedGeneration < d.Generation:
		return fmt.Errorf("Deployment %s: the rollout of generation %d has not started", d.Name, d.Generation)
	case s.UpdatedReplicas < want:
		return fmt.Errorf("Deployment %s: %d of %d replicas updated", d.Name, s.UpdatedReplicas, want)
	case s.AvailableReplicas < want:
		return fmt.Errorf("Deployment %s: %d of %d replicas available", d.Name, s.AvailableReplicas, want)
	}
	return nil
}

// checkLeader: with the writer on, some replica holds the Lease and has renewed it within its duration.
func (hc *healthChecker) checkLeader(ctx context.Context) error {
	c := hc.in.config
	if !c.Writer {
		return errSkip // DNS-only: there is nothing to lead
	}
	l, err := hc.k.client.CoordinationV1().Leases(c.LeaseNamespace).Get(ctx, c.LeaseName, metav1.GetOptions{})
	if isNotFound(err) {
		return fmt.Errorf("no Lease %s/%s: no replica has ever led the writer", c.LeaseNamespace, c.LeaseName)
	}
	if err != nil {
		return err
	}
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		return fmt.Errorf("Lease %s/%s has no holder: no replica leads the writer", c.LeaseNamespace, c.LeaseName)
	}
	duration := c.LeaseDuration
	if s.LeaseDurationSeconds != nil {
		duration = time.Duration(*s.LeaseDurationSeconds) * time.Second
	}
	if s.RenewTime == nil || time.Since(s.RenewTime.Time) > duration {
		since := "never"
		if s.RenewTime != nil {
			since = time.Since(s.RenewTime.Time).Round(time.Second).String() + " ago"
		}
		return fmt.Errorf("Lease %s/%s: %s renewed it %s, and it lasts %s: the leader is gone or cannot reach the API server", c.LeaseNamespace, c.LeaseName, *s.HolderIdentity, since, duration)
	}
	return nil
}

// checkVersion compares each replica's version (CoreDNS's, then +<build>) with the CLI's.
func (hc *healthChecker) checkVersion(context.Context) error {
	if len(hc.apexes) == 0 {
		return errors.New("no replica answered: see the synced check")
	}
	var differ []string
	for who, apex := range hc.apexes {
		v := apex.Get(contract.KeyVersion)
		if _, build, _ := strings.Cut(v, "+"); build != version {
			differ = append(differ, fmt.Sprintf("%s runs %s", who, v))
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("the CLI is %s; %s: upgrade the replicas to the CLI's build (`linkerd global install` with the flags you installed with, "+
			"| kubectl apply -f -; or helm upgrade ... --set image.tag=%s: docs/install.md#5-upgrade-and-roll-back), or run the CLI of their build",
			version, strings.Join(sorted(differ), ", "), version)
	}
	return nil
}
