package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
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

// loadInventory is loadFleet followed by the inventory's validation.
func loadInventory(cmd *cobra.Command) (fleetFile, *slog.Logger, error) {
	f, log, err := loadFleet(cmd)
	if err == nil {
		err = f.Config.Validate()
	}
	return f, log, err
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
			f, _, err := loadInventory(cmd)
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
				return cli.Exit(1, err)
			}
			for name, b := range map[string][]byte{"user-data": r.UserData, "edge.yaml": r.EdgeConfig, deploy.UnitName: r.Unit} {
				if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
					return cli.Exit(1, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: user-data (%d bytes), edge.yaml, %s\n", out, len(r.UserData), deploy.UnitName)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write user-data, edge.yaml and the unit into (default: user-data on stdout)")
	return cmd
}

// pushFlags are push's options that are not inventory keys, or override one.
type pushFlags struct {
	binary, identity, root string
	timeout                time.Duration
}

func pushCommand() *cobra.Command {
	var fl pushFlags
	cmd := &cobra.Command{
		Use:   "push EDGE",
		Short: "install the edge binary, configuration and unit over SSH and restart the service",
		Long: `push connects to edges[].ssh (user@host[:port], root) accepting only the pinned
edges[].host_key, uploads the binary (deploy.binary or --binary, checked
against deploy.binary_sha256 when set), edge.yaml and the unit beside their
places, has the new binary check the new configuration (edge --check),
renames everything into place, switches /usr/local/bin/edgefleet-edge to
the new version and restarts ` + deploy.UnitName + `. A binary that refuses
the configuration changes nothing; a failed restart puts the previous
version back. SSH authentication: the key file deploy.identity or
--identity (unencrypted), else the ssh-agent at SSH_AUTH_SOCK.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, log, err := loadInventory(cmd)
			if err != nil {
				return err
			}
			if fl.binary != "" {
				f.Deploy.Binary = fl.binary
			}
			if fl.identity != "" {
				f.Deploy.Identity = fl.identity
			}
			p, err := deploy.NewPush(f.Config, args[0])
			if err != nil {
				return err
			}
			auth, closeAuth, err := sshAuth(f.Deploy.Identity)
			if err != nil {
				return err
			}
			defer closeAuth()
			p.Auth, p.Root, p.Timeout, p.Log = auth, fl.root, fl.timeout, log
			res, err := deploy.Push(cmd.Context(), p)
			if err != nil {
				return cli.Exit(1, err)
			}
			if res.Unchanged {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s already installed with this configuration and unit; %s not restarted\n", p.Edge, res.Installed, deploy.UnitName)
				return nil
			}
			prev := "first install"
			if res.Previous != "" {
				prev = "previous " + res.Previous
			}
			upload := "binary already on the host"
			if res.Uploaded {
				upload = "binary uploaded"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: installed %s (%s; %s), %s restarted\n", p.Edge, res.Installed, prev, upload, deploy.UnitName)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&fl.binary, "binary", "", "local edge binary to install (default: deploy.binary)")
	fs.StringVar(&fl.identity, "identity", "", "SSH private key file (default: deploy.identity, else the ssh-agent)")
	fs.StringVar(&fl.root, "root", "", "prefix of every path on the edge host (tests; default /)")
	fs.DurationVar(&fl.timeout, "timeout", 30*time.Second, "TCP connect and SSH handshake timeout")
	return cmd
}

// sshAuth is the key file identity, or the ssh-agent at SSH_AUTH_SOCK
// when identity is empty. The returned func closes the agent connection.
func sshAuth(identity string) ([]ssh.AuthMethod, func(), error) {
	if identity != "" {
		pem, err := safefile.Read(identity, 64<<10, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("deploy.identity: %w", err)
		}
		signer, err := ssh.ParsePrivateKey(pem)
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, nil, fmt.Errorf("deploy.identity: %s is passphrase-protected: load it into ssh-agent (ssh-add) and leave deploy.identity empty", identity)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("deploy.identity: %s: %w", identity, err)
		}
		return []ssh.AuthMethod{ssh.PublicKeys(signer)}, func() {}, nil
	}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, nil, errors.New("no SSH credentials: set deploy.identity (or --identity) to a key file, or run an ssh-agent (SSH_AUTH_SOCK)")
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, fmt.Errorf("ssh-agent at SSH_AUTH_SOCK: %w", err)
	}
	return []ssh.AuthMethod{ssh.PublicKeysCallback(agent.NewClient(conn).Signers)}, func() { conn.Close() }, nil
}
