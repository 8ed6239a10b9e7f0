package probe

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// WriteTable prints st as a table, one edge a line.
func (st Status) WriteTable(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
