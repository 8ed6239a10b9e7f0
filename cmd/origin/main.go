// Command origin runs the origin: PROXY-sniffing front and LDAP routing core.
// See README.md for its configuration.
package main

import (
	"fmt"
	"os"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/spf13/cobra"
)

func main() {
	root := cli.Root("origin", "the origin: PROXY-sniffing front and LDAP routing core")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		cmd.Usage()
		os.Exit(2)
		return nil
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "origin:", err)
		os.Exit(2)
	}
}
