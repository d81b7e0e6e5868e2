package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"sigs.k8s.io/yaml"
)

// The cluster DNS each distribution ships, as it reads it, copied from the cited source. Only what
// a test machine cannot have is set: the cluster domain (cluster.local), and the files under
// /etc/coredns and /etc/resolv.conf, which the test rewrites to files of its own.

// kubeadm (and kind, which runs kubeadm): kubernetes cmd/kubeadm/app/phases/addons/dns/manifests.go,
// CoreDNSConfigMap, with DNSDomain cluster.local.
const kubeadmCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
`

// k3s (and k3d, which runs k3s): k3s-io/k3s manifests/coredns.yaml, ConfigMap coredns, with
// %{CLUSTER_DOMAIN}% cluster.local; its Deployment mounts ConfigMap coredns at /etc/coredns and the
// optional ConfigMap coredns-custom at /etc/coredns/custom.
const k3sCorefile = `.:53 {
    errors
    health
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
    }
    hosts /etc/coredns/NodeHosts {
      ttl 60
      reload 15s
      fallthrough
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
    import /etc/coredns/custom/*.override
}
import /etc/coredns/custom/*.server
`

// AKS: the ConfigMap coredns AKS keeps in kube-system (`kubectl -n kube-system get configmap coredns
// -o yaml`, which learn.microsoft.com/azure/aks/coredns-custom points to for the .server and
// .override names), with coredns-custom mounted at /etc/coredns/custom: its imports are relative to
// the Corefile.
const aksCorefile = `.:53 {
    errors
    ready
    health {
      lameduck 5s
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
      ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
    import custom/*.override
}
import custom/*.server
`

// NodeLocal DNSCache: kubernetes cluster/addons/dns/nodelocaldns/nodelocaldns.yaml, ConfigMap
// node-local-dns, with the pillars node-cache fills in: the domain, its local address and the
// kube-dns ClusterIP it binds, the upstream kube-dns (a closed loopback port here: no cluster.local
// query reaches it) and the node's resolvers.
const nodeLocalCorefile = `cluster.local:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . 127.0.0.1:9 {
            force_tcp
    }
    prometheus :9253
    health 169.254.20.10:8080
    }
in-addr.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . 127.0.0.1:9 {
            force_tcp
    }
    prometheus :9253
    }
ip6.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . 127.0.0.1:9 {
            force_tcp
    }
    prometheus :9253
    }
.:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . /etc/resolv.conf
    prometheus :9253
    }
`

// docAddress is the ClusterIP of coredns-global in docs/install.md's snippets.
const docAddress = "10.96.12.34"

// TestForwardingOnEveryDistribution starts each distribution's cluster DNS as it ships, with
// docs/install.md's snippet for it where that distribution reads it (its Corefile, the
// coredns-custom ConfigMap's .server file beside the Corefile's import, the EKS add-on's corefile
// value, the node-local-dns Corefile; kube-dns's stubDomains as the forward that dnsmasq makes of
// them), in front of a bin/coredns running the plugin, and asks the front a global name: the
// plugin's answer must come back.
func TestForwardingOnEveryDistribution(t *testing.T) {
	t.Parallel()
	ns, _ := fooAndWest(t)
	// DNS only, in this namespace: the shared control plane's other namespaces are other tests'.
	plugin := harness.StartCoreDNS(t, cp, "global:{{.Port}} {\n    global {\n        namespaces "+ns+"\n        endpointslices off\n    }\n}\n",
		harness.WithEnv("KUBECONFIG="+cp.Kubeconfig, "KUBERNETES_SERVICE_HOST="))
	qname := "foo." + ns + ".global."
	harness.Eventually(t, "the plugin's answer", func() error { return answers(t, plugin, qname, 4) })

	doc := readFile(t, repoPath(t, "docs/install.md"))
	snippets := installSnippets(t, doc)
	for name, s := range snippets {
		if name != "gke" && !strings.Contains(s, "\n    cache") && !strings.Contains(s, "\n        cache") {
			t.Errorf("docs/install.md's %s block has no cache:\n%s", name, s)
		}
	}
	// The Corefile's directory plays /etc/coredns, and a resolv.conf in it /etc/resolv.conf: no
	// query leaves the machine. Every front gets the same files; each reads what its layout says.
	onMachine := strings.NewReplacer("/etc/resolv.conf", "resolv.conf", "/etc/coredns/", "", docAddress, plugin.Addr)
	files := map[string]string{
		"resolv.conf":          "nameserver 127.0.0.1\n",
		"NodeHosts":            "",
		"custom/global.server": localize(onMachine.Replace(snippets["coredns-custom"]), repoPath(t)),
	}

	var stub map[string][]string
	testkit.Must(t, json.Unmarshal([]byte(snippets["gke"]), &stub))
	if len(stub["global"]) != 1 || len(stub) != 1 {
		t.Fatalf("docs/install.md's stubDomains: %v", stub)
	}
	// kube-dns hands each stub domain to dnsmasq as --server=/<domain>/<address>, which forwards
	// the domain's queries there and caches the answers.
	gke := fmt.Sprintf("global:53 {\n    cache\n    forward . %s\n}\n", stub["global"][0])

	for _, c := range []struct{ name, corefile string }{
		{"kubeadm", kubeadmCorefile + snippets["kubeadm"]},
		{"k3s", k3sCorefile},
		{"aks", aksCorefile},
		{"gke-kube-dns", gke},
		{"eks", snippets["eks"]},
		{"nodelocaldns", nodeLocalCorefile + snippets["nodelocaldns"]},
	} {
		t.Run(c.name, func(t *testing.T) {
			front := harness.StartCoreDNS(t, cp, localize(onMachine.Replace(c.corefile), repoPath(t)),
				harness.WithEnv("KUBERNETES_SERVICE_HOST="), harness.WithFiles(files))
			harness.Eventually(t, c.name+": the plugin's answer through the cluster DNS", func() error { return answers(t, front, qname, 4) })
		})
	}
}

// installSnippets are docs/install.md's forwarding snippets, by distribution: the Corefile block
// for kubeadm, the .server file of coredns-custom (k3s, AKS), kube-dns's stubDomains (GKE), the EKS
// add-on's corefile value and the node-local-dns block.
func installSnippets(t *testing.T, doc string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, b := range fencedBlocks(doc, "corefile") {
		switch {
		case strings.Contains(b, "rewrite edns0 subnet"):
			// The forwarder for client_locality ecs, no distribution's (TestECSFromTrustedSourcesOnly).
		case strings.Contains(b, "bind 169.254.20.10"):
			out["nodelocaldns"] = b
		case strings.Contains(b, "forward . "+docAddress):
			out["kubeadm"] = b
		}
	}
	for _, b := range fencedBlocks(doc, "yaml") {
		var v struct {
			Metadata struct{ Name string }
			Data     map[string]string
			Corefile string
		}
		testkit.Must(t, yaml.Unmarshal([]byte(b), &v))
		switch {
		case v.Metadata.Name == "coredns-custom":
			out["coredns-custom"] = v.Data["global.server"]
		case v.Metadata.Name == "kube-dns":
			out["gke"] = v.Data["stubDomains"]
		case v.Corefile != "":
			out["eks"] = v.Corefile
		}
	}
	for _, k := range []string{"kubeadm", "coredns-custom", "gke", "eks", "nodelocaldns"} {
		if out[k] == "" {
			t.Fatalf("docs/install.md has no %s snippet", k)
		}
	}
	// The EKS value replaces the add-on's whole Corefile: it must keep the cluster's own block.
	if !strings.Contains(out["eks"], ".:53 {") || !strings.Contains(out["eks"], "kubernetes cluster.local") {
		t.Errorf("the EKS corefile value drops the cluster's DNS:\n%s", out["eks"])
	}
	return out
}
