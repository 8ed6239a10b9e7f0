package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// onTerminal reports whether f is a terminal: an operator at the keyboard,
// whom apply, rotate and firewall remove ask before they change anything.
// A script (a pipe, a file, /dev/null) is never asked.
func onTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// needsConfirm: stdin is a terminal, and neither --yes nor --dry-run is
// given.
func needsConfirm(yes, dryRun bool) bool { return !yes && !dryRun && onTerminal(os.Stdin) }

// confirm asks question on stderr and reads the answer from stdin: y or
// yes goes on; anything else, or the end of the input, stops the command
// with exit 1, nothing changed.
func confirm(cmd *cobra.Command, question string) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s [y/N] ", question)
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return cli.Exit(1, errors.New("not confirmed: nothing changed"))
}

// yesFlag adds --yes to cmd.
func yesFlag(cmd *cobra.Command, yes *bool) {
	cmd.Flags().BoolVarP(yes, "yes", "y", false, "do not ask for confirmation on a terminal")
}

// preview runs run as a dry run (what would be done, in text) and asks
// whether to go on: the confirmation of apply and rotate on a terminal.
// Under --output json the preview goes to stderr, beside the question:
// stdout carries the run's one JSON object (fleet apply -o json | jq).
func preview(cmd *cobra.Command, p fleetParts, fl convergeFlags, run func(convergeFlags) error) error {
	pv := fl
	pv.dryRun, pv.output = true, "text"
	if fl.output == "json" {
		stdout := cmd.OutOrStdout()
		cmd.SetOut(cmd.ErrOrStderr())
		defer cmd.SetOut(stdout)
	}
	if err := run(pv); err != nil {
		return err
	}
	return confirm(cmd, fmt.Sprintf("change DNS and the firewall of %s as above?", strings.TrimSuffix(p.f.Name, ".")))
}
