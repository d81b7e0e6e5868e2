// Command demo is `make run`: a local control plane with a Linkerd multicluster StatefulSet and
// bin/coredns answering foo.global on 127.0.0.1:1053, until Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/globaldns/global/test/demo"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:1053", "DNS address to serve the demo on")
	corefile := flag.String("corefile", "corefile/demo.Corefile", "the demo Corefile")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := demo.Start(ctx, demo.Options{Addr: *addr, Corefile: *corefile, Out: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	defer d.Stop()

	wait, cancel := context.WithTimeout(ctx, time.Minute)
	err = d.WaitAnswers(wait)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return
	}
	fmt.Printf(`
The demo is up. This cluster is east (us-east-1a): StatefulSet foo in namespace db, 3 pods.
Linkerd mirrors foo from west (same region) and north (another region) as foo-west and foo-north.
coredns answers the union on %s, nearest first. Logs and data: %s
Try (dig is in Debian's bind9-dnsutils):
`, *addr, d.CP.Dir)
	d.Show(os.Stdout)
	fmt.Printf("\nKUBECONFIG=%s kubectl get svc,endpointslices -n db   # the objects behind it\nCtrl-C stops everything.\n", d.CP.Kubeconfig)
	<-ctx.Done()
	fmt.Println("\nstopping ...")
}
