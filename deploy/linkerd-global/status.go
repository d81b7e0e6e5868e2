package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/spf13/cobra"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// clusterStatus is one row of status: a member cluster as one replica sees it.
type clusterStatus struct {
	Cluster  string `json:"cluster"`
	Locality string `json:"locality"`
	Source   string `json:"source"`         // what gave the locality: corefile, link, nodes, nothing
	Tier     *int   `json:"tier"`           // from this cluster; nil for a linked cluster without records
	Alive    *bool  `json:"gatewayAlive"`   // nil for this cluster, whose records need no gateway
	Services *int   `json:"globalServices"` // nil when unknown (DNS-only)
	Ready    int    `json:"readyRecords"`
	NotReady int    `json:"notReadyRecords"` // not ready, terminating, or behind a gateway that is down
}

func newStatusCmd(f *globalFlags) *cobra.Command {
	var output, dnsAddr string
	cmd := &cobra.Command{
		Use:   "status",
		Args:  cobra.NoArgs,
		Short: "Show each member cluster: its locality, tier, gateway and records",
		Long: `Show each cluster of the mesh as a replica sees it (dig CH TXT <zone>): its locality and
where that came from, its tier from this cluster, whether Linkerd's gateway to it is alive, its
global services and its ready records. Linked clusters without records yet are listed from their Links.`,
		Example: `  linkerd global status
  linkerd global status -o json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != tableOutput && output != jsonOutput {
				return fmt.Errorf("invalid output type %q: supported output types are table, json", output)
			}
			rows, err := status(cmd.Context(), f, dnsAddr)
			if err != nil {
				return err
			}
			if output == jsonOutput {
				b, err := json.MarshalIndent(rows, "", "  ")
				if err == nil {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
				}
				return err
			}
			return writeStatus(cmd.OutOrStdout(), rows)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", tableOutput, "Output format. One of: table, json")
	cmd.Flags().StringVar(&dnsAddr, "dns-addr", "", "Ask the replica answering DNS at host:port (TCP) instead of a pod")
	return cmd
}

// status reads one replica's apex explanation, the Links and the written slices into rows.
func status(ctx context.Context, f *globalFlags, dnsAddr string) ([]clusterStatus, error) {
	addr, in, stop, err := replicaAddr(ctx, f, dnsAddr)
	if err != nil {
		return nil, err
	}
	defer stop()
	_, lines, err := explanation(ctx, addr, in.config.Zones[0])
	if err != nil {
		return nil, err
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("%s answers no explanation of %s (is `explain off` set?)", addr, in.config.Zones[0])
	}
	k, err := f.client()
	if err != nil {
		return nil, err
	}
	services, err := servicesByCluster(ctx, k, in.config.Writer)
	if err != nil {
		return nil, err
	}
	local := lines[0].Get(contract.KeyCluster)
	var rows []clusterStatus
	for _, l := range lines[1:] {
		if !l.Has(contract.KeyCluster) {
			continue
		}
		rows = append(rows, memberRow(l, local, services))
	}
	ls, err := links(ctx, k)
	if err != nil {
		return nil, err
	}
	for _, lk := range ls {
		if slices.ContainsFunc(rows, func(r clusterStatus) bool { return r.Cluster == lk.cluster }) {
			continue
		}
		row := clusterStatus{Cluster: lk.cluster, Source: "nothing", Locality: "none"}
		if loc := in.config.locality(lk.cluster, lk.labels); len(loc) > 0 {
			row.Locality, row.Source = contract.DescribeLocality(loc), "link"
			if len(in.config.Localities[lk.cluster]) > 0 {
				row.Source = "corefile"
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// memberRow is the row of an apex member line (cluster=west tier=2 why=... locality=... from=...
// ready=3 not-ready=0 terminating=0 gateway-down=0).
func memberRow(l line, local string, services map[string]int) clusterStatus {
	num := func(k string) int { n, _ := strconv.Atoi(l.Get(k)); return n }
	row := clusterStatus{Cluster: l.Get(contract.KeyCluster), Locality: l.Get(contract.KeyLocality), Source: l.Get(contract.KeyFrom),
		Ready: num(contract.KeyReady), NotReady: num(contract.KeyNotReady) + num(contract.KeyTerminating) + num(contract.KeyGatewayDown)}
	if t, err := strconv.Atoi(l.Get(contract.KeyTier)); err == nil {
		row.Tier = &t
	}
	if row.Cluster != local {
		alive := num(contract.KeyGatewayDown) == 0
		row.Alive = &alive
	}
	if l.Has(contract.KeyServices) { // a newer plugin says it itself
		n := num(contract.KeyServices)
		row.Services = &n
	} else if services != nil {
		n := services[row.Cluster]
		row.Services = &n
	}
	return row
}

// servicesByCluster counts the global services with records of each cluster, from the slices the
// writer wrote (labelled with their source cluster); nil without a writer.
func servicesByCluster(ctx context.Context, k *kube, writer bool) (map[string]int, error) {
	if !writer {
		return nil, nil
	}
	list, err := k.client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + contract.SlicesManagedBy})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := map[string]int{}
	for _, s := range list.Items {
		c, svc := s.Labels[contract.LabelCluster], s.Labels[contract.LabelService]
		if key := c + "/" + s.Namespace + "/" + svc; c != "" && !seen[key] {
			seen[key] = true
			out[c]++
		}
	}
	return out, nil
}

func writeStatus(w io.Writer, rows []clusterStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tLOCALITY\tSOURCE\tTIER\tALIVE\tSERVICES\tREADY\tNOT READY")
	for _, r := range rows {
		tier, alive, services := "-", "-", "-"
		if r.Tier != nil {
			tier = strconv.Itoa(*r.Tier)
		}
		if r.Alive != nil {
			alive = map[bool]string{true: "True", false: "False"}[*r.Alive]
		}
		if r.Services != nil {
			services = strconv.Itoa(*r.Services)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", r.Cluster, r.Locality, r.Source, tier, alive, services, r.Ready, r.NotReady)
	}
	return tw.Flush()
}
