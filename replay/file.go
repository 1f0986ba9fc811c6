package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rscoord/rsc/events"
)

// fileEntry is one line of an export file. ID and Data are the entry itself;
// the other fields repeat what Data says for people reading the file and are
// ignored by Import.
type fileEntry struct {
	ID   string `json:"id"`
	Data string `json:"data"` // base64 of the encoded envelope, byte for byte

	Type        string          `json:"type,omitempty"`
	Time        string          `json:"time,omitempty"`
	Group       *fileGroup      `json:"group,omitempty"`
	Actor       string          `json:"actor,omitempty"`
	RequestID   string          `json:"requestId,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	DecodeError string          `json:"decodeError,omitempty"`
}

type fileGroup struct {
	StreamPrefix  string `json:"streamPrefix"`
	ConsumerGroup string `json:"consumerGroup"`
}

// Export writes every entry of the log, as of the call, to w: JSON lines, one
// object per entry with "id", "data" (base64 of the raw encoded envelope) and,
// for reading, the decoded "type", "time", "group", "actor", "requestId" and
// "payload". Export copies bytes, so an entry that does not decode is still
// written, with "decodeError" instead of the decoded fields: the file then
// reproduces the problem offline (Verify on the imported log names the entry).
// It returns the number of entries written.
func Export(ctx context.Context, log events.Log, w io.Writer) (int, error) {
	end, err := log.LastID(ctx)
	if err != nil {
		return 0, fmt.Errorf("last id of log: %w", err)
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	err = scan(ctx, log, events.ZeroID, end, func(e events.Entry) (bool, error) {
		line := fileEntry{ID: e.ID, Data: base64.StdEncoding.EncodeToString(e.Data)}
		if rec, err := events.Decode(e.ID, e.Data); err != nil {
			line.DecodeError = err.Error()
		} else if r, err := NewEventRecord(rec); err != nil {
			line.DecodeError = err.Error()
		} else {
			line.Type, line.Actor, line.RequestID, line.Payload = r.Type, r.Actor, r.RequestID, r.Payload
			if !rec.Time.IsZero() {
				line.Time = r.Time.Format(time.RFC3339Nano)
			}
			if r.StreamPrefix != "" || r.ConsumerGroup != "" {
				line.Group = &fileGroup{StreamPrefix: r.StreamPrefix, ConsumerGroup: r.ConsumerGroup}
			}
		}
		if err := enc.Encode(line); err != nil {
			return false, fmt.Errorf("write entry %s: %w", e.ID, err)
		}
		n++
		return true, nil
	})
	if err != nil {
		return n, err
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("write export: %w", err)
	}
	return n, nil
}

// Import reads an export file into an in-memory log holding exactly its entries,
// ids kept. Only "id" and "data" are read; blank lines are skipped. A line that
// is not an entry, bad base64 or ids out of order are ErrBadFile naming the line.
func Import(r io.Reader) (*events.MemLog, error) {
	br := bufio.NewReader(r)
	var entries []events.Entry
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read export line %d: %w", lineNo, err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			e, perr := parseLine(trimmed)
			if perr != nil {
				return nil, fmt.Errorf("%w: line %d: %v", ErrBadFile, lineNo, perr)
			}
			if len(entries) > 0 {
				if c, cerr := events.CompareIDs(entries[len(entries)-1].ID, e.ID); cerr == nil && c >= 0 {
					return nil, fmt.Errorf("%w: line %d: id %s is not after %s", ErrBadFile, lineNo, e.ID, entries[len(entries)-1].ID)
				}
			}
			entries = append(entries, e)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	l, err := events.LoadEntries(entries)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFile, err)
	}
	return l, nil
}

func parseLine(line []byte) (events.Entry, error) {
	var in struct {
		ID   *string `json:"id"`
		Data *string `json:"data"`
	}
	if err := json.Unmarshal(line, &in); err != nil {
		return events.Entry{}, err
	}
	if in.ID == nil || in.Data == nil {
		return events.Entry{}, errors.New(`an entry needs "id" and "data"`)
	}
	if _, err := events.ParseID(*in.ID); err != nil {
		return events.Entry{}, err
	}
	data, err := base64.StdEncoding.DecodeString(*in.Data)
	if err != nil {
		return events.Entry{}, fmt.Errorf("entry %s: data is not base64: %v", *in.ID, err)
	}
	return events.Entry{ID: *in.ID, Data: data}, nil
}
