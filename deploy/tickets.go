package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/edgefleet/edgefleet/internal/ticketkeys"
	"golang.org/x/crypto/ssh"
)

// Tickets is fleet.yaml's tickets: the origin pool's TLS session ticket
// key file (core.tls.ticket_key_file on every host), which `fleet tickets
// rotate` rotates and writes to every origin host (docs/origin-pool.md).
type Tickets struct {
	// Path is the key file on every origin host.
	Path string `mapstructure:"path"`
	// Keep is how many keys the file holds after a rotation: with one
	// rotation an hour, 25 keys let a ticket resume for about a day.
	Keep int `mapstructure:"keep"`
	// Reload runs on each host once its file is written (sh -c locally,
	// the login shell over SSH): the origin re-reads the file on SIGHUP.
	Reload string `mapstructure:"reload"`
}

// DefaultTickets holds the defaults docs/dns-deploy.md lists.
func DefaultTickets() Tickets {
	return Tickets{Path: "/etc/edgefleet/ticket.keys", Keep: 25, Reload: "systemctl reload edgefleet-origin"}
}

// Validate names the first bad key.
func (t Tickets) Validate() error {
	switch {
	case !filepath.IsAbs(t.Path):
		return fmt.Errorf("tickets.path: %q is not an absolute path", t.Path)
	case t.Keep < 2 || t.Keep > ticketkeys.MaxKeys:
		return fmt.Errorf("tickets.keep: %d is not 2 to %d (the key that encrypts and the one a rotation adds)", t.Keep, ticketkeys.MaxKeys)
	}
	return nil
}

// TicketMaster is fleet's own copy of the pool's keys, beside the state
// file: what the last rotation wrote to every host.
const TicketMaster = "fleet-ticket.keys"

// A TicketPush writes one key file to every origin host of a pool. Root
// prefixes the remote paths (tests; "" in production), as deploy push's.
type TicketPush struct {
	Hosts   []Origin
	Tickets Tickets
	Auth    []ssh.AuthMethod
	Root    string
}

// ticketHost is one host being written: its SSH client, or nil for the
// host fleet runs on.
type ticketHost struct {
	name   string
	client *ssh.Client
}

// Push writes keys to every host and runs the reload there. Every host is
// reached first: one that cannot be (its sshd down, its host key not the
// pinned one) stops the push with nothing written anywhere. A host whose
// write or reload then fails stops the push; the hosts before it have the
// new file. That is safe by the file's order: a key appended by a rotation
// only decrypts until the next rotation, so a host that has it and one
// that does not still resume each other's tickets. done names the hosts
// written, in order.
func (p TicketPush) Push(ctx context.Context, keys ticketkeys.Keys) (done []string, err error) {
	if err := p.Tickets.Validate(); err != nil {
		return nil, err
	}
	var hosts []ticketHost
	defer func() {
		for _, h := range hosts {
			if h.client != nil {
				h.client.Close()
			}
		}
	}()
	for _, o := range p.Hosts {
		h := ticketHost{name: o.Name}
		if !o.Local() {
			user, addr, err := ParseSSHTarget(o.SSH)
			if err != nil {
				return nil, fmt.Errorf("origin %s: ssh: %w: no origin host written", o.Name, err)
			}
			key, err := ParseHostKey(o.HostKey)
			if err != nil {
				return nil, fmt.Errorf("origin %s: host_key: %w: no origin host written", o.Name, err)
			}
			if h.client, err = sshConnect(ctx, sshTarget{What: "origin " + o.Name, Addr: addr, User: user, HostKey: key, Auth: p.Auth}); err != nil {
				return nil, fmt.Errorf("%w: no origin host written", err)
			}
		}
		hosts = append(hosts, h)
	}
	data := keys.Format()
	sum := sha256.Sum256(data)
	for _, h := range hosts {
		if err := p.write(h, data, hex.EncodeToString(sum[:])); err != nil {
			if len(done) > 0 {
				err = fmt.Errorf("%w (written before it: %s; safe: the new key only decrypts until the next rotation)", err, strings.Join(done, ", "))
			}
			return done, err
		}
		done = append(done, h.name)
	}
	return done, nil
}

// write puts the file on h, mode 0600 (the origin refuses a key file
// others may read), and runs the reload.
func (p TicketPush) write(h ticketHost, data []byte, sum string) error {
	path, reload := p.Tickets.Path, p.Tickets.Reload
	if h.client != nil {
		if err := put(h.client, p.Root+path, 0o600, bytes.NewReader(data), sum); err != nil {
			return fmt.Errorf("origin %s: write %s: %w", h.name, path, err)
		}
		if reload != "" {
			if _, err := runRemote(h.client, reload, nil); err != nil {
				return fmt.Errorf("origin %s: %s: %w", h.name, reload, err)
			}
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("origin %s: %w", h.name, err)
	}
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("origin %s: write %s: %w", h.name, path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil { // an older file's mode is kept by the atomic write
		return fmt.Errorf("origin %s: %w", h.name, err)
	}
	if reload != "" {
		if out, err := exec.Command("sh", "-c", reload).CombinedOutput(); err != nil {
			return fmt.Errorf("origin %s: %s: %w: %s", h.name, reload, err, lastLine(string(out)))
		}
	}
	return nil
}

// ReadTicketMaster reads fleet's copy of the pool's keys at path; a
// missing file is no keys (the first rotation makes one).
func ReadTicketMaster(path string) (ticketkeys.Keys, error) {
	raw, err := safefile.Read(path, ticketkeys.MaxFile, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	keys, err := ticketkeys.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}
