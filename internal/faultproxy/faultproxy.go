package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Mode is what the proxy does to a client connection once it dropped a reply.
type Mode int

const (
	// Close closes the client's connection (and the proxy's connection to
	// the server) right after the dropped reply. Replies to commands the
	// client pipelined after it are lost too; Redis may have executed them.
	Close Mode = iota
	// Stall keeps the connection open but forwards nothing more to the
	// client (later replies are read and discarded), so the client waits for
	// its read timeout.
	Stall
)

// Bounds of what the proxy parses: a RESP value nested deeper, a bulk
// string longer, or an aggregate with more elements is a protocol error that
// closes the connection.
const (
	maxDepth    = 64
	maxBulk     = 512 << 20
	maxElements = 1 << 24
	bufferSize  = 64 << 10
	dialTimeout = 5 * time.Second
)

// ErrProtocol: a client or server sent bytes the proxy cannot parse as RESP.
var ErrProtocol = errors.New("faultproxy: protocol error")

// Stats are counters since the proxy started.
type Stats struct {
	Connections int64 // client connections accepted
	Commands    int64 // client commands forwarded
	Replies     int64 // replies forwarded to clients
	Dropped     int64 // replies read from the server and discarded
	Cuts        int64 // connections closed by a drop (mode Close) or by Cut
}

// Proxy forwards connections to one Redis server. Its methods are safe for
// concurrent use.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu        sync.Mutex
	links     map[*link]struct{}
	closed    bool
	mode      Mode
	dropNext  int
	nextMatch map[string]bool // nil: any command
	share     float64
	rng       *rand.Rand
	randMatch map[string]bool
	stats     Stats

	wg sync.WaitGroup
}

// Start starts a proxy to upstream (host:port) on a free loopback port, closed
// by tb.Cleanup.
func Start(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := Listen(upstream)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// Listen starts a proxy to upstream on a free loopback port; Close stops it.
func Listen(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the server's address.
func (p *Proxy) Upstream() string { return p.upstream }

// SetMode sets what happens to a connection after a dropped reply (default
// Close).
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

// DropNext drops the replies of the next n commands forwarded (on any
// connection) whose name is one of commands (case-insensitive; none: any
// command), each after the server executed it. It replaces an earlier
// DropNext that has not run out.
func (p *Proxy) DropNext(n int, commands ...string) {
	p.mu.Lock()
	p.dropNext, p.nextMatch = max(n, 0), nameSet(commands)
	p.mu.Unlock()
}

// DropRandom drops the reply of each command forwarded whose name is one of
// commands (none: any) with probability share, drawn from a generator seeded
// with seed. share 0 stops random drops.
func (p *Proxy) DropRandom(share float64, seed int64, commands ...string) {
	p.mu.Lock()
	p.share, p.randMatch = share, nameSet(commands)
	p.rng = rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15))
	p.mu.Unlock()
}

// PendingDrops is how many drops DropNext still has to make.
func (p *Proxy) PendingDrops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropNext
}

// Cut closes every open connection (client and server side) now.
func (p *Proxy) Cut() {
	for _, l := range p.openLinks() {
		l.close(true)
	}
}

// openLinks lists the open connections.
func (p *Proxy) openLinks() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops accepting, closes every connection and waits for them.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, l := range p.openLinks() {
		l.close(false)
	}
	p.wg.Wait()
}

func nameSet(commands []string) map[string]bool {
	if len(commands) == 0 {
		return nil
	}
	m := make(map[string]bool, len(commands))
	for _, c := range commands {
		m[strings.ToUpper(c)] = true
	}
	return m
}

func (p *Proxy) count(f func(*Stats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// decide counts a command and says whether its reply is to be dropped.
func (p *Proxy) decide(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Commands++
	if p.dropNext > 0 && (p.nextMatch == nil || p.nextMatch[name]) {
		p.dropNext--
		return true
	}
	return p.share > 0 && p.rng != nil && (p.randMatch == nil || p.randMatch[name]) && p.rng.Float64() < p.share
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.upstream, dialTimeout)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{p: p, client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close(false)
			return
		}
		p.links[l] = struct{}{}
		p.stats.Connections++
		p.wg.Add(2)
		p.mu.Unlock()
		go l.commands()
		go l.replies()
	}
}

// link is one client connection and the proxy's connection to the server.
type link struct {
	p              *Proxy
	client, server net.Conn

	mu      sync.Mutex
	pending []bool // drop decisions of the commands forwarded, oldest first
	stalled bool
	closed  bool
}

// close closes both connections; it reports whether this call closed them.
func (l *link) close(cut bool) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.closed = true
	l.mu.Unlock()
	if cut {
		// Counted before the sockets close: whoever sees the connection
		// end sees the cut in Stats.
		l.p.count(func(s *Stats) { s.Cuts++ })
	}
	_ = l.client.Close()
	_ = l.server.Close()
	l.p.mu.Lock()
	delete(l.p.links, l)
	l.p.mu.Unlock()
	return true
}

func (l *link) push(drop bool) {
	l.mu.Lock()
	l.pending = append(l.pending, drop)
	l.mu.Unlock()
}

// pop returns the decision for the next reply and whether the link stalls.
func (l *link) pop() (drop, stalled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 {
		drop = l.pending[0]
		l.pending = l.pending[1:]
	}
	return drop, l.stalled
}

// commands forwards the client's commands, deciding for each whether its
// reply is dropped before any of it reaches the server.
func (l *link) commands() {
	defer l.p.wg.Done()
	defer l.close(false)
	r := bufio.NewReaderSize(l.client, bufferSize)
	w := bufio.NewWriterSize(l.server, bufferSize)
	onName := func(name string) { l.push(l.p.decide(name)) }
	for {
		if err := copyCommand(r, w, onName); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// replies forwards the server's replies, dropping those decided.
func (l *link) replies() {
	defer l.p.wg.Done()
	defer l.close(false)
	r := bufio.NewReaderSize(l.server, bufferSize)
	w := bufio.NewWriterSize(l.client, bufferSize)
	for {
		t, err := r.Peek(1)
		if err != nil {
			return
		}
		if t[0] == '>' { // a push (RESP3) answers no command
			dst := io.Writer(w)
			if l.isStalled() {
				dst = io.Discard
			}
			if err := copyValue(r, dst, 0, nil); err != nil {
				return
			}
			continue
		}
		drop, stalled := l.pop()
		if drop || stalled {
			if err := copyValue(r, io.Discard, 0, nil); err != nil {
				return
			}
			if !drop {
				continue
			}
			l.p.count(func(s *Stats) { s.Dropped++ })
			l.p.mu.Lock()
			mode := l.p.mode
			l.p.mu.Unlock()
			if mode == Stall {
				l.mu.Lock()
				l.stalled = true
				l.mu.Unlock()
				continue
			}
			_ = w.Flush() // the replies before the dropped one
			l.close(true)
			return
		}
		if err := copyValue(r, w, 0, nil); err != nil {
			return
		}
		l.p.count(func(s *Stats) { s.Replies++ })
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func (l *link) isStalled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stalled
}

// copyCommand copies one client command from r to w and calls onName with
// its name in upper case as soon as it is known, before the command's last
// byte is written to w.
func copyCommand(r *bufio.Reader, w *bufio.Writer, onName func(string)) error {
	t, err := r.Peek(1)
	if err != nil {
		return err
	}
	if t[0] != '*' { // inline command: one line
		line, err := r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("%w: inline command: %v", ErrProtocol, err)
		}
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			_, err = w.Write(line) // an empty line: Redis ignores it
			return err
		}
		onName(strings.ToUpper(string(fields[0])))
		_, err = w.Write(line)
		return err
	}
	n, err := header(r, w)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("%w: empty command", ErrProtocol)
	}
	for i := int64(0); i < n; i++ {
		var name *[]byte
		var buf []byte
		if i == 0 {
			name = &buf
		}
		if err := copyValue(r, w, 1, name); err != nil {
			return err
		}
		if i == 0 {
			onName(strings.ToUpper(string(buf)))
		}
	}
	return nil
}

// header reads a RESP line of a length or count (after its type byte), copies
// it to w, and returns the number.
func header(r *bufio.Reader, w io.Writer) (int64, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, fmt.Errorf("%w: header: %v", ErrProtocol, err)
	}
	if _, err := w.Write(line); err != nil {
		return 0, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, fmt.Errorf("%w: header %q", ErrProtocol, line)
	}
	n, err := strconv.ParseInt(string(line[1:len(line)-2]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: header %q", ErrProtocol, line)
	}
	return n, nil
}

// boundedHeader is header for a length or count of at most limit; a larger
// one is ErrProtocol, told with tooLarge (a format of the number). A negative
// number (null, RESP2) is returned as it is.
func boundedHeader(r *bufio.Reader, w io.Writer, limit int64, tooLarge string) (int64, error) {
	n, err := header(r, w)
	if err != nil {
		return 0, err
	}
	if n > limit {
		return 0, fmt.Errorf("%w: "+tooLarge, ErrProtocol, n)
	}
	return n, nil
}

// copyValue copies one RESP value from r to w. When name is not nil and the
// value is a short bulk string, its bytes are also stored in *name.
func copyValue(r *bufio.Reader, w io.Writer, depth int, name *[]byte) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrProtocol, maxDepth)
	}
	t, err := r.Peek(1)
	if err != nil {
		return err
	}
	switch kind := t[0]; kind {
	case '+', '-', ':', '_', ',', '#', '(':
		line, err := r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		_, err = w.Write(line)
		return err
	case '$', '!', '=':
		n, err := boundedHeader(r, w, maxBulk, "bulk of %d bytes")
		if err != nil || n < 0 {
			return err // n < 0: null bulk (RESP2)
		}
		if name != nil && n <= 64 {
			b := make([]byte, n+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return err
			}
			*name = b[:n]
			_, err = w.Write(b)
			return err
		}
		_, err = io.CopyN(w, r, n+2)
		return err
	case '*', '~', '>', '%', '|':
		n, err := boundedHeader(r, w, maxElements, "aggregate of %d elements")
		if err != nil || n < 0 {
			return err // n < 0: null array (RESP2)
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		for i := int64(0); i < n; i++ {
			if err := copyValue(r, w, depth+1, nil); err != nil {
				return err
			}
		}
		if kind == '|' { // an attribute precedes the value it describes
			return copyValue(r, w, depth+1, nil)
		}
		return nil
	default:
		return fmt.Errorf("%w: type byte %q", ErrProtocol, kind)
	}
}
