// Command gymexec is the executor alone, a small static binary for tests of
// the sandbox backends. In production the gymserver binary plays this role
// through its hidden "__executor" subcommand.
package main

import (
	"os"

	"github.com/gymserver/gymserver/envs/executor"
)

func main() { os.Exit(executor.Main(os.Args[1:])) }
