//go:build tools

// Package promtool pins the promtool the monitoring test checks the alerting rules with.
package promtool

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
