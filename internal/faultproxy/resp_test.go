package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Every RESP3 type is copied byte for byte and as one value.
func TestCopyValueKinds(t *testing.T) {
	for _, v := range []string{
		"+OK\r\n", "-ERR x\r\n", ":12\r\n", "_\r\n", ",1.5\r\n", "#t\r\n", "(123456789012345678901234567890\r\n",
		"$3\r\nabc\r\n", "$0\r\n\r\n", "$-1\r\n", "*-1\r\n", "!5\r\nERR x\r\n", "=7\r\ntxt:abc\r\n",
		"*2\r\n$1\r\na\r\n:1\r\n", "~1\r\n+x\r\n", "%1\r\n+k\r\n*1\r\n$1\r\nv\r\n",
		"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n", ">2\r\n+message\r\n$1\r\nm\r\n", "*0\r\n",
	} {
		r := bufio.NewReader(strings.NewReader(v + "+NEXT\r\n"))
		var out bytes.Buffer
		if err := copyValue(r, &out, 0, nil); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if out.String() != v {
			t.Fatalf("%q copied as %q", v, out.String())
		}
		if rest, _ := r.ReadString('\n'); rest != "+NEXT\r\n" {
			t.Fatalf("%q: the next value starts with %q", v, rest)
		}
	}
}

func TestCopyValueRefusesBadInput(t *testing.T) {
	deep := strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n"
	for _, v := range []string{"?x\r\n", "$abc\r\n", "*x\r\n", "$3\n", "$" + "99999999999" + "\r\n", deep} {
		err := copyValue(bufio.NewReader(strings.NewReader(v)), &bytes.Buffer{}, 0, nil)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: %v, want ErrProtocol", v, err)
		}
	}
}

func TestCopyCommandNames(t *testing.T) {
	for _, tc := range []struct{ in, name string }{
		{"*2\r\n$7\r\nevalsha\r\n$1\r\nx\r\n", "EVALSHA"},
		{"PING\r\n", "PING"},
		{"set k v\n", "SET"},
	} {
		r := bufio.NewReader(strings.NewReader(tc.in))
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		var got string
		if err := copyCommand(r, w, func(n string) { got = n }); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		_ = w.Flush()
		if got != tc.name || out.String() != tc.in {
			t.Fatalf("%q: name %q, copied %q", tc.in, got, out.String())
		}
	}
}

// FuzzCopyValue: any input is copied as a prefix of itself or refused; never
// a panic.
func FuzzCopyValue(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "*2\r\n$1\r\na\r\n:1\r\n", "%1\r\n+k\r\n+v\r\n", "|1\r\n+a\r\n+b\r\n+c\r\n", "$-1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		if err := copyValue(bufio.NewReader(bytes.NewReader(in)), &out, 0, nil); err != nil {
			return
		}
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("%q copied as %q", in, out.Bytes())
		}
	})
}
