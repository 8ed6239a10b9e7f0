package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
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
