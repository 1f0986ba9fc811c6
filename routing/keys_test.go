package routing_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rscoord/rsc/routing"
)

func TestStreamKey(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		index  int
		want   string
	}{
		{"zero", "orders", 0, "orders:0"},
		{"no padding", "orders", 7, "orders:7"},
		{"multi digit", "create-order", 1234, "create-order:1234"},
		{"prefix with colon", "app:orders", 3, "app:orders:3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := routing.StreamKey(tt.prefix, tt.index); got != tt.want {
				t.Errorf("StreamKey(%q, %d) = %q, want %q", tt.prefix, tt.index, got, tt.want)
			}
		})
	}
}

func TestKeyPattern(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		want   string
	}{
		{"simple", "orders", "orders:{shardIndex}"},
		{"prefix with colon", "app:orders", "app:orders:{shardIndex}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := routing.KeyPattern(tt.prefix); got != tt.want {
				t.Errorf("KeyPattern(%q) = %q, want %q", tt.prefix, got, tt.want)
			}
		})
	}
}

func TestValidatePrefix(t *testing.T) {
	tests := []struct {
		name    string
		prefix  string
		wantErr error  // nil: valid
		wantMsg string // exact message when wantErr != nil
	}{
		{"simple", "orders", nil, ""},
		{"dash", "create-order", nil, ""},
		{"colon dot underscore slash", "app:orders.v1_eu/west", nil, ""},
		{"digits", "0123", nil, ""},
		{"non-ASCII letters", "café-中文", nil, ""},
		{"max length", strings.Repeat("a", 200), nil, ""},

		{"empty", "", routing.ErrBlank, "streamPrefix must not be blank"},
		{"spaces only", "   ", routing.ErrBlank, "streamPrefix must not be blank"},
		{"tab and newline only", "\t\n", routing.ErrBlank, "streamPrefix must not be blank"},
		{"too long", strings.Repeat("a", 201), routing.ErrTooLong, "streamPrefix must not be longer than 200 bytes (got 201)"},
		{"too long multibyte", strings.Repeat("é", 101), routing.ErrTooLong, "streamPrefix must not be longer than 200 bytes (got 202)"},
		{"open brace", "{orders", routing.ErrHashTagBraces, "streamPrefix must not contain Redis Cluster hash tag braces"},
		{"close brace", "orders}", routing.ErrHashTagBraces, "streamPrefix must not contain Redis Cluster hash tag braces"},
		{"hash tag", "{orders}", routing.ErrHashTagBraces, "streamPrefix must not contain Redis Cluster hash tag braces"},
		{"braces before other bad chars", "*{a}", routing.ErrHashTagBraces, "streamPrefix must not contain Redis Cluster hash tag braces"},
		{"invalid UTF-8", "orders\xff", routing.ErrInvalidUTF8, "streamPrefix must be valid UTF-8"},
		{"truncated UTF-8", "ord\xe2\x82", routing.ErrInvalidUTF8, "streamPrefix must be valid UTF-8"},
		{"U+FFFD itself is a character", "orders\uFFFD", nil, ""},
		{"star", "orders*", routing.ErrForbiddenChar, "streamPrefix must not contain '*'"},
		{"question mark", "ord?rs", routing.ErrForbiddenChar, "streamPrefix must not contain '?'"},
		{"open bracket", "orders[0", routing.ErrForbiddenChar, "streamPrefix must not contain '['"},
		{"close bracket", "orders]", routing.ErrForbiddenChar, "streamPrefix must not contain ']'"},
		{"inner space", "my orders", routing.ErrForbiddenChar, "streamPrefix must not contain ' '"},
		{"leading space", " orders", routing.ErrForbiddenChar, "streamPrefix must not contain ' '"},
		{"trailing newline", "orders\n", routing.ErrForbiddenChar, `streamPrefix must not contain '\n'`},
		{"tab", "a\tb", routing.ErrForbiddenChar, `streamPrefix must not contain '\t'`},
		{"NUL", "a\x00", routing.ErrForbiddenChar, `streamPrefix must not contain '\x00'`},
		{"unit separator", "a\x1f", routing.ErrForbiddenChar, `streamPrefix must not contain '\x1f'`},
		{"DEL", "a\x7f", routing.ErrForbiddenChar, `streamPrefix must not contain '\x7f'`},
		{"no-break space", "a\u00a0b", routing.ErrForbiddenChar, `streamPrefix must not contain '\u00a0'`},
		{"line separator", "a\u2028b", routing.ErrForbiddenChar, `streamPrefix must not contain '\u2028'`},
		{"zero-width space", "ord\u200bers", routing.ErrForbiddenChar, `streamPrefix must not contain '\u200b'`},
		{"zero-width joiner", "a\u200db", routing.ErrForbiddenChar, `streamPrefix must not contain '\u200d'`},
		{"right-to-left override", "a\u202eb", routing.ErrForbiddenChar, `streamPrefix must not contain '\u202e'`},
		{"first strong isolate", "a\u2068b", routing.ErrForbiddenChar, `streamPrefix must not contain '\u2068'`},
		{"byte-order mark", "\ufefforders", routing.ErrForbiddenChar, `streamPrefix must not contain '\ufeff'`},
		{"soft hyphen", "or\u00adders", routing.ErrForbiddenChar, `streamPrefix must not contain '\u00ad'`},
		{"first bad char named", "a?b*", routing.ErrForbiddenChar, "streamPrefix must not contain '?'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := routing.ValidatePrefix(tt.prefix)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ValidatePrefix(%q) = %v, want nil", tt.prefix, err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ValidatePrefix(%q) = %v, want an error wrapping %v", tt.prefix, err, tt.wantErr)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("ValidatePrefix(%q) message = %q, want %q", tt.prefix, err.Error(), tt.wantMsg)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		value   string
		wantErr error
		wantMsg string
	}{
		{"valid group", "consumerGroup", "billing-workers", nil, ""},
		{"blank group", "consumerGroup", " ", routing.ErrBlank, "consumerGroup must not be blank"},
		{"group with braces", "consumerGroup", "g{1}", routing.ErrHashTagBraces, "consumerGroup must not contain Redis Cluster hash tag braces"},
		{"group with glob", "consumerGroup", "g*", routing.ErrForbiddenChar, "consumerGroup must not contain '*'"},
		{"group too long", "consumerGroup", strings.Repeat("g", 201), routing.ErrTooLong, "consumerGroup must not be longer than 200 bytes (got 201)"},
		{"prefix kind matches ValidatePrefix", "streamPrefix", "a b", routing.ErrForbiddenChar, "streamPrefix must not contain ' '"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := routing.ValidateName(tt.kind, tt.value)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ValidateName(%q, %q) = %v, want nil", tt.kind, tt.value, err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ValidateName(%q, %q) = %v, want an error wrapping %v", tt.kind, tt.value, err, tt.wantErr)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("ValidateName(%q, %q) message = %q, want %q", tt.kind, tt.value, err.Error(), tt.wantMsg)
			}
		})
	}
}

// Every valid prefix yields keys whose slot is that of the whole key (no
// hash tag can form).
func TestValidPrefixKeysHaveNoHashTag(t *testing.T) {
	for _, p := range []string{"orders", "create-order", "app:orders"} {
		if err := routing.ValidatePrefix(p); err != nil {
			t.Fatalf("ValidatePrefix(%q) = %v", p, err)
		}
		key := routing.StreamKey(p, 3)
		if got, want := routing.Slot(key), int(routing.CRC16([]byte(key))&16383); got != want {
			t.Errorf("Slot(%q) = %d, want CRC16 of the whole key %d", key, got, want)
		}
	}
}
