package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/spf13/cobra"
)

// printStatus writes the rows as --output says and makes the exit status:
// 1, naming each, when a row is failed or unknown, the firewall could not
// be read, or stateErr (the state file was not used) is non-nil
// (docs/dns-deploy.md).
func printStatus(cmd *cobra.Command, output string, rows []deploy.StatusRow, fw deploy.Firewall, stateErr error, hosts ...deploy.HostStatus) error {
	var err error
	if output == "json" {
		err = deploy.PrintStatusJSON(cmd.OutOrStdout(), rows, hosts...)
	} else if err = deploy.PrintStatus(cmd.OutOrStdout(), rows); err == nil && len(hosts) > 0 {
		fmt.Fprintln(cmd.OutOrStdout())
		err = deploy.PrintHosts(cmd.OutOrStdout(), hosts)
	}
	if err != nil {
		return cli.Exit(1, err)
	}
	var problems []string
	if stateErr != nil {
		problems = append(problems, stateErr.Error())
	}
	problems = append(problems, deploy.StatusProblems(rows)...)
	problems = append(problems, deploy.HostProblems(hosts)...)
	for _, r := range rows {
		if r.InFirewall == "?" && fw != nil && len(hosts) == 0 {
			// Read again for the reason: the table keeps only "?".
			_, err := fw.Allowed()
			problems = append(problems, fmt.Sprintf("the firewall rules cannot be read: %v", err))
			break
		}
	}
	if len(problems) > 0 {
		return cli.Exit(1, errors.New(strings.Join(problems, "\n")))
	}
	return nil
}
