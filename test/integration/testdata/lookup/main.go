// Command lookup resolves one name the way an application does and prints what it saw as one
// JSON line. TestAmbiguousShortNameClients runs it inside a mount namespace whose
// /etc/resolv.conf points at test servers.
//
//	lookup -client go NAME      Go's resolver (net.Resolver{PreferGo: true}, GODEBUG=netdns=go)
//	lookup -client cgo NAME     glibc's getaddrinfo through Go's cgo resolver (GODEBUG=netdns=cgo)
//	lookup -client getent NAME  glibc's `getent ahosts NAME`
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

type result struct {
	Addrs     []string `json:"addrs"`
	Err       string   `json:"err,omitempty"`
	NotFound  bool     `json:"notFound,omitempty"`
	Temporary bool     `json:"temporary,omitempty"`
	Exit      int      `json:"exit,omitempty"` // getent's exit status
	Ms        float64  `json:"ms"`
}

func main() {
	client := flag.String("client", "go", "go, cgo or getent")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: lookup -client go|cgo|getent NAME")
		os.Exit(2)
	}
	name := flag.Arg(0)
	var r result
	start := time.Now()
	switch *client {
	case "go", "cgo":
		res := &net.Resolver{PreferGo: *client == "go"}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		addrs, err := res.LookupHost(ctx, name)
		cancel()
		r.Addrs = addrs
		if err != nil {
			r.Err = err.Error()
			var de *net.DNSError
			if errors.As(err, &de) {
				r.NotFound, r.Temporary = de.IsNotFound, de.IsTemporary
			}
		}
	case "getent":
		out, err := exec.Command("getent", "ahosts", name).Output()
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				r.Addrs = append(r.Addrs, f[0])
			}
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.Exit = ee.ExitCode()
		} else if err != nil {
			r.Err = err.Error()
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown client", *client)
		os.Exit(2)
	}
	r.Ms = float64(time.Since(start).Microseconds()) / 1000
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		os.Exit(1)
	}
}
