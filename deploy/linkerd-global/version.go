package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/spf13/cobra"
)

// unavailable is what `linkerd version` prints for a server version it cannot read.
const unavailable = "unavailable"

func newVersionCmd(f *globalFlags) *cobra.Command {
	var clientOnly, short bool
	var dnsAddr string
	cmd := &cobra.Command{
		Use:   "version",
		Args:  cobra.NoArgs,
		Short: "Print the CLI's version and the version of every running replica",
		Long: `Print the CLI's version and the version of every running replica, as "linkerd version"
prints the CLI's and the control plane's: each replica says its own (dig CH TXT <zone>), so a
rollout in progress shows both versions, each with its pods.`,
		Example: `  linkerd global version
  linkerd global version --client --short`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			printVersion(w, short, "Client version", version)
			if clientOnly {
				return nil
			}
			servers := serverVersions(cmd.Context(), f, dnsAddr)
			for _, v := range slices.Sorted(maps.Keys(servers)) {
				if short {
					printVersion(w, true, "", v)
				} else {
					printVersion(w, false, "Server version", v+" ("+strings.Join(servers[v], ", ")+")")
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print the version of the client only")
	cmd.Flags().BoolVar(&short, "short", false, "Print the version numbers only")
	cmd.Flags().StringVar(&dnsAddr, "dns-addr", "", "Ask the one replica answering DNS at host:port (TCP) instead of every pod")
	return cmd
}

func printVersion(w io.Writer, short bool, what, v string) {
	if short {
		fmt.Fprintln(w, v)
	} else {
		fmt.Fprintf(w, "%s: %s\n", what, v)
	}
}

// serverVersions asks every running replica its build (the version after CoreDNS's, which the
// plugin reports as 1.15.0+<build>): the replicas by version, or {unavailable: why} when none
// could be asked.
func serverVersions(ctx context.Context, f *globalFlags, dnsAddr string) map[string][]string {
	hc := &healthChecker{flags: f, opts: &checkOptions{dnsAddr: dnsAddr}}
	defer hc.close()
	out := map[string][]string{}
	failed := func(err error) map[string][]string { return map[string][]string{unavailable: {err.Error()}} }
	var err error
	if hc.k, err = f.client(); err != nil {
		return failed(err)
	}
	if hc.ns, err = findNamespace(ctx, hc.k, f.namespace); err != nil {
		return failed(err)
	}
	if hc.in, err = findInstallation(ctx, hc.k, hc.ns); err != nil {
		return failed(err)
	}
	targets, problems, err := hc.replicas(ctx)
	if err != nil {
		return failed(err)
	}
	for _, t := range targets {
		_, lines, err := explanation(ctx, t.addr, hc.in.config.Zones[0])
		v := ""
		if err == nil && len(lines) > 0 {
			_, v, _ = strings.Cut(lines[0].Get(contract.KeyVersion), "+")
		}
		if v == "" {
			v = unavailable
		}
		out[v] = append(out[v], t.name)
	}
	for _, p := range problems {
		out[unavailable] = append(out[unavailable], p)
	}
	return out
}
