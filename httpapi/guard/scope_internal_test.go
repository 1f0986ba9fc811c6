package guard

import "testing"

func TestScopeCovers(t *testing.T) {
	scoped := &Principal{Prefixes: []string{"orders", "pay-*"}}
	for prefix, want := range map[string]bool{
		"orders": true, "orders2": false, "order": false, "pay-": true, "pay-eu": true, "pay": false, "payments": false, "other": false,
	} {
		if got := scoped.Covers(prefix); got != want {
			t.Errorf("[orders pay-*] covers %q = %v, want %v", prefix, got, want)
		}
	}
	if !(&Principal{}).Covers("anything") || !(&Principal{Prefixes: []string{"*"}}).Covers("anything") {
		t.Error("no scope, or \"*\", must cover every prefix")
	}
	if (&Principal{Prefixes: []string{}}).Covers("orders") {
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

func TestGroupPatterns(t *testing.T) {
	member := &Principal{Groups: []string{"orders-*", "billing"}}
	for group, want := range map[string]bool{
		"orders-consumer": true, "orders-": true, "orders": false, "billing": true, "billing2": false, "orders-consumr": true, "audit": false,
	} {
		if got := member.CoversGroup(group); got != want {
			t.Errorf("[orders-* billing] covers group %q = %v, want %v", group, got, want)
		}
	}
	if !(&Principal{}).CoversGroup("anything") || !(&Principal{Groups: []string{"*"}}).CoversGroup("anything") {
		t.Error("no groups, or \"*\", must cover every group")
	}
	heartbeat := Route{Template: "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/members/{memberId}/heartbeat", Served: true, Vars: map[string]string{"streamPrefix": "orders", "consumerGroup": "audit", "memberId": "m"}}
	if routeInScope(member, heartbeat) {
		t.Error("a heartbeat for a group outside the user's groups is in scope")
	}
	heartbeat.Vars["consumerGroup"] = "orders-%63onsumer" // percent-encoded: still orders-consumer
	if !routeInScope(member, heartbeat) {
		t.Error("a heartbeat for orders-consumer is out of scope")
	}
	heartbeat.Vars["consumerGroup"] = "orders-%zz"
	if routeInScope(member, heartbeat) {
		t.Error("a group name that does not decode is in scope")
	}
	for _, ok := range [][]string{{"orders-*"}, {"*"}, {"billing", "a.b"}} {
		if err := ValidateGroups(ok); err != nil {
			t.Errorf("ValidateGroups(%q) = %v", ok, err)
		}
	}
	for _, bad := range [][]string{{}, {""}, {"*orders"}, {"or*ders"}, {"orders**"}, {"a\u200b"}, {" "}} {
		if err := ValidateGroups(bad); err == nil {
			t.Errorf("ValidateGroups(%q) = nil, want an error", bad)
		}
	}
}
