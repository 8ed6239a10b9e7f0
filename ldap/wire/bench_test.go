package wire_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// BenchmarkReaderParse frames and parses a stream of bind + search +
// unbind PDUs as a core session does (go test -bench . ./ldap/wire/).
func BenchmarkReaderParse(b *testing.B) {
	var stream []byte
	for i := range 100 {
		id := int32(i * 3)
		stream = append(stream, wire.BindRequest(id+1, "cn=user,ou=people,o=pqr", []byte("secret"))...)
		stream = append(stream, wire.RootDSESearch(id+2)...)
		stream = append(stream, wire.Result(id+3, wire.TagSearchResultDone, 0, "", "")...)
	}
	src := bytes.NewReader(stream)
	r := wire.NewReader(src)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(stream)
		r.Reset(src)
		for {
			raw, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if _, err := wire.Parse(raw); err != nil {
				b.Fatal(err)
			}
		}
	}
}
