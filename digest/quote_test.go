package digest

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestQuote: short inputs are quoted whole as %q does; long ones are cut to
// MaxQuoted bytes at a character start and say how long they were; the
// result is valid UTF-8 and small whatever the input.
func TestQuote(t *testing.T) {
	long := strings.Repeat("a", MaxQuoted+1)
	for _, tc := range []struct {
		in, want string
	}{
		{"", `""`},
		{"orders", `"orders"`},
		{"a\x00\xff\n", `"a\x00\xff\n"`},
		{long[:MaxQuoted], strconv.Quote(long[:MaxQuoted])},
		{long, strconv.Quote(long[:MaxQuoted]) + "… (65 bytes)"},
		// A two-byte character across the cut is left out whole.
		{long[:MaxQuoted-1] + "é", strconv.Quote(long[:MaxQuoted-1]) + "… (65 bytes)"},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if got := Quote([]byte(tc.in)); got != tc.want {
			t.Errorf("Quote([]byte(%q)) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, in := range [][]byte{
		bytes.Repeat([]byte{0x01}, 4<<20),
		bytes.Repeat([]byte{0xff}, 4<<20),
		bytes.Repeat([]byte("\U0010FFFF"), 1<<20),
		bytes.Repeat([]byte{0xe2, 0x80}, 1<<20), // truncated characters
	} {
		q := Quote(in)
		if len(q) > 4*MaxQuoted+32 || !utf8.ValidString(q) || !strings.HasSuffix(q, "… ("+strconv.Itoa(len(in))+" bytes)") {
			t.Errorf("Quote of %d bytes %x...: %d bytes %q", len(in), in[:4], len(q), q)
		}
	}
}

// TestValidateNamespaceBoundsMessage: a 4 MiB namespace of control bytes
// is refused with a message of a few hundred bytes that names the rule.
func TestValidateNamespaceBoundsMessage(t *testing.T) {
	for _, ns := range []string{string(bytes.Repeat([]byte{0x01}, 4<<20)), "ab\x01" + strings.Repeat("c", 4<<20), "a\xff"} {
		err := ValidateNamespace(ns)
		if err == nil {
			t.Fatalf("ValidateNamespace of %d bytes accepted it", len(ns))
		}
		if msg := err.Error(); len(msg) > 512 || !strings.Contains(msg, "[a-z0-9][a-z0-9._-]{0,63}") {
			t.Errorf("ValidateNamespace of %d bytes: %d-byte error %.300q", len(ns), len(msg), msg)
		}
	}
}
