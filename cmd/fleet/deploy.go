package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgefleet/edgefleet/deploy"
	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, deployCommand) }

func deployCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "install an edge: cloud-init user-data for a new VM, or a push over SSH",
	}
	cmd.AddCommand(renderCommand(), pushCommand())
	return cmd
}

func renderCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "render EDGE",
		Short: "print the cloud-init user-data of an edge (--out DIR: write user-data, edge.yaml and the unit there)",
		Long: `render prints the #cloud-config user-data that turns a fresh VM into the edge
EDGE of fleet.yaml: it writes the edge's configuration and a hardened systemd
unit, fetches deploy.binary_url, checks it against deploy.binary_sha256 and
only then starts the service. With --out DIR it writes user-data,
edge.yaml and ` + deploy.UnitName + ` into DIR instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, _, err := loadFleet(cmd)
			if err != nil {
				return err
			}
			r, err := deploy.Render(f.Config, args[0])
			if err != nil {
				return err
			}
			if out == "" {
				_, err := cmd.OutOrStdout().Write(r.UserData)
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return exitError{1, err}
			}
			for name, b := range map[string][]byte{"user-data": r.UserData, "edge.yaml": r.EdgeConfig, deploy.UnitName: r.Unit} {
				if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
					return exitError{1, err}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: user-data (%d bytes), edge.yaml, %s\n", out, len(r.UserData), deploy.UnitName)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write user-data, edge.yaml and the unit into (default: user-data on stdout)")
	return cmd
}

func pushCommand() *cobra.Command { return &cobra.Command{Use: "push EDGE", Hidden: true} }
