package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/miekg/dns"
	"github.com/spf13/cobra"
)

func newExplainCmd(f *globalFlags) *cobra.Command {
	var output, dnsAddr string
	cmd := &cobra.Command{
		Use:   "explain NAME",
		Args:  cobra.ExactArgs(1),
		Short: "Explain what a name answers and why (dig CH TXT NAME, formatted)",
		Long: `Explain what a name of the zone answers and why: a replica's CH TXT explanation of it
(docs/troubleshooting.md, "Explaining answers"), as tables: its summary, the tiers a nearest policy
keeps, and each record, answered or left out, with why. The zone's apex (e.g. global) explains the
replica itself.`,
		Example: `  linkerd global explain foo.db.global`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != tableOutput && output != jsonOutput {
				return fmt.Errorf("invalid output type %q: supported output types are table, json", output)
			}
			addr, _, stop, err := replicaAddr(cmd.Context(), f, dnsAddr)
			if err != nil {
				return err
			}
			defer stop()
			rcode, lines, err := explanation(cmd.Context(), addr, args[0])
			if err != nil {
				return err
			}
			if output == jsonOutput {
				return writeExplanationJSON(cmd.OutOrStdout(), rcode, lines)
			}
			return writeExplanation(cmd.OutOrStdout(), dns.Fqdn(args[0]), rcode, lines)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", tableOutput, "Output format. One of: table, json")
	cmd.Flags().StringVar(&dnsAddr, "dns-addr", "", "Ask the replica answering DNS at host:port (TCP) instead of a pod")
	return cmd
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
