// Package deploy holds what installs the plugin in a cluster. Its Go part is the Helm chart itself,
// embedded, so that tools render the chart in this directory and never a copy of it.
package deploy

import (
	"embed"
	"io/fs"
)

//go:embed all:chart
var chart embed.FS

// Chart is deploy/chart: Chart.yaml, values.yaml and the rest at its root.
func Chart() fs.FS {
	sub, err := fs.Sub(chart, "chart")
	if err != nil {
		panic(err) // the directory is embedded above: it is there
	}
	return sub
}
