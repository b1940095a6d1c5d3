package digest

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxQuoted is the most bytes of one input an error message quotes: a
// namespace of legal length is quoted whole.
const MaxQuoted = MaxNamespaceLen

// Quote renders an input (a namespace, a node id, an address) for an error
// message, as %q does, but at most its first MaxQuoted bytes, cut back to
// the start of a character, followed by "… (N bytes)" when there was more.
// The result is valid UTF-8 and at most a few hundred bytes whatever the
// input. Every error that echoes a caller's input quotes it with Quote: an
// error message travels in a gRPC header, and a client that receives a
// header past its limit tears down the whole connection, not just the call.
func Quote[T ~string | ~[]byte](in T) string {
	cut := min(len(in), MaxQuoted)
	if cut < len(in) {
		for back := 0; back < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(in[cut]); back++ {
			cut--
		}
	}
	q := strconv.Quote(string(in[:cut]))
	if cut == len(in) {
		return q
	}
	return fmt.Sprintf("%s… (%d bytes)", q, len(in))
}
