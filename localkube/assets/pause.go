// The pod sandbox ("pause") process of localkube's node, built locally
// because no registry serves registry.k8s.io/pause here.
//
// Like upstream's pause.c: it holds the pod's namespaces, exits 0 on SIGINT
// or SIGTERM, and reaps zombies when it is PID 1 of a shared PID namespace.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (localkube)")
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
