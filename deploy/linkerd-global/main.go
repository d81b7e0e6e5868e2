// Command linkerd-global is the Linkerd extension of the global CoreDNS plugin: on the PATH, it is
// `linkerd global`, and `linkerd check` runs its checks. It follows Linkerd's extension contract
// (EXTENSIONS.md in linkerd/linkerd2): install, uninstall, check and _extension-metadata, the
// flags every extension accepts, and Linkerd's check output; status and explain read the replicas'
// own explanations (dig CH TXT).
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			os.Exit(int(ex))
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
