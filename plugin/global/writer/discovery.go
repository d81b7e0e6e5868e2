package writer

import (
	"context"
	"slices"
	"time"

	"github.com/globaldns/global/plugin/global/telemetry"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// ServiceImportCRD is the CRD that must be installed for ServiceImports to be written.
const ServiceImportCRD = mcsv1alpha1.ServiceImportFullName

// awaitImports returns true once the API's discovery d serves ServiceImports, false when ctx is
// done first. Until then (the CRD not installed) it says so once; the -global objects are written
// all the same (those of suffix). It asks again every resync, so installing the CRD later needs no
// restart.
func awaitImports(ctx context.Context, d discovery.DiscoveryInterface, resync time.Duration, suffix string) bool {
	missing := false
	retry := time.Second
	for {
		ok, err := importsInstalled(d)
		wait := resync
		switch {
		case err != nil:
			// The API is unreachable or failing: ask again soon, quietly (the watches say it).
			telemetry.Log.Debugf("writer: looking for the %s CRD: %v", ServiceImportCRD, err)
			wait, retry = retry, min(2*retry, time.Minute)
		case ok:
			if missing {
				telemetry.Log.Infof("serviceimports on: the %s CRD is installed now: writing ServiceImports", ServiceImportCRD)
			}
			telemetry.ServiceImportsUnavailable.Set(0)
			return true
		case !missing:
			missing = true
			telemetry.ServiceImportsUnavailable.Set(1)
			telemetry.Log.Warningf("serviceimports on: the %s CRD is not installed: no ServiceImports or MCS EndpointSlices are written "+
				"(the %s Services and their EndpointSlices are); install it (sigs.k8s.io/mcs-api config/crd) and they will be", ServiceImportCRD, suffix)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// importsInstalled asks the API's discovery whether ServiceImports are served in v1alpha1. ok is
// meaningful only when err is nil.
func importsInstalled(d discovery.DiscoveryInterface) (ok bool, err error) {
	l, err := d.ServerResourcesForGroupVersion(mcsv1alpha1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == mcsv1alpha1.ServiceImportPluralName }), nil
}
