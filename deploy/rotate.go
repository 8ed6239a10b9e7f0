package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RotateInventory returns fleet.yaml's content with edge out replaced by
// in (which may be out on new addresses), at the same place in the edge
// list; everything else, comments
// included, is kept (the YAML is re-indented by two). The comment above
// the old edge stays unless it names it.
func RotateInventory(src []byte, out string, in Edge) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("fleet.yaml: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("fleet.yaml: not a mapping")
	}
	edges := mapValue(doc.Content[0], "edges")
	if edges == nil || edges.Kind != yaml.SequenceNode {
		return nil, errors.New("fleet.yaml: no edges list")
	}
	at := -1
	for i, item := range edges.Content {
		if item.Kind != yaml.MappingNode {
			continue
		}
		if n := mapValue(item, "name"); n != nil && n.Value == in.Name && in.Name != out {
			return nil, fmt.Errorf("fleet.yaml: edge %q is already listed", in.Name)
		}
		n := mapValue(item, "name")
		if n != nil && n.Value == out {
			at = i
			continue
		}
		// The new edge's address held by another edge: name that one
		// (Validate would blame whichever comes later in the list).
		for fam, a := range map[string]string{"ipv4": in.IPv4, "ipv6": in.IPv6} {
			if v := mapValue(item, fam); a != "" && v != nil && sameAddr(v.Value, a) && n != nil {
				return nil, fmt.Errorf("fleet.yaml: %s is already the address of edge %q", a, n.Value)
			}
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("fleet.yaml: no edge %q", out)
	}
	old := edges.Content[at]
	item := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: old.Style}
	if !strings.Contains(old.HeadComment, out) {
		item.HeadComment = old.HeadComment
	}
	item.FootComment = old.FootComment
	add := func(k, v string, quoted bool) {
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}
		val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
		if quoted {
			val.Style = yaml.DoubleQuotedStyle
		}
		item.Content = append(item.Content, key, val)
	}
	add("name", in.Name, false)
	if in.IPv4 != "" {
		add("ipv4", in.IPv4, false)
	}
	if in.IPv6 != "" {
		add("ipv6", in.IPv6, true)
	}
	if in.Metrics != "" {
		add("metrics", in.Metrics, true)
	}
	// A replacement fleet watch's hook provisioned comes with its SSH
	// target and pinned host key, for deploy push.
	if in.SSH != "" {
		add("ssh", in.SSH, true)
	}
	if in.HostKey != "" {
		add("host_key", in.HostKey, true)
	}
	edges.Content[at] = item
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("fleet.yaml: %w", err)
	}
	enc.Close()
	return b.Bytes(), nil
}

func sameAddr(a, b string) bool {
	x, errx := netip.ParseAddr(a)
	y, erry := netip.ParseAddr(b)
	return errx == nil && erry == nil && x == y
}

// mapValue is the value node of key in a mapping node.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// ParseIn reads rotate's --in, NAME=ADDR[,ADDR]: one or two addresses, at
// most one of each family, in either order. Anything else is an error: an
// address left out would be a rotation to another edge than the one
// meant.
func ParseIn(s string) (Edge, error) {
	name, list, ok := strings.Cut(s, "=")
	if !ok || name == "" || list == "" {
		return Edge{}, fmt.Errorf("--in %q: want NAME=IPV4[,IPV6]", s)
	}
	addrs := strings.Split(list, ",")
	if len(addrs) > 2 {
		return Edge{}, fmt.Errorf("--in %q: %d addresses, want at most two (one IPv4, one IPv6)", s, len(addrs))
	}
	e := Edge{Name: name}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		switch {
		case err != nil:
			return Edge{}, fmt.Errorf("--in %q: %q is not an IP address", s, a)
		case ip.Is4() && e.IPv4 != "":
			return Edge{}, fmt.Errorf("--in %q: two IPv4 addresses, want at most one of each family", s)
		case ip.Is4():
			e.IPv4 = a
		case e.IPv6 != "":
			return Edge{}, fmt.Errorf("--in %q: two IPv6 addresses, want at most one of each family", s)
		default:
			e.IPv6 = a
		}
	}
	return e, nil
}

// CheckIn refuses a rotation out → in whose new edge takes an address
// another edge of cfg (not out) already has, naming that edge: Validate
// of the edited list would blame the edge that held it first.
func CheckIn(cfg Config, out string, in Edge) error {
	for _, e := range cfg.Edges {
		if e.Name == out {
			continue
		}
		for _, a := range in.Addrs() {
			if slices.Contains(e.Addrs(), a) {
				return fmt.Errorf("--in %s: %s is already the address of edge %q", in, a, e.Name)
			}
		}
	}
	return nil
}

// RotationLeft says whether a rotation out → in that fleet.yaml already
// shows still has work in the state st (so the command resumes it): out
// is still known to the state, or, when in re-addresses out, the state
// still holds out's old addresses (under out or as a draining
// "<out>.old…"). False is a rotation already done, or one that changes
// nothing.
func RotationLeft(st *State, out string, in Edge) bool {
	if in.Name != out {
		return st.Edges[out] != nil
	}
	if s := st.Edges[out]; s != nil && (!sameAddrOrBoth(s.IPv4, in.IPv4) || !sameAddrOrBoth(s.IPv6, in.IPv6)) {
		return true
	}
	for name, s := range st.Edges {
		if strings.HasPrefix(name, out+".old") && s.State == StateDraining {
			return true
		}
	}
	return false
}

// sameAddrOrBoth: a and b are the same address, or both empty.
func sameAddrOrBoth(a, b string) bool { return a == b || sameAddr(a, b) }
