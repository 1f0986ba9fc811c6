package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rscoord/rsc/wire"
)

// maxPage is the largest page the events endpoint serves.
const maxPage = 1000

// setupHistory: rscctl history <prefix> <group>
// (GET /coord/v1/monitoring/streams/{p}/groups/{g}/events).
func setupHistory(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	after := fs.String("after", "", "show events after this event id (from a previous page)")
	limit := fs.Int("limit", 50, "show at most this many events")
	types := fs.String("type", "", "only these event types, comma-separated; namespace.* matches a namespace (resharding.*)")
	return func(ctx context.Context, args []string) error {
		if *limit < 1 {
			return usageErrorf("--limit must be at least 1")
		}
		filter := typeFilter(*types)
		var events []wire.AuditEvent
		var payloads []json.RawMessage // as sent: summarize keeps their order
		cursor, next := *after, ""
		for len(events) < *limit {
			size := *limit - len(events)
			if filter != nil || size > maxPage {
				size = maxPage
			}
			page, raw, err := call(ctx, a, func(ctx context.Context) (*wire.AuditPage, error) {
				return a.c.Events(ctx, args[0], args[1], cursor, size)
			})
			if err != nil {
				return err
			}
			var sent struct {
				Events []struct {
					Payload json.RawMessage `json:"payload"`
				} `json:"events"`
			}
			if err := json.Unmarshal(raw, &sent); err != nil || len(sent.Events) != len(page.Events) {
				return &badAnswerError{Err: fmt.Errorf("events page: %v", err)}
			}
			for i, e := range page.Events {
				if filter != nil && !filter(e.Type) {
					continue
				}
				events, payloads = append(events, e), append(payloads, sent.Events[i].Payload)
				if len(events) == *limit {
					if i < len(page.Events)-1 || page.NextAfter != nil {
						next = e.ID
					}
					break
				}
			}
			if len(events) == *limit || page.NextAfter == nil {
				break
			}
			cursor = *page.NextAfter
		}
		if a.g.output == "json" {
			out := wire.AuditPage{Events: events}
			if out.Events == nil {
				out.Events = []wire.AuditEvent{}
			}
			if next != "" {
				out.NextAfter = &next
			}
			data, err := json.Marshal(out)
			if err != nil {
				return err
			}
			return printJSON(a.stdout, data)
		}
		t := newTable(a.stdout, "ID", "TIME", "TYPE", "ACTOR", "REQUEST-ID", "SUMMARY")
		for i, e := range events {
			t.row(e.ID, e.Time.UTC().Format("2006-01-02T15:04:05.000Z"), e.Type, e.Actor, e.RequestID, summarize(payloads[i]))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if next != "" {
			fmt.Fprintf(a.stderr, "more events: add --after %s\n", next)
		}
		return nil
	}
}

// typeFilter matches event types against "a.b,c.*"; nil means everything.
func typeFilter(spec string) func(string) bool {
	var exact []string
	var prefixes []string
	for _, p := range strings.Split(spec, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
		case p == "*":
			return nil
		case strings.HasSuffix(p, ".*"):
			prefixes = append(prefixes, strings.TrimSuffix(p, "*"))
		default:
			exact = append(exact, p)
		}
	}
	if len(exact) == 0 && len(prefixes) == 0 {
		return nil
	}
	return func(t string) bool {
		for _, e := range exact {
			if t == e {
				return true
			}
		}
		for _, p := range prefixes {
			if strings.HasPrefix(t, p) {
				return true
			}
		}
		return false
	}
}

const summaryWidth = 100

// summarize renders an event payload as key=value pairs in the payload's own
// order: scalars as they are, lists and objects by size, empty values left out.
func summarize(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	var parts []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		var val string
		switch x := v.(type) {
		case string:
			if x == "" {
				continue
			}
			val = x
			if strings.ContainsAny(x, " \"=") {
				val = strconv.Quote(x)
			}
		case json.Number:
			val = x.String()
		case bool:
			if !x {
				continue
			}
			val = "true"
		case []any:
			if len(x) == 0 {
				continue
			}
			val = fmt.Sprintf("[%d]", len(x))
		case map[string]any:
			if len(x) == 0 {
				continue
			}
			val = fmt.Sprintf("{%d}", len(x))
		default:
			continue
		}
		parts = append(parts, lowerFirst(key)+"="+val)
	}
	s := strings.Join(parts, " ")
	if utf8.RuneCountInString(s) > summaryWidth {
		s = string([]rune(s)[:summaryWidth-3]) + "..."
	}
	return s
}

func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError {
		return s
	}
	return string(unicode.ToLower(r)) + s[n:]
}
