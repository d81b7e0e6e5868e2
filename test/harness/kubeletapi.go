package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/portforward"
)

// Serve starts the kubelets' HTTPS API for the pods k runs, on 127.0.0.1, and has each of nodes
// report it (InternalIP 127.0.0.1, its port as the daemon endpoint), so that the API server's
// pods/log and pods/portforward reach the pods' processes: `kubectl logs`, `kubectl port-forward`
// and the CLI's port-forwards work as on a cluster. It serves what the kubelet of the pinned
// Kubernetes serves at those paths (pkg/kubelet/server/server.go getContainerLogs and
// getPortForward), for the API server only: the API server dials it with no CA configured, so
// without verifying this certificate (pkg/kubelet/client/kubelet_client.go), and it asks for
// no client certificate. It stops with the test.
func (k *Kubelet) Serve(ctx context.Context, nodes ...string) error {
	cert, err := selfSigned()
	if err != nil {
		return err
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", k.containerLogs)
	mux.HandleFunc("/portForward/{ns}/{pod}", k.portForward)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	k.t.Cleanup(func() { srv.Close() })
	port := int32(l.Addr().(*net.TCPAddr).Port)
	for _, name := range nodes {
		node, err := k.cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Addresses = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}, node.Status.Addresses...)
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = port
		if _, err := k.cp.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// process is the process of pod ns/name as it is now, nil when k runs none.
func (k *Kubelet) process(ns, name string) *PodProcess {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ns != k.ns {
		return nil
	}
	for _, pp := range k.procs {
		if pp.Pod == name {
			snapshot := *pp // Sync changes pp
			return &snapshot
		}
	}
	return nil
}

// containerLogs writes the log of the pod's process, or with previous=true of the one before its
// last restart, its last tailLines lines if given; as the kubelet, 404 for a pod it does not run and
// 400 for a previous container that never was.
func (k *Kubelet) containerLogs(w http.ResponseWriter, r *http.Request) {
	pp := k.process(r.PathValue("ns"), r.PathValue("pod"))
	if pp == nil || pp.spec.Containers[0].Name != r.PathValue("container") {
		http.Error(w, fmt.Sprintf("container %q in pod %q is not available", r.PathValue("container"), r.PathValue("pod")), http.StatusNotFound)
		return
	}
	if pp.Job != nil {
		io.WriteString(w, pp.Job.Logs())
		return
	}
	c := pp.C
	if r.URL.Query().Get("previous") == "true" {
		if c = pp.Previous; c == nil {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", r.PathValue("container"), pp.Pod), http.StatusBadRequest)
			return
		}
	}
	logs := c.Logs()
	if n, err := strconv.Atoi(r.URL.Query().Get("tailLines")); err == nil {
		lines := strings.SplitAfter(strings.TrimSuffix(logs, "\n"), "\n")
		logs = strings.Join(lines[max(len(lines)-n, 0):], "") + "\n"
	}
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, logs)
}

// portForward serves the port-forward protocol (portforward.k8s.io over SPDY, which the API
// server speaks to kubelets whatever the client spoke to it): each forwarded connection is a pair of
// streams, data and error, with the same requestID, and is connected to the pod's port, as
// the kubelet's getPortForward (pkg/kubelet/server/server.go) serves it with k8s.io/cri-streaming's
// pkg/streaming/portforward.
func (k *Kubelet) portForward(w http.ResponseWriter, r *http.Request) {
	pp := k.process(r.PathValue("ns"), r.PathValue("pod"))
	if pp == nil {
		http.Error(w, "pod not found", http.StatusNotFound)
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{portforward.PortForwardV1Name}); err != nil {
		return // Handshake answered
	}
	streams := make(chan httpstream.Stream)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	conn.SetIdleTimeout(time.Hour)
	type pair struct{ data, errs httpstream.Stream }
	pairs := map[string]*pair{}
	for {
		select {
		case <-conn.CloseChan():
			return
		case s := <-streams:
			id := s.Headers().Get(corev1.PortForwardRequestIDHeader)
			p := pairs[id]
			if p == nil {
				p = &pair{}
				pairs[id] = p
			}
			switch s.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeData:
				p.data = s
			case corev1.StreamTypeError:
				p.errs = s
			default:
				s.Reset()
			}
			if p.data != nil && p.errs != nil {
				delete(pairs, id)
				go forward(pp, p.data, p.errs)
			}
		}
	}
}

// forward connects a port-forward's data stream to the pod's port its headers name, and reports a
// failure on its error stream, as the kubelet does.
func forward(pp *PodProcess, data, errs httpstream.Stream) {
	defer errs.Close()
	defer data.Close()
	port, _ := strconv.Atoi(data.Headers().Get(corev1.PortHeader))
	addr := pp.listener(int32(port))
	if addr == "" {
		fmt.Fprintf(errs, "error forwarding port %d to pod %s: no process listens on it", port, pp.Pod)
		return
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintf(errs, "error forwarding port %d to pod %s: %v", port, pp.Pod, err)
		return
	}
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(conn, data)
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	})
	if _, err := io.Copy(data, conn); err != nil && !errors.Is(err, net.ErrClosed) {
		fmt.Fprintf(errs, "error forwarding port %d to pod %s: %v", port, pp.Pod, err)
	}
	data.Close()
	wg.Wait()
}

// listener is the address of the process that listens on port in the pod, as a CoreDNS pod
// declares its ports: its probes' paths name the health and ready plugins' ports, the container
// port named metrics is prometheus's, and any other declared port is the DNS server's.
func (pp *PodProcess) listener(port int32) string {
	if pp.C == nil {
		return "" // a job's
	}
	ctr := pp.spec.Containers[0]
	for _, probe := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Port.IntValue() != int(port) {
			continue
		}
		switch probe.HTTPGet.Path {
		case "/health":
			return pp.C.HealthAddr
		case "/ready":
			return pp.C.ReadyAddr
		}
	}
	for _, p := range ctr.Ports {
		if p.ContainerPort == port && p.Name == "metrics" {
			return pp.C.MetricsAddr
		} else if p.ContainerPort == port {
			return pp.C.Addr
		}
	}
	return ""
}

// selfSigned is a certificate for 127.0.0.1, for the kubelets' API.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "harness kubelet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
