// Command fleet runs fleet operations: firewall, DNS, deploy, rotate.
// See README.md for its configuration.
package main

import (
	"fmt"
	"os"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/spf13/cobra"
)

func main() {
	root := cli.Root("fleet", "fleet operations: firewall, DNS, deploy, rotate")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		cmd.Usage()
		os.Exit(2)
		return nil
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(2)
	}
}
