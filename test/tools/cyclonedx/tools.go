//go:build tools

// Package cyclonedx pins the SBOM generator `make release` runs: CycloneDX's cyclonedx-gomod.
package cyclonedx

import _ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
