// Command probe runs agent-side edge ranking, watcher and platform monitor.
// See README.md for its configuration.
package main

import (
	"fmt"
	"os"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/spf13/cobra"
)

func main() {
	root := cli.Root("probe", "agent-side edge ranking, watcher and platform monitor")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		cmd.Usage()
		os.Exit(2)
		return nil
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(2)
	}
}
