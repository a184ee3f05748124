// Smoke-test probe: runs in a pod on localkube's node and proves that the
// pod network, kube-proxy's Service rules, the endpoint reconciler and
// service-account tokens work, by calling the apiserver through the
// `kubernetes` Service with the pod's own token. Prints what it found and
// exits 0, or exits 1 with the reason.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func fail(format string, args ...any) {
	fmt.Printf("probe: FAIL "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
			fmt.Printf("probe: pod IP %s\n", ip.IP)
		}
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" {
		fail("KUBERNETES_SERVICE_HOST is not set")
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		fail("%v", err)
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		fail("%v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	base := "https://" + net.JoinHostPort(host, port)
	call := func(method, path, body string) ([]byte, error) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
		}
		return b, nil
	}

	// kube-proxy may still be writing its first rules; retry briefly.
	var version []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		version, err = call("GET", "/version", "")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		fail("GET %s/version: %v", base, err)
	}
	var v struct{ GitVersion string }
	json.Unmarshal(version, &v)
	fmt.Printf("probe: kubernetes Service %s answers, server gitVersion %s\n", base, v.GitVersion)

	review, err := call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	if err != nil {
		fail("%v", err)
	}
	var r struct {
		Status struct{ UserInfo struct{ Username string } }
	}
	json.Unmarshal(review, &r)
	fmt.Printf("probe: authenticated as %s\n", r.Status.UserInfo.Username)
}
