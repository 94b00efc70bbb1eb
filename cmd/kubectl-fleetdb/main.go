// Command kubectl-fleetdb is fleetdb's kubectl plugin: it joins member
// clusters to a hub and shows, explains and drains the fleet. Installed on
// PATH as kubectl-fleetdb, kubectl runs it as `kubectl fleetdb`.
//
// Exit codes: 0 success, 1 an error (or a refusal, such as unjoin while
// Databases are placed on the member), 2 a usage error.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	os.Exit(Execute(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
