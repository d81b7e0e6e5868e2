package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Linkerd's check output (linkerd2 pkg/healthcheck): categories of checks printed as they run,
// √ ‼ ×, a hint URL under each failure, and the same results as JSON with -o json, which `linkerd
// check` asks of every extension and parses into its own output.
const (
	tableOutput = "table"
	jsonOutput  = "json"
	shortOutput = "short"

	okStatus   = "\u221A" // √
	warnStatus = "\u203C" // ‼
	failStatus = "\u00D7" // ×

	// hintBase is where every check's hint points: a section of docs/troubleshooting.md per check.
	hintBase = "https://github.com/globaldns/global/blob/main/docs/troubleshooting.md#"
)

// retryWindow is the pause between two tries of a check that may still come true.
var retryWindow = 2 * time.Second

// errSkip is returned by a check that does not apply (a DNS-only install has no leader to
// check): it is not reported, as Linkerd's SkipError.
var errSkip = errors.New("skipped")

// checker is one check.
type checker struct {
	description string
	hintAnchor  string
	fatal       bool // a failure ends the run: what follows cannot succeed
	warning     bool // a failure is reported, the run still succeeds
	retry       bool // retried until --wait passes: it may still come true (pods starting)
	check       func(context.Context) error
}

type category struct {
	name     string
	checkers []checker
}

// result is one check's outcome, in JSON as Linkerd's healthcheck.Check.
type result struct {
	Description string `json:"description"`
	Hint        string `json:"hint,omitempty"`
	Error       string `json:"error,omitempty"`
	Result      string `json:"result"`
}

type categoryResult struct {
	Name   string    `json:"categoryName"`
	Checks []*result `json:"checks"`
}

// checkOutput is Linkerd's healthcheck.CheckOutput.
type checkOutput struct {
	Success    bool              `json:"success"`
	Categories []*categoryResult `json:"categories"`
}

// runChecks runs the categories' checks in order, retrying those that may come true until
// deadline, and writes them in format as they complete. It reports whether all passed.
func runChecks(ctx context.Context, w io.Writer, format string, deadline time.Time, cats []category) bool {
	out := checkOutput{Success: true, Categories: []*categoryResult{}}
	last := "" // the category whose heading was printed last
	for _, cat := range cats {
		var cr *categoryResult
		for _, c := range cat.checkers {
			err := runOne(ctx, c, deadline)
			if errors.Is(err, errSkip) {
				continue
			}
			r := &result{Description: c.description, Result: "success"}
			if err != nil {
				r.Error, r.Hint, r.Result = err.Error(), hintBase+c.hintAnchor, "error"
				if c.warning {
					r.Result = "warning"
				} else {
					out.Success = false
				}
			}
			if cr == nil {
				cr = &categoryResult{Name: cat.name, Checks: []*result{}}
				out.Categories = append(out.Categories, cr)
			}
			cr.Checks = append(cr.Checks, r)
			if format != jsonOutput && (format != shortOutput || err != nil) {
				last = printResult(w, last, cat.name, r)
			}
			if err != nil && c.fatal {
				return finish(w, format, out, last != "")
			}
		}
	}
	return finish(w, format, out, last != "")
}

// runOne runs c, again every retryWindow while it fails and may still come true before deadline.
func runOne(ctx context.Context, c checker, deadline time.Time) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.check(cctx)
		cancel()
		if err == nil || errors.Is(err, errSkip) || !c.retry || time.Now().Add(retryWindow).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryWindow):
		}
	}
}

// printResult prints r of category cat, under cat's heading when last was another's.
func printResult(w io.Writer, last, cat string, r *result) string {
	if cat != last {
		if last != "" {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, cat)
		fmt.Fprintln(w, strings.Repeat("-", len(cat)))
	}
	mark := okStatus
	switch r.Result {
	case "warning":
		mark = warnStatus
	case "error":
		mark = failStatus
	}
	fmt.Fprintf(w, "%s %s\n", mark, r.Description)
	if r.Error != "" {
		fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(r.Error, "\n", "\n    "))
		fmt.Fprintf(w, "    see %s for hints\n", r.Hint)
	}
	return cat
}

// finish writes the JSON, or the closing line Linkerd prints.
func finish(w io.Writer, format string, out checkOutput, printed bool) bool {
	if format == jsonOutput {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintf(w, "%s\n", b)
		return out.Success
	}
	if printed {
		fmt.Fprintln(w)
	}
	mark := okStatus
	if !out.Success {
		mark = failStatus
	}
	fmt.Fprintf(w, "Status check results are %s\n", mark)
	return out.Success
}
