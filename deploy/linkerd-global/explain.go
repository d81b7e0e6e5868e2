package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/miekg/dns"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newExplainCmd(f *globalFlags) *cobra.Command {
	var output, dnsAddr, from string
	cmd := &cobra.Command{
		Use:   "explain NAME [--from pod/NAMESPACE/NAME | node/NAME | ADDRESS]",
		Args:  cobra.ExactArgs(1),
		Short: "Explain what a name answers and why (dig CH TXT NAME, formatted)",
		Long: `Explain what a name of the zone answers and why: a replica's CH TXT explanation of it
(docs/troubleshooting.md, "Explaining answers"), as tables: its summary, the tiers a nearest policy
keeps, and each record, answered or left out, with why. The zone's apex (e.g. global) explains the
replica itself.

With --from, the answer a client receives, with client_locality: the client asks from a Pod's IP,
a Node's InternalIP or an address, and the explanation says where the replica places it (node,
zone, region) and how it learned that (from its address, or as a resolver's ECS option of
client_ecs_from would give it), and the tier of every record from there.`,
		Example: `  linkerd global explain foo.db.global
  linkerd global explain foo.db.global --from pod/db/foo-0`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != tableOutput && output != jsonOutput {
				return fmt.Errorf("invalid output type %q: supported output types are table, json", output)
			}
			addr, stop, err := dnsAddr, func() {}, error(nil)
			if addr == "" { // else a ready replica of the installation (--dns-addr needs none)
				if addr, _, stop, err = replicaAddr(cmd.Context(), f, dnsAddr); err != nil {
					return err
				}
			}
			defer stop()
			var as netip.Addr
			if from != "" {
				if as, err = clientAddress(cmd.Context(), f, from); err != nil {
					return err
				}
			}
			rcode, lines, err := explanationAs(cmd.Context(), addr, args[0], as)
			if err != nil {
				return err
			}
			if as.IsValid() && len(lines) > 0 && lines[0].Has(contract.KeyService) && !lines[0].Has(contract.KeyClient) {
				fmt.Fprintf(cmd.ErrOrStderr(), "the replica ranks answers for no client (client_locality is off): %s gets the cluster's answer, as every client does\n", from)
			}
			if output == jsonOutput {
				return writeExplanationJSON(cmd.OutOrStdout(), rcode, lines)
			}
			return writeExplanation(cmd.OutOrStdout(), dns.Fqdn(args[0]), rcode, lines)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", tableOutput, "Output format. One of: table, json")
	cmd.Flags().StringVar(&dnsAddr, "dns-addr", "", "Ask the replica answering DNS at host:port (TCP) instead of a pod")
	cmd.Flags().StringVar(&from, "from", "", "Explain the answer of the client at pod/NAMESPACE/NAME (its IP), node/NAME (its InternalIP) or an IP address")
	return cmd
}

// clientAddress is the address --from names: a Pod's IP, a Node's first InternalIP, or an address.
func clientAddress(ctx context.Context, f *globalFlags, from string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(from); err == nil {
		return a, nil
	}
	kind, name, _ := strings.Cut(from, "/")
	if kind != "pod" && kind != "node" || name == "" {
		return netip.Addr{}, fmt.Errorf("--from %s: want pod/NAMESPACE/NAME, node/NAME or an IP address", from)
	}
	k, err := f.client()
	if err != nil {
		return netip.Addr{}, err
	}
	var addrs []string
	if kind == "pod" {
		ns, pod, ok := strings.Cut(name, "/")
		if !ok {
			return netip.Addr{}, fmt.Errorf("--from %s: want pod/NAMESPACE/NAME", from)
		}
		p, err := k.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return netip.Addr{}, err
		}
		addrs = []string{p.Status.PodIP}
	} else {
		n, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return netip.Addr{}, err
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				addrs = append(addrs, a.Address)
			}
		}
	}
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("--from %s: no address yet", from)
}

// writeExplanation prints the first line as a list of its fields, then each run of lines that
// start with the same key (records: addr=, tiers: tier=, clusters: cluster=) as a table, its
// columns the keys in the order they first appear. Nothing is assumed of which keys there are.
func writeExplanation(w io.Writer, name string, rcode int, lines []line) error {
	fmt.Fprintf(w, "%s (%s)\n", name, dns.RcodeToString[rcode])
	if len(lines) == 0 {
		_, err := fmt.Fprintln(w, "no explanation: the replica has `explain off`, or the name is not of its zones")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range lines[0] {
		fmt.Fprintf(tw, "  %s\t%s\n", cmpOrDash(f.Key), f.Value)
	}
	for i := 1; i < len(lines); {
		j := i + 1
		for j < len(lines) && len(lines[j]) > 0 && len(lines[i]) > 0 && lines[j][0].Key == lines[i][0].Key {
			j++
		}
		fmt.Fprintln(tw)
		writeTable(tw, lines[i:j])
		i = j
	}
	return tw.Flush()
}

// writeTable writes lines as a table whose columns are their keys.
func writeTable(tw *tabwriter.Writer, lines []line) {
	var cols []string
	for _, l := range lines {
		for _, f := range l {
			if !slices.Contains(cols, f.Key) {
				cols = append(cols, f.Key)
			}
		}
	}
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = strings.ToUpper(cmpOrDash(c))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, l := range lines {
		row := make([]string, len(cols))
		for i, c := range cols {
			row[i] = cmpOrDash(l.Get(c))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
}

func writeExplanationJSON(w io.Writer, rcode int, lines []line) error {
	out := struct {
		Rcode string              `json:"rcode"`
		Lines []map[string]string `json:"lines"`
	}{Rcode: dns.RcodeToString[rcode], Lines: []map[string]string{}}
	for _, l := range lines {
		m := map[string]string{}
		for _, f := range l {
			m[f.Key] = f.Value
		}
		out.Lines = append(out.Lines, m)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err == nil {
		_, err = fmt.Fprintf(w, "%s\n", b)
	}
	return err
}

func cmpOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
