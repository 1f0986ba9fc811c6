package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxPage is the largest page the events endpoint serves.
const maxPage = 1000

type auditEvent struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Time      time.Time       `json:"time"`
	Actor     string          `json:"actor"`
	RequestID string          `json:"requestId"`
	Payload   json.RawMessage `json:"payload"`
}

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
		path := monitoringPath(args[0], args[1]) + "/events"
		var shown []json.RawMessage
		var events []auditEvent
		cursor, next := *after, ""
		for len(events) < *limit {
			size := *limit - len(events)
			if filter != nil || size > maxPage {
				size = maxPage
			}
			q := url.Values{"limit": {strconv.Itoa(size)}}
			if cursor != "" {
				q.Set("after", cursor)
			}
			var page struct {
				Events    []json.RawMessage `json:"events"`
				NextAfter *string           `json:"nextAfter"`
			}
			if _, err := a.get(ctx, path, q, &page); err != nil {
				return err
			}
			for i, raw := range page.Events {
				var e auditEvent
				if err := json.Unmarshal(raw, &e); err != nil {
					return &badAnswerError{Path: path, Err: err}
				}
				if filter != nil && !filter(e.Type) {
					continue
				}
				shown, events = append(shown, raw), append(events, e)
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
			out := struct {
				Events    []json.RawMessage `json:"events"`
				NextAfter *string           `json:"nextAfter"`
			}{Events: shown}
			if out.Events == nil {
				out.Events = []json.RawMessage{}
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
		for _, e := range events {
			t.row(e.ID, e.Time.UTC().Format("2006-01-02T15:04:05.000Z"), e.Type, e.Actor, e.RequestID, summarize(e.Payload))
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
