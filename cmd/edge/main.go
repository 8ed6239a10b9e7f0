// Command edge runs the edge relay (stub until issue 2 lands).
// See README.md for its configuration.
package main

import (
	"fmt"
	"os"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/spf13/cobra"
)

func main() {
	root := cli.Root("edge", "the edge relay (stub until issue 2 lands)")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		cmd.Usage()
		os.Exit(2)
		return nil
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(2)
	}
}
