package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/csv"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigFor writes a kubeconfig for a static token user (see
// Options.ExtraTokens) and returns its path. Unknown tokens are allowed, to
// test authentication failures.
func (cp *ControlPlane) KubeconfigFor(token string) (string, error) {
	sum := sha256.Sum256([]byte(token))
	return cp.writeKubeconfig("kubeconfig-"+hex.EncodeToString(sum[:4]), "user", token)
}

// KubeconfigAs writes a kubeconfig of the admin impersonating user in groups: a user the tests
// give only the RBAC they mean to.
func (cp *ControlPlane) KubeconfigAs(user string, groups ...string) (string, error) {
	return cp.writeKubeconfigFor("kubeconfig-as-"+strings.NewReplacer(":", "-", "/", "-").Replace(user), "admin",
		&clientcmdapi.AuthInfo{Token: cp.adminToken, Impersonate: user, ImpersonateGroups: groups}, cp.APIServerURL())
}

// writeKubeconfig writes Dir/name for user authenticating with token.
func (cp *ControlPlane) writeKubeconfig(name, user, token string) (string, error) {
	return cp.writeKubeconfigAt(name, user, token, cp.APIServerURL())
}

// writeKubeconfigAt writes a kubeconfig for a token user of the API server at server.
func (cp *ControlPlane) writeKubeconfigAt(name, user, token, server string) (string, error) {
	return cp.writeKubeconfigFor(name, user, &clientcmdapi.AuthInfo{Token: token}, server)
}

// writeKubeconfigFor writes Dir/name for user authenticating as auth says, to the API server at server.
func (cp *ControlPlane) writeKubeconfigFor(name, user string, auth *clientcmdapi.AuthInfo, server string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["harness"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["harness"] = &clientcmdapi.Context{Cluster: "harness", AuthInfo: user}
	cfg.CurrentContext = "harness"
	path := filepath.Join(cp.Dir, name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// writeAuthFiles writes tokens.csv and the service-account key pair.
func (cp *ControlPlane) writeAuthFiles(extra []Token) error {
	cp.adminToken = randomHex(16)
	var b strings.Builder
	w := csv.NewWriter(&b)
	// Format: token,user,uid,"group1,group2".
	rows := [][]string{{cp.adminToken, "admin", "admin", "system:masters"}}
	for _, t := range extra {
		rows = append(rows, []string{t.Token, t.User, t.User, strings.Join(t.Groups, ",")})
	}
	if err := w.WriteAll(rows); err != nil {
		return fmt.Errorf("write tokens.csv: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cp.Dir, "tokens.csv"), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write tokens.csv: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("marshal service-account public key: %w", err)
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(cp.Dir, "sa.key"), priv, 0o600); err != nil {
		return fmt.Errorf("write sa.key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cp.Dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return fmt.Errorf("write sa.pub: %w", err)
	}
	return nil
}

// writeClients writes the admin kubeconfig and builds Config and Client.
func (cp *ControlPlane) writeClients() error {
	path, err := cp.writeKubeconfig("kubeconfig", "admin", cp.adminToken)
	if err != nil {
		return err
	}
	cp.Kubeconfig = path
	cp.CoreDNSKubeconfig, cp.coreDNSToken = path, cp.adminToken
	if u := cp.opts.CoreDNSUser; u != nil {
		if cp.CoreDNSKubeconfig, err = cp.writeKubeconfig("kubeconfig-coredns", "coredns", u.Token); err != nil {
			return err
		}
		cp.coreDNSToken = u.Token
	}
	cp.Config = &rest.Config{
		Host:            cp.APIServerURL(),
		BearerToken:     cp.adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             100,
		Burst:           200,
		// Fixtures write v1 Endpoints on purpose (Linkerd does); the
		// deprecation warning on every call is noise.
		WarningHandler: rest.NoWarnings{},
	}
	cp.Client, err = kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return nil
}
