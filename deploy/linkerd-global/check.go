package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newCheckCmd(f *globalFlags) *cobra.Command {
	o := &checkOptions{output: tableOutput, wait: 300 * time.Second, clusterDNS: "kube-system/kube-dns"}
	cmd := &cobra.Command{
		Use:   "check [flags]",
		Args:  cobra.NoArgs,
		Short: "Check the global extension for potential problems",
		Long: `Check the global extension for potential problems: that it runs, that every replica has
synced and one leads the writer, that its RBAC grants what its options need, that the cluster DNS
(and NodeLocal DNSCache) forwards its zones to it, that every linked cluster has a name and a
locality, and that it is the CLI's version. Each failure points to its fix in
docs/troubleshooting.md. The exit status is 1 when a check fails.`,
		Example: `  linkerd global check
  linkerd global check --pre   # before installing`,
		// Linkerd's check passes its own flags to every extension: what this one does not know, it ignores.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.output {
			case tableOutput, jsonOutput, shortOutput:
			default:
				return fmt.Errorf("invalid output type %q: supported output types are %s, %s, %s", o.output, jsonOutput, tableOutput, shortOutput)
			}
			hc := &healthChecker{flags: f, opts: o}
			var cats []category
			switch {
			case o.pre && o.proxy:
				return fmt.Errorf("--pre and --proxy flags are mutually exclusive")
			case o.pre:
				cats = hc.preCategories()
			case o.proxy:
				// The extension has no data plane of its own: nothing to check.
			default:
				cats = hc.categories()
			}
			defer hc.close()
			if !runChecks(cmd.Context(), cmd.OutOrStdout(), o.output, time.Now().Add(o.wait), cats) {
				return exitError(1)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.output, "output", "o", o.output, "Output format. One of: table, json, short")
	fl.BoolVar(&o.pre, "pre", false, "Only run pre-installation checks, to determine if the extension can be installed")
	fl.BoolVar(&o.proxy, "proxy", false, "Only run data-plane checks (the extension has none)")
	fl.DurationVar(&o.wait, "wait", o.wait, "Maximum allowed time for all tests to pass")
	fl.StringVarP(&o.proxyNamespace, "namespace", "n", "", "Namespace to use for --proxy checks (default: all namespaces)")
	fl.StringVar(&o.dnsAddr, "dns-addr", "", "Check the one replica answering DNS at host:port (TCP) instead of every pod")
	fl.StringVar(&o.clusterDNS, "cluster-dns", o.clusterDNS, "namespace/name of the cluster DNS Service")
	fl.StringVar(&o.clusterDNSAddr, "cluster-dns-addr", "", "Ask the cluster DNS at host:port (TCP) instead of a pod of its Service")
	return cmd
}

// metadata is the answer to _extension-metadata (linkerd2 pkg/healthcheck ExtensionMetadataOutput).
// Checks is left out, not "always": `linkerd check` then runs this extension's checks only where a
// Namespace labelled linkerd.io/extension=global exists (linkerd2 cli/cmd/check_extensions.go,
// findExtensions; "always" would run them, and fail them, on every cluster without the extension).
// Every way of installing labels its namespace so.
type metadata struct {
	Name   string `json:"name"`
	Checks string `json:"checks,omitempty"`
}

func newMetadataCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "_extension-metadata",
		Hidden:             true,
		Args:               cobra.ArbitraryArgs,
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := json.Marshal(metadata{Name: "linkerd-" + extensionName})
			if err == nil {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			}
			return err
		},
	}
}

// exitError ends the program with its code and no message: what failed was printed already.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
