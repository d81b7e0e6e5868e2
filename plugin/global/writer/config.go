package writer

import "time"

// Config is what the Corefile says about writing.
type Config struct {
	Suffix       string // the written Service is <svc><Suffix>
	MaxEndpoints int    // per EndpointSlice
	Workers      int
	Owner        string        // this writer's LabelWriter value: Owner(lease)
	Resync       time.Duration // how often a term looks at everything again; default DefaultResync
	// ServiceImports: also write a ServiceImport and MCS EndpointSlices per global service (see
	// mcs.go). Off, the ServiceImports written earlier are deleted.
	ServiceImports bool
	// GCOwner, when set, owns the Services and ServiceImports written (see owner.go).
	GCOwner *GCOwner
}
