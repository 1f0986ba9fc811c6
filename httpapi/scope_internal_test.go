package httpapi

import "testing"

func TestScopeCovers(t *testing.T) {
	scoped := &principal{Prefixes: []string{"orders", "pay-*"}}
	for prefix, want := range map[string]bool{
		"orders": true, "orders2": false, "order": false, "pay-": true, "pay-eu": true, "pay": false, "payments": false, "other": false,
	} {
		if got := scoped.covers(prefix); got != want {
			t.Errorf("[orders pay-*] covers %q = %v, want %v", prefix, got, want)
		}
	}
	if !(&principal{}).covers("anything") || !(&principal{Prefixes: []string{"*"}}).covers("anything") {
		t.Error("no scope, or \"*\", must cover every prefix")
	}
	if (&principal{Prefixes: []string{}}).covers("orders") {
		t.Error("an empty scope covers nothing")
	}
}

func TestValidateScope(t *testing.T) {
	for _, ok := range [][]string{{"orders"}, {"pay-*"}, {"*"}, {"orders", "pay-*", "a.b"}} {
		if err := ValidateScope(ok); err != nil {
			t.Errorf("ValidateScope(%q) = %v", ok, err)
		}
	}
	for _, bad := range [][]string{{}, {""}, {"*orders"}, {"pa*y"}, {"pay**"}, {"or ders"}, {"{x}"}, {"a\u200b"}} {
		if err := ValidateScope(bad); err == nil {
			t.Errorf("ValidateScope(%q) = nil, want an error", bad)
		}
	}
}
