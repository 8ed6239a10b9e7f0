package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/ticketkeys"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
)

func init() { subcommands = append(subcommands, ticketsCommand) }

func ticketsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tickets",
		Short: "the origin pool's TLS session ticket keys: rotate them, or write them again, on every origin host",
	}
	cmd.AddCommand(ticketsRun("rotate", "append a new key (the oldest beyond tickets.keep dropped) and write the file to every origin host", true),
		ticketsRun("push", "write the keys of the last rotation to every origin host again (a new or rebuilt host)", false))
	return cmd
}

// ticketsRun is fleet tickets rotate (rotate true) or push: under the
// state lock, every origin host reached before any is written, fleet's
// copy saved once every host has the file.
func ticketsRun(use, short string, rotate bool) *cobra.Command {
	var root, identity string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

The file is core.tls.ticket_key_file of every origin host
(docs/origin-pool.md): one key a line, oldest first, the next-to-last
encrypting and all decrypting, so a key a rotation appends decrypts on
every host before any host encrypts with it. fleet keeps its copy in
` + deploy.TicketMaster + ` beside the state file. Every origin host is reached
first (locally, or over SSH with its pinned host key): one that cannot be
stops the command with nothing written. Each host gets the file (mode 0600)
and then runs tickets.reload. fleet's copy is saved once every host has
it; a host that fails after others were written is named, and the next
rotation (or push) writes them all again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, _, err := loadInventory(cmd)
			if err != nil {
				return err
			}
			if err := f.Tickets.Validate(); err != nil {
				return cli.Exit(cli.ExitConfig, err)
			}
			if identity != "" {
				f.Deploy.Identity = identity
			}
			state := statePath(f.path)
			unlock, err := deploy.LockState(state)
			if err != nil {
				return cli.Exit(1, err)
			}
			defer unlock()
			master := filepath.Join(filepath.Dir(state), deploy.TicketMaster)
			keys, err := deploy.ReadTicketMaster(master)
			if err != nil {
				return cli.Exit(1, err)
			}
			switch {
			case rotate:
				keys = keys.Rotate(ticketkeys.New(), f.Tickets.Keep)
			case len(keys) == 0:
				return cli.Exit(1, fmt.Errorf("%s: no keys yet: run fleet tickets rotate first", master))
			}
			var auth []ssh.AuthMethod
			for _, h := range f.Hosts() {
				if h.Local() || auth != nil {
					continue
				}
				a, closeAuth, err := sshAuth(f.Deploy.Identity)
				if err != nil {
					return cli.Exit(1, err)
				}
				defer closeAuth()
				auth = a
			}
			done, err := deploy.TicketPush{Hosts: f.Hosts(), Tickets: f.Tickets, Auth: auth, Root: root}.Push(cmd.Context(), keys)
			if err != nil {
				return cli.Exit(1, err)
			}
			if err := deploy.WriteFileAtomic(master, keys.Format(), 0o600); err != nil {
				return cli.Exit(1, fmt.Errorf("every host has the keys, but fleet's copy was not saved: %w", err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tickets: %d keys written to %s on %s\n", len(keys), f.Tickets.Path, strings.Join(done, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", "", "prefix of the path on every host reached over SSH (tests; default /)")
	cmd.Flags().StringVar(&identity, "identity", "", "SSH private key file (default deploy.identity, else the ssh-agent)")
	return cmd
}
