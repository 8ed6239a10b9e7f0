package probe

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// table is a tabwriter whose lines lose the padding of an empty last cell.
type table struct {
	*tabwriter.Writer
	buf strings.Builder
	out io.Writer
}

func newTable(out io.Writer) *table {
	t := &table{out: out}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

// Flush writes the table to its output.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for l := range strings.Lines(t.buf.String()) {
		b.WriteString(strings.TrimRight(l, " \n") + "\n")
	}
	_, err := io.WriteString(t.out, b.String())
	return err
}

// WriteTable prints st as a table, one edge a line.
func (st Status) WriteTable(out io.Writer) error {
	w := newTable(out)
	fmt.Fprintf(w, "%s at %s\n", st.Name, st.MeasuredAt.UTC().Format(time.RFC3339))
	if st.Error != "" {
		fmt.Fprintf(w, "error: %s\n", st.Error)
	}
	fmt.Fprintln(w, "ADDR\tUP\tTCP_CONNECT_MS\tTLS_HANDSHAKE_MS\tERROR")
	for _, e := range st.Edges {
		up := "down"
		if e.Up {
			up = "up"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Addr, up, msText(e.TCPConnectMS), msText(e.TLSHandshakeMS), e.Error)
	}
	return w.Flush()
}

// WriteTable prints r as a table, the chosen edge marked.
func (r Ranking) WriteTable(out io.Writer) error {
	w := newTable(out)
	fmt.Fprintf(w, "%s at %s: %d address(es)\n", r.Name, r.MeasuredAt.UTC().Format(time.RFC3339), len(r.Addresses))
	if r.NoChoice != "" {
		fmt.Fprintf(w, "no choice (dial %s): %s\n", r.Name, r.NoChoice)
	}
	fmt.Fprintln(w, "\tADDR\tOK\tTCP_CONNECT_MS\tTLS_HANDSHAKE_MS\tAPP_RTT_MS\tERROR")
	for _, e := range r.Ranking {
		mark := ""
		if e.Addr == r.Chosen {
			mark = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\t%s\t%s\t%s\n", mark, e.Addr, e.OK, msText(e.TCPConnectMS), msText(e.TLSHandshakeMS), msText(e.AppRTTMS), e.Error)
	}
	return w.Flush()
}

func msText(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}
