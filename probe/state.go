package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/safefile"
)

// errNoState is a state file that does not exist yet: the first start,
// which measures. Every other load error means no choice.
var errNoState = errors.New("no state file")

// maxStateFile bounds the state file: a ranking of a few dozen edges.
const maxStateFile = 1 << 20

// LoadState reads the state file at path. A missing file is errNoState
// (wrapped); an unreadable or corrupt one is an error naming the file.
func LoadState(path string) (Ranking, error) {
	data, err := safefile.Read(path, maxStateFile, nil)
	if errors.Is(err, os.ErrNotExist) {
		return Ranking{}, fmt.Errorf("state %s: %w", path, errNoState)
	}
	if err != nil {
		return Ranking{}, fmt.Errorf("state %s: %w", path, err)
	}
	r, err := ParseState(data)
	if err != nil {
		return Ranking{}, fmt.Errorf("state %s: corrupt: %w", path, err)
	}
	return r, nil
}

// ParseState decodes and checks a state file: known fields only, IP
// addresses sorted and unique, every ranking entry an address of the set
// (ip:port) once, successes before failures, and chosen one of the
// entries or "".
func ParseState(data []byte) (Ranking, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Ranking
	if err := dec.Decode(&r); err != nil {
		return Ranking{}, err
	}
	if dec.More() {
		return Ranking{}, errors.New("data after the JSON object")
	}
	if r.Name == "" {
		return Ranking{}, errors.New("no name")
	}
	set := map[string]bool{}
	var prev netip.Addr
	for i, a := range r.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.String() != a {
			return Ranking{}, fmt.Errorf("address %q is not an IP in canonical form", a)
		}
		if i > 0 && prev.Compare(ip) >= 0 {
			return Ranking{}, fmt.Errorf("addresses not sorted and unique at %q", a)
		}
		prev = ip
		set[a] = true
	}
	seen := map[string]bool{}
	chosen := r.Chosen == ""
	for i, e := range r.Ranking {
		host, _, err := net.SplitHostPort(e.Addr)
		if err != nil || !set[host] || seen[e.Addr] {
			return Ranking{}, fmt.Errorf("ranking entry %q is not an address of the set, once", e.Addr)
		}
		seen[e.Addr] = true
		if i > 0 && e.OK && !r.Ranking[i-1].OK {
			return Ranking{}, fmt.Errorf("ranking entry %q: a success after a failure", e.Addr)
		}
		if e.Addr == r.Chosen {
			chosen = true
		}
	}
	if !chosen {
		return Ranking{}, fmt.Errorf("chosen %q is not a ranking entry", r.Chosen)
	}
	if r.Ranking == nil {
		r.Ranking = []Result{}
	}
	return r, nil
}

// staleTemp is the age after which a temp file of the state file is a
// crash's leftover: a save takes milliseconds, so one that old belongs to
// no save in flight, in this process or another.
const staleTemp = 10 * time.Minute

// SaveState writes r to path atomically: a temp file in the same
// directory, fsync, rename over path, fsync of the directory. A crash
// leaves the old file or the new one, never half of one; the temp files
// crashes leave are removed by the next save. A ranking LoadState would
// reject is not written: the file always stays readable.
func SaveState(path string, r Ranking) (err error) {
	r.NoChoice = ""
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if _, err := ParseState(data); err != nil {
		return fmt.Errorf("write state %s: not a valid state: %w", path, err)
	}
	dir := filepath.Dir(path)
	removeStaleTemps(dir, filepath.Base(path))
	f, err := os.CreateTemp(dir, tempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("write state %s: %w", path, err)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// tempPrefix is what every temp file of the state file base starts with;
// os.CreateTemp appends digits.
func tempPrefix(base string) string { return "." + base + "." }

// removeStaleTemps removes the temp files of base in dir (tempPrefix and
// digits) older than staleTemp: what a crash between CreateTemp and
// Rename leaves. File times are the kernel's clock, so the age is taken
// with time.Now, not an injected clock. Errors are ignored: cleaning is
// best effort and must not stop the save.
func removeStaleTemps(dir, base string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := tempPrefix(base)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
