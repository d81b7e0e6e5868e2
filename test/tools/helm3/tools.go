//go:build tools

// Module helm3 builds the pinned Helm 3 CLI that the tests install the chart with: the chart must
// work with Helm 3 and 4, and a user needs neither installed to run the tests.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
