package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is everything one run measured. It prints as tables or as JSON.
type Report struct {
	Command  string     `json:"command"`
	Quick    bool       `json:"quick"`
	Env      Env        `json:"env"`
	Sections []*Section `json:"sections"`
}

// Env says where the figures come from: ratios travel between machines,
// absolute figures do not.
type Env struct {
	GoVersion      string    `json:"goVersion"`
	GOOS           string    `json:"goos"`
	GOARCH         string    `json:"goarch"`
	NumCPU         int       `json:"numCPU"`
	GOMAXPROCS     int       `json:"gomaxprocs"`
	Redis          string    `json:"redis,omitempty"`
	RedisSource    string    `json:"redisSource,omitempty"`
	Started        time.Time `json:"started"`
	ElapsedSeconds float64   `json:"elapsedSeconds"`
}

// Section is one benchmark: its parameters and its results. A measured result
// names its baseline (another result of the same section, measured in the same
// run) and carries the ratio measured/baseline.
type Section struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Params  Params   `json:"params"`
	Results []Result `json:"results"`
	Notes   []string `json:"notes,omitempty"`
}

// Result kinds.
const (
	kindBaseline = "baseline"
	kindMeasured = "measured"
	kindInfo     = "info"
)

// Result is one figure.
type Result struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Value    float64  `json:"value"`
	Unit     string   `json:"unit"`
	Baseline string   `json:"baseline,omitempty"`
	Ratio    *float64 `json:"ratio,omitempty"`
}

// Param is one parameter of a section.
type Param struct {
	Name  string
	Value any
}

// Params keep their order in the table and marshal as a JSON object.
type Params []Param

func (p Params) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, kv := range p {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(kv.Name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(kv.Value)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func (r *Report) section(name, title string) *Section {
	s := &Section{Name: name, Title: title}
	r.Sections = append(r.Sections, s)
	return s
}

func (s *Section) param(name string, v any) { s.Params = append(s.Params, Param{name, v}) }

func (s *Section) note(format string, args ...any) {
	s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
}

func (s *Section) baseline(name string, v float64, unit string) {
	s.Results = append(s.Results, Result{Name: name, Kind: kindBaseline, Value: v, Unit: unit})
}

func (s *Section) info(name string, v float64, unit string) {
	s.Results = append(s.Results, Result{Name: name, Kind: kindInfo, Value: v, Unit: unit})
}

// measured adds a result compared with the named baseline of this section.
func (s *Section) measured(name string, v float64, unit, baseline string) {
	r := Result{Name: name, Kind: kindMeasured, Value: v, Unit: unit, Baseline: baseline}
	if b, ok := s.result(baseline); ok && b.Value != 0 {
		ratio := v / b.Value
		r.Ratio = &ratio
	}
	s.Results = append(s.Results, r)
}

func (s *Section) result(name string) (Result, bool) {
	for _, r := range s.Results {
		if r.Name == name {
			return r, true
		}
	}
	return Result{}, false
}

// Value returns a result's value (tests and callers read figures by name).
func (s *Section) Value(name string) (float64, bool) {
	r, ok := s.result(name)
	return r.Value, ok
}

func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *Report) writeTable(w io.Writer) error {
	fmt.Fprintf(w, "rscbench %s", r.Command)
	if r.Quick {
		fmt.Fprint(w, " (quick)")
	}
	fmt.Fprintf(w, ": %s %s/%s, %d CPUs (GOMAXPROCS %d)", r.Env.GoVersion, r.Env.GOOS, r.Env.GOARCH, r.Env.NumCPU, r.Env.GOMAXPROCS)
	if r.Env.Redis != "" {
		fmt.Fprintf(w, ", redis %s (%s)", r.Env.Redis, r.Env.RedisSource)
	}
	fmt.Fprintf(w, ", %.1fs\n", r.Env.ElapsedSeconds)
	fmt.Fprintln(w, "ratio = measured / its baseline, both measured in this run (throughput: >1 is faster; time, latency, moves: <1 is better)")
	for _, s := range r.Sections {
		fmt.Fprintf(w, "\n== %s: %s\n", s.Name, s.Title)
		for _, p := range s.Params {
			fmt.Fprintf(w, "   %s: %s\n", p.Name, formatParam(p.Value))
		}
		rows := [][]string{{"measurement", "value", "unit", "ratio", "baseline"}}
		for _, res := range s.Results {
			ratio, base := "", ""
			switch res.Kind {
			case kindBaseline:
				base = "(baseline)"
			case kindMeasured:
				base = "vs " + res.Baseline
				if res.Ratio != nil {
					ratio = formatRatio(*res.Ratio)
				}
			}
			rows = append(rows, []string{res.Name, formatNumber(res.Value), res.Unit, ratio, base})
		}
		writeColumns(w, rows, []bool{false, true, false, true, false})
		for _, n := range s.Notes {
			fmt.Fprintf(w, "   note: %s\n", n)
		}
	}
	return nil
}

// writeColumns prints rows as aligned columns, right-aligned where right says so.
func writeColumns(w io.Writer, rows [][]string, right []bool) {
	widths := make([]int, len(right))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		b.WriteString("   ")
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if right[i] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
			b.WriteString("  ")
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func formatParam(v any) string {
	switch x := v.(type) {
	case int:
		return formatNumber(float64(x))
	case int64:
		return formatNumber(float64(x))
	case float64:
		return formatNumber(x)
	case time.Duration:
		return x.String()
	case string:
		return x
	}
	return fmt.Sprint(v)
}

func formatRatio(r float64) string {
	if r != 0 && math.Abs(r) < 0.01 {
		return strconv.FormatFloat(r, 'g', 2, 64) + "x"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "x"
}

// formatNumber prints large figures with thousands separators and small ones
// with three significant digits.
func formatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case v == math.Trunc(v) && a < 1e15:
		return groupThousands(strconv.FormatFloat(v, 'f', 0, 64))
	case a >= 1000:
		return groupThousands(strconv.FormatFloat(v, 'f', 0, 64))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func groupThousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// rate is events per second.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
