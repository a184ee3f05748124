// Multi-node network check, one static binary with two modes:
//
//	netcheck serve          HTTP on :8080; answers "hello from <pod> on <node> to <client IP>"
//	netcheck probe URL...   GETs every URL (retrying for up to 90 s: Service
//	                        rules reach a new node's kube-proxy a moment
//	                        after the Service exists), then dials the
//	                        apiserver through the `kubernetes` Service;
//	                        prints "ok <url> <answer>" per URL and exits 0,
//	                        or prints "FAIL ..." and exits 1.
//
// POD_NAME, NODE_NAME and POD_IP come from the downward API.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func serve() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "hello from %s on %s to %s", os.Getenv("POD_NAME"), os.Getenv("NODE_NAME"), host)
	})
	if err := http.ListenAndServe(":8080", nil); err != nil {
		fmt.Printf("netcheck: serve: %v\n", err)
		os.Exit(1)
	}
}

// A new connection per attempt: a kept-alive one opened before kube-proxy
// had the Service's rule went out past the node (this sandbox's default
// route answers HTTP 404) and every retry reused it, 90 s of 404s
// (2026-11-29) although the rule came a moment later.
var client = http.Client{
	Timeout:   3 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

func get(url string) (string, error) {
	c := &client
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return strings.TrimSpace(string(b)), nil
}

func probe(urls []string) {
	failed := false
	for _, u := range urls {
		deadline := time.Now().Add(90 * time.Second)
		for {
			body, err := get(u)
			if err == nil {
				fmt.Printf("ok %s %s\n", u, body)
				break
			}
			if time.Now().After(deadline) {
				fmt.Printf("FAIL %s: %v\n", u, err)
				failed = true
				break
			}
			time.Sleep(time.Second)
		}
	}
	api := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	conn, err := net.DialTimeout("tcp", api, 5*time.Second)
	if err != nil {
		fmt.Printf("FAIL apiserver %s: %v\n", api, err)
		failed = true
	} else {
		conn.Close()
		fmt.Printf("ok apiserver %s\n", api)
	}
	fmt.Printf("client %s on %s with pod IP %s\n", os.Getenv("POD_NAME"), os.Getenv("NODE_NAME"), os.Getenv("POD_IP"))
	if failed {
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "serve" {
		serve()
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "probe" {
		probe(os.Args[2:])
		return
	}
	fmt.Println("usage: netcheck serve | netcheck probe URL...")
	os.Exit(2)
}
