package tokenbucket

import (
	"testing"
	"time"
)

func TestBurstThenRate(t *testing.T) {
	r := Rate{PerSec: 10, Burst: 4}
	var b Bucket
	t0 := time.Unix(1000, 0)
	for i := 0; i < 4; i++ {
		if !b.Allow(t0, r) {
			t.Fatalf("token %d of the burst refused", i+1)
		}
	}
	if b.Allow(t0, r) {
		t.Fatal("a fifth token at once was allowed past a burst of 4")
	}
	// 10/s: one token per 100 ms.
	if b.Allow(t0.Add(99*time.Millisecond), r) {
		t.Fatal("a token before 100 ms had passed")
	}
	if !b.Allow(t0.Add(100*time.Millisecond), r) {
		t.Fatal("no token after 100 ms at 10/s")
	}
	// A long pause fills the bucket to its burst, no more.
	later := t0.Add(time.Hour)
	n := 0
	for b.Allow(later, r) {
		n++
	}
	if n != 4 {
		t.Fatalf("after an hour %d tokens, want the burst 4", n)
	}
}

func TestClockBackTakesNothing(t *testing.T) {
	r := Rate{PerSec: 1, Burst: 1}
	var b Bucket
	t0 := time.Unix(1000, 0)
	if !b.Allow(t0, r) {
		t.Fatal("first token refused")
	}
	if b.Allow(t0.Add(-time.Hour), r) {
		t.Fatal("a clock gone back made a token")
	}
	if !b.Allow(t0.Add(time.Second), r) {
		t.Fatal("no token one second after the first")
	}
}

func TestUnlimitedAndFull(t *testing.T) {
	var b Bucket
	now := time.Unix(5, 0)
	for i := 0; i < 1000; i++ {
		if !b.Allow(now, Rate{}) {
			t.Fatal("the zero Rate refused a token")
		}
	}
	r := Rate{PerSec: 2, Burst: 2}
	b = Bucket{}
	b.Allow(now, r)
	if b.Full(now, r) {
		t.Fatal("a bucket one token short reported full")
	}
	if !b.Full(now.Add(500*time.Millisecond), r) {
		t.Fatal("not full after the missing token's 500 ms")
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"": 0, "0": 0, "20/s": 20, "120/m": 2, "3600/h": 1, " 0.5/s ": 0.5} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"20", "x/s", "-1/s", "20/d", "NaN/s", "1e12/s", "/s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

func TestRefund(t *testing.T) {
	r := Rate{PerSec: 1.0 / 3600, Burst: 2}
	var b Bucket
	now := time.Unix(1000, 0)
	b.Allow(now, r)
	b.Allow(now, r)
	if b.Allow(now, r) {
		t.Fatal("a third token from a burst of 2")
	}
	b.Refund(r)
	if !b.Allow(now, r) {
		t.Fatal("the refunded token was not there")
	}
	b.Refund(r)
	b.Refund(r)
	b.Refund(r)
	if !b.Full(now, r) || !b.Allow(now, r) || !b.Allow(now, r) || b.Allow(now, r) {
		t.Fatal("refunds went past the burst")
	}
}

func TestStringParsesBack(t *testing.T) {
	for _, r := range []Rate{{}, {PerSec: 20}, {PerSec: 0.5}, {PerSec: 1000, Burst: 2000}} {
		got, err := ParseRate(r.String())
		if err != nil || got != r.PerSec {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", r.String(), got, err, r.PerSec)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"20/s", "1/m", "0", "", "9/h", "1e9/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseRate(s)
		if err == nil && (n < 0 || n > 1e9 || n != n) {
			t.Fatalf("ParseRate(%q) = %v: out of range", s, n)
		}
	})
}
