package rls

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The H2 generator's own HTTP/2 settings: the receive windows it announces
// (stream and connection) and the largest frame it accepts (the protocol's
// default, which it does not raise).
const (
	h2RecvWindow = 1 << 20
	h2MaxFrame   = 16384
	h2ReadBuf    = 64 << 10
	h2WriteBuf   = 32 << 10
)

// H2Client is the H2 load generator's side of one server: Conns HTTP/2
// connections and the workload's requests encoded as frames' payloads. Its
// runs follow one another on the same connections; one at a time.
type H2Client struct {
	conns  []*h2Conn
	blocks headerBlocks
	reqs   [][]byte // each request's DATA payload: gRPC's 5-byte prefix and the message
}

// DialH2 opens conns HTTP/2 connections (0 means 4, prior knowledge, no
// TLS) to addr, a loopback host:port, sends each the connection preface and
// its settings, and encodes the workload's requests.
func DialH2(addr string, conns int) (*H2Client, error) {
	reqs, err := marshalWorkload()
	if err != nil {
		return nil, err
	}
	return dialH2(addr, conns, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, reqs)
}

// dialH2 is DialH2 with the method's full name (the :path) and the
// marshalled requests.
func dialH2(addr string, conns int, path string, reqs [][]byte) (*H2Client, error) {
	if conns <= 0 {
		conns = 4
	}
	c := &H2Client{blocks: headerBlock(addr, path)}
	for _, m := range reqs {
		b := make([]byte, 5+len(m))
		binary.BigEndian.PutUint32(b[1:5], uint32(len(m)))
		copy(b[5:], m)
		c.reqs = append(c.reqs, b)
	}
	for range conns {
		hc, err := dialH2Conn(addr, c.blocks)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, hc)
	}
	return c, nil
}

// headerBlocks are the HPACK blocks of a call's request headers, encoded
// once, as a client that keeps HPACK's dynamic table sends them (grpc-go's,
// Envoy's): the first call of a connection adds its fields to the table
// (first), every later one names them by index (steady), which leaves the
// table as it is, so the same bytes serve every later stream. plain uses no
// table, for a server that allows less than the fields take (its
// SETTINGS_HEADER_TABLE_SIZE below tableSize).
type headerBlocks struct {
	first, steady, plain []byte
	tableSize            uint32
}

// headerBlock returns the header blocks of a call to path on authority.
func headerBlock(authority, path string) headerBlocks {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path},
		{Name: ":authority", Value: authority},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
	var bs headerBlocks
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := range 2 {
		buf.Reset()
		for _, f := range fields {
			_ = enc.WriteField(f) // writing to a bytes.Buffer cannot fail
		}
		if i == 0 {
			bs.first = bytes.Clone(buf.Bytes())
		} else {
			bs.steady = bytes.Clone(buf.Bytes())
		}
	}
	for _, f := range fields {
		bs.tableSize += f.Size()
	}
	// With no dynamic table: the encoder's table set to 0, and the block
	// that announces it discarded.
	enc = hpack.NewEncoder(&buf)
	enc.SetMaxDynamicTableSizeLimit(0)
	for range 2 {
		buf.Reset()
		for _, f := range fields {
			_ = enc.WriteField(f)
		}
	}
	bs.plain = bytes.Clone(buf.Bytes())
	return bs
}

// Close closes the connections.
func (c *H2Client) Close() error {
	var errs []error
	for _, hc := range c.conns {
		errs = append(errs, hc.nc.Close())
	}
	return errors.Join(errs...)
}

// Run keeps o.Callers calls in flight, spread over the connections (caller i
// on connection i mod Conns, each walking the workload's requests from its
// own offset), until o.Duration has passed or o.Calls calls were made, and
// returns what it measured. A connection that fails (closed, GOAWAY, a
// protocol error) ends the run with its error and the calls counted so far;
// the client is then unusable.
func (c *H2Client) Run(ctx context.Context, o Options) (*Result, error) {
	r, err := startRun(ctx, o)
	if err != nil {
		return nil, err
	}
	// Every connection's read ends at once when the run's context ends (the
	// watchdog, or ctx).
	stopAfter := context.AfterFunc(r.ctx, func() {
		for _, hc := range c.conns {
			_ = hc.nc.SetReadDeadline(time.Now())
		}
	})
	ts := make([]*tally, len(c.conns))
	errs := make([]error, len(c.conns))
	var wg sync.WaitGroup
	for i, hc := range c.conns {
		ts[i] = new(tally)
		var offsets []int
		for k := i; k < r.o.Callers; k += len(c.conns) {
			offsets = append(offsets, k*len(c.reqs)/r.o.Callers)
		}
		wg.Go(func() {
			if errs[i] = hc.runCalls(r, ts[i], c.reqs, offsets); errs[i] != nil {
				r.stop.Store(true)
			}
		})
	}
	r.wait(ctx, &wg)
	if !stopAfter() {
		for _, hc := range c.conns {
			if hc.err == nil {
				hc.err = errors.New("rls: the connection's read was interrupted")
			}
		}
	}
	res, err := r.finish(ctx, ts)
	if err != nil {
		return res, err
	}
	return res, errors.Join(errs...)
}

// h2Conn is one HTTP/2 connection. One goroutine at a time (the run's)
// uses it.
type h2Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	fr     *http2.Framer // writes frames to bw
	dec    *hpack.Decoder
	blocks headerBlocks
	// indexed: the server's table holds the fields (the first block was
	// sent); noTable: the server's table is too small for them.
	indexed, noTable bool
	err              error // set once the connection is unusable

	// The server's settings and the send windows.
	gotSettings bool
	maxStreams  uint32
	initWindow  int64 // a new stream's send window
	maxFrame    int
	sendWindow  int64 // the connection's
	recvPending int64 // DATA received on the connection and not yet returned in a WINDOW_UPDATE
	nextID      uint32
	goAway      error // the server's GOAWAY, once received

	// The header block being decoded: its stream (nil for one no call
	// waits on), whether its frame ended the stream, and whether
	// CONTINUATION frames are to follow.
	hdr          *h2Stream
	hdrStreamID  uint32
	hdrEndStream bool
	hdrOpen      bool

	// The current run's.
	run      *run
	tally    *tally
	reqs     [][]byte
	streams  []h2Stream
	inFlight int
	parked   int // callers waiting for the server to allow another stream
}

// h2Stream is one caller: the call it has in flight, if any.
type h2Stream struct {
	id      uint32 // 0: no call in flight
	parked  bool   // waiting for a stream slot
	next    int    // the caller's next request
	t0      time.Time
	data    []byte // the request's DATA payload
	sent    int    // of it, the bytes sent
	window  int64  // the stream's send window
	pending int64  // DATA received and not yet returned in a WINDOW_UPDATE

	// The response so far.
	headers    bool   // its headers (before the message) were read
	httpStatus int    // :status
	grpcStatus int    // grpc-status, -1 until read
	grpcMsg    string // grpc-message
	msg        []byte // the DATA received: the length-prefixed message
}

func dialH2Conn(addr string, blocks headerBlocks) (*h2Conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &h2Conn{
		nc:         nc,
		br:         bufio.NewReaderSize(nc, h2ReadBuf),
		bw:         bufio.NewWriterSize(nc, h2WriteBuf),
		blocks:     blocks,
		maxStreams: 1<<32 - 1,
		initWindow: 65535,
		maxFrame:   h2MaxFrame,
		sendWindow: 65535,
		nextID:     1,
	}
	c.fr = http2.NewFramer(c.bw, nil)
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(h2MaxFrame)
	_, _ = c.bw.WriteString(http2.ClientPreface)
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2RecvWindow},
	)
	_ = c.fr.WriteWindowUpdate(0, h2RecvWindow-65535)
	if err := c.bw.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// runCalls is one run on the connection: one caller per offset, each
// starting its next call when its last one ends, until the run stops them;
// it returns when no call is in flight.
func (c *h2Conn) runCalls(r *run, t *tally, reqs [][]byte, offsets []int) error {
	if c.err != nil {
		return c.err
	}
	c.run, c.tally, c.reqs = r, t, reqs
	c.streams = make([]h2Stream, len(offsets))
	c.inFlight, c.parked = 0, 0
	for i, off := range offsets {
		c.streams[i].next = off
		c.streams[i].parked = true
		c.parked++
	}
	if c.gotSettings {
		c.unpark()
	}
	err := c.loop()
	if err != nil {
		c.err = err
		c.failAll(err)
	}
	c.run, c.tally, c.reqs, c.streams = nil, nil, nil, nil
	return err
}

// loop reads and handles frames until no call is in flight or to be made.
// Frames written meanwhile are flushed before a read that would wait.
func (c *h2Conn) loop() error {
	for {
		if c.goAway != nil && c.inFlight == 0 {
			return c.goAway
		}
		if c.inFlight == 0 && (c.parked == 0 || c.run.stop.Load()) {
			return c.flush()
		}
		if c.br.Buffered() < 9 {
			if err := c.flush(); err != nil {
				return err
			}
		}
		head, err := c.br.Peek(9)
		if err != nil {
			return c.readErr(err)
		}
		fh := http2.FrameHeader{
			Length:   uint32(head[0])<<16 | uint32(head[1])<<8 | uint32(head[2]),
			Type:     http2.FrameType(head[3]),
			Flags:    http2.Flags(head[4]),
			StreamID: binary.BigEndian.Uint32(head[5:9]) & (1<<31 - 1),
		}
		if fh.Length > h2MaxFrame {
			return fmt.Errorf("rls: the server sent a %v frame of %d bytes, above the %d allowed", fh.Type, fh.Length, h2MaxFrame)
		}
		if _, err := c.br.Discard(9); err != nil {
			return c.readErr(err)
		}
		if c.br.Buffered() < int(fh.Length) {
			if err := c.flush(); err != nil {
				return err
			}
		}
		p, err := c.br.Peek(int(fh.Length))
		if err != nil {
			return c.readErr(err)
		}
		err = c.handle(fh, p)
		if _, derr := c.br.Discard(int(fh.Length)); err == nil {
			err = derr
		}
		if err != nil {
			return err
		}
	}
}

func (c *h2Conn) flush() error {
	if c.bw.Buffered() == 0 {
		return nil
	}
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("rls: writing to the server: %w", err)
	}
	return nil
}

func (c *h2Conn) readErr(err error) error {
	if c.run.ctx.Err() != nil {
		return fmt.Errorf("rls: run interrupted with %d calls in flight: %w", c.inFlight, c.run.ctx.Err())
	}
	if c.goAway != nil {
		return fmt.Errorf("%w; then the connection ended: %v", c.goAway, err)
	}
	return fmt.Errorf("rls: the server closed the connection with %d calls in flight: %w", c.inFlight, err)
}

// handle acts on one frame; p is its payload, valid until the next read.
func (c *h2Conn) handle(fh http2.FrameHeader, p []byte) error {
	if !c.gotSettings && fh.Type != http2.FrameSettings {
		return fmt.Errorf("rls: the server's first frame is %v, not SETTINGS (not an HTTP/2 server?)", fh.Type)
	}
	if c.hdrOpen && (fh.Type != http2.FrameContinuation || fh.StreamID != c.hdrStreamID) {
		return fmt.Errorf("rls: the server sent %v on stream %d inside a header block of stream %d", fh.Type, fh.StreamID, c.hdrStreamID)
	}
	switch fh.Type {
	case http2.FrameData:
		return c.onData(fh, p)
	case http2.FrameHeaders:
		if fh.StreamID == 0 {
			return errors.New("rls: the server sent HEADERS on stream 0")
		}
		p, err := unpad(fh, p)
		if err != nil {
			return err
		}
		if fh.Flags.Has(http2.FlagHeadersPriority) {
			if len(p) < 5 {
				return errors.New("rls: the server sent a HEADERS frame too short for its priority")
			}
			p = p[5:]
		}
		c.hdr, c.hdrStreamID, c.hdrEndStream = c.stream(fh.StreamID), fh.StreamID, fh.Flags.Has(http2.FlagHeadersEndStream)
		return c.headerFragment(p, fh.Flags.Has(http2.FlagHeadersEndHeaders))
	case http2.FrameContinuation:
		if !c.hdrOpen {
			return errors.New("rls: the server sent CONTINUATION outside a header block")
		}
		return c.headerFragment(p, fh.Flags.Has(http2.FlagContinuationEndHeaders))
	case http2.FrameSettings:
		return c.onSettings(fh, p)
	case http2.FramePing:
		if len(p) != 8 || fh.StreamID != 0 {
			return errors.New("rls: the server sent a malformed PING")
		}
		if !fh.Flags.Has(http2.FlagPingAck) {
			return c.fr.WritePing(true, [8]byte(p))
		}
	case http2.FrameWindowUpdate:
		if len(p) != 4 {
			return errors.New("rls: the server sent a malformed WINDOW_UPDATE")
		}
		inc := int64(binary.BigEndian.Uint32(p) & (1<<31 - 1))
		if fh.StreamID == 0 {
			c.sendWindow += inc
		} else if s := c.stream(fh.StreamID); s != nil {
			s.window += inc
		}
		return c.sendPending()
	case http2.FrameRSTStream:
		if len(p) != 4 {
			return errors.New("rls: the server sent a malformed RST_STREAM")
		}
		if s := c.stream(fh.StreamID); s != nil {
			code := http2.ErrCode(binary.BigEndian.Uint32(p))
			return c.end(s, fmt.Errorf("ShouldRateLimit: the server reset the stream: %v", code))
		}
	case http2.FrameGoAway:
		return c.onGoAway(p)
	case http2.FramePushPromise:
		return errors.New("rls: the server sent PUSH_PROMISE, which the client's settings forbid")
	}
	return nil // PRIORITY and unknown frame types are ignored
}

func unpad(fh http2.FrameHeader, p []byte) ([]byte, error) {
	if !fh.Flags.Has(http2.FlagDataPadded) { // the same bit as HEADERS' PADDED
		return p, nil
	}
	if len(p) == 0 || int(p[0]) >= len(p) {
		return nil, fmt.Errorf("rls: the server sent a %v frame with bad padding", fh.Type)
	}
	return p[1 : len(p)-int(p[0])], nil
}

// stream returns the caller whose call is on stream id, or nil.
func (c *h2Conn) stream(id uint32) *h2Stream {
	if id == 0 {
		return nil
	}
	for i := range c.streams {
		if c.streams[i].id == id {
			return &c.streams[i]
		}
	}
	return nil
}

func (c *h2Conn) onData(fh http2.FrameHeader, p []byte) error {
	if fh.StreamID == 0 {
		return errors.New("rls: the server sent DATA on stream 0")
	}
	// All of the payload, padding too, counts against the windows.
	n := int64(len(p))
	if c.recvPending += n; c.recvPending >= h2RecvWindow/2 {
		if err := c.fr.WriteWindowUpdate(0, uint32(c.recvPending)); err != nil {
			return err
		}
		c.recvPending = 0
	}
	s := c.stream(fh.StreamID)
	if s == nil {
		return nil
	}
	if !s.headers {
		return c.end(s, errors.New("ShouldRateLimit: DATA before the response's headers"))
	}
	end := fh.Flags.Has(http2.FlagDataEndStream)
	if s.pending += n; s.pending >= h2RecvWindow/2 && !end {
		if err := c.fr.WriteWindowUpdate(s.id, uint32(s.pending)); err != nil {
			return err
		}
		s.pending = 0
	}
	p, err := unpad(fh, p)
	if err != nil {
		return err
	}
	if len(s.msg)+len(p) > 1<<20 {
		return c.end(s, errors.New("ShouldRateLimit: response above 1 MiB"))
	}
	s.msg = append(s.msg, p...)
	if end {
		return c.end(s, errors.New("ShouldRateLimit: the stream ended without trailers"))
	}
	return nil
}

// headerFragment decodes part of a header block; at its end, a block that
// ends the stream completes the call.
func (c *h2Conn) headerFragment(p []byte, endHeaders bool) error {
	if _, err := c.dec.Write(p); err != nil {
		return fmt.Errorf("rls: the server's header block: %w", err)
	}
	c.hdrOpen = !endHeaders
	if !endHeaders {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return fmt.Errorf("rls: the server's header block: %w", err)
	}
	s := c.hdr
	c.hdr = nil
	if s == nil {
		return nil
	}
	s.headers = true
	if c.hdrEndStream {
		return c.end(s, nil)
	}
	return nil
}

// onField takes one decoded header field of the block being read.
func (c *h2Conn) onField(f hpack.HeaderField) {
	s := c.hdr
	if s == nil {
		return
	}
	switch f.Name {
	case ":status":
		s.httpStatus, _ = strconv.Atoi(f.Value)
	case "grpc-status":
		if n, err := strconv.Atoi(f.Value); err == nil {
			s.grpcStatus = n
		}
	case "grpc-message":
		s.grpcMsg = f.Value
	}
}

func (c *h2Conn) onSettings(fh http2.FrameHeader, p []byte) error {
	if fh.StreamID != 0 || len(p)%6 != 0 {
		return errors.New("rls: the server sent a malformed SETTINGS")
	}
	if fh.Flags.Has(http2.FlagSettingsAck) {
		return nil
	}
	for ; len(p) > 0; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:6])
		switch http2.SettingID(binary.BigEndian.Uint16(p[:2])) {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = v
		case http2.SettingInitialWindowSize:
			if v > 1<<31-1 {
				return errors.New("rls: the server's initial window is above 2^31-1")
			}
			delta := int64(v) - c.initWindow
			c.initWindow = int64(v)
			for i := range c.streams {
				if c.streams[i].id != 0 {
					c.streams[i].window += delta
				}
			}
		case http2.SettingHeaderTableSize:
			// Lowered before any call: this client then uses no table.
			c.noTable = v < c.blocks.tableSize
			if c.noTable && c.indexed {
				return errors.New("rls: the server shrank its header table after the first call")
			}
		case http2.SettingMaxFrameSize:
			if v < 16384 || v > 1<<24-1 {
				return fmt.Errorf("rls: the server's SETTINGS_MAX_FRAME_SIZE %d is out of range", v)
			}
			c.maxFrame = int(v)
		}
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		return err
	}
	c.gotSettings = true
	c.unpark()
	return c.sendPending()
}

func (c *h2Conn) onGoAway(p []byte) error {
	if len(p) < 8 {
		return errors.New("rls: the server sent a malformed GOAWAY")
	}
	last := binary.BigEndian.Uint32(p[:4]) & (1<<31 - 1)
	code := http2.ErrCode(binary.BigEndian.Uint32(p[4:8]))
	c.goAway = fmt.Errorf("rls: the server sent GOAWAY (%v, last stream %d, %q)", code, last, p[8:])
	for i := range c.streams {
		if s := &c.streams[i]; s.id > last {
			if err := c.end(s, fmt.Errorf("ShouldRateLimit: the server refused the stream: %w", c.goAway)); err != nil {
				return err
			}
		}
	}
	return nil
}

// unpark starts the parked callers' calls as far as the server's
// MAX_CONCURRENT_STREAMS allows.
func (c *h2Conn) unpark() {
	for i := range c.streams {
		if c.parked == 0 || uint32(c.inFlight) >= c.maxStreams {
			return
		}
		if s := &c.streams[i]; s.parked {
			s.parked = false
			c.parked--
			c.start(s)
		}
	}
}

// start begins s's next call, unless the run is over, the server has sent
// GOAWAY or allows no more streams (then s is parked).
func (c *h2Conn) start(s *h2Stream) {
	if c.goAway != nil || c.nextID > 1<<31-1 {
		return
	}
	if uint32(c.inFlight) >= c.maxStreams {
		s.parked = true
		c.parked++
		return
	}
	if !c.run.take() {
		return
	}
	data := c.reqs[s.next]
	if s.next++; s.next == len(c.reqs) {
		s.next = 0
	}
	*s = h2Stream{id: c.nextID, next: s.next, t0: time.Now(), data: data, window: c.initWindow, grpcStatus: -1, msg: s.msg[:0]}
	c.nextID += 2
	c.inFlight++
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: c.nextBlock(), EndHeaders: true}); err != nil {
		c.err = err
		return
	}
	c.sendData(s)
}

// nextBlock returns the header block of the connection's next call: the
// first, which fills the server's table, then the steady one; the plain one
// for a server whose table is too small.
func (c *h2Conn) nextBlock() []byte {
	switch {
	case c.noTable:
		return c.blocks.plain
	case !c.indexed:
		c.indexed = true
		return c.blocks.first
	}
	return c.blocks.steady
}

// sendData writes as much of s's request as the windows allow.
func (c *h2Conn) sendData(s *h2Stream) {
	for s.sent < len(s.data) {
		n := min(int64(len(s.data)-s.sent), c.sendWindow, s.window, int64(c.maxFrame))
		if n <= 0 {
			return
		}
		end := s.sent + int(n)
		if err := c.fr.WriteData(s.id, end == len(s.data), s.data[s.sent:end]); err != nil {
			c.err = err
			return
		}
		s.sent = end
		c.sendWindow -= n
		s.window -= n
	}
}

// sendPending sends the requests the windows held back.
func (c *h2Conn) sendPending() error {
	for i := range c.streams {
		if s := &c.streams[i]; s.id != 0 && s.sent < len(s.data) {
			c.sendData(s)
		}
	}
	return c.err
}

// end completes s's call, with failure an error of the stream itself (nil
// when the call ended with its trailers), records it and starts the
// caller's next call.
func (c *h2Conn) end(s *h2Stream, failure error) error {
	d := time.Since(s.t0)
	code, err := rlsv3.RateLimitResponse_UNKNOWN, failure
	if err == nil {
		code, err = s.outcome()
	}
	c.tally.record(d, code, err)
	c.run.done.Add(1)
	s.id = 0
	c.inFlight--
	c.start(s)
	c.unpark()
	return c.err
}

// outcome reads a call that ended with its trailers.
func (s *h2Stream) outcome() (rlsv3.RateLimitResponse_Code, error) {
	switch {
	case s.httpStatus != 200:
		return 0, fmt.Errorf("ShouldRateLimit: HTTP status %d", s.httpStatus)
	case s.grpcStatus < 0:
		return 0, errors.New("ShouldRateLimit: no grpc-status in the trailers")
	case s.grpcStatus != 0:
		msg, err := url.PathUnescape(s.grpcMsg)
		if err != nil {
			msg = s.grpcMsg
		}
		return 0, fmt.Errorf("ShouldRateLimit: %v", status.New(codes.Code(s.grpcStatus), msg))
	case len(s.msg) < 5 || s.msg[0] != 0 || int(binary.BigEndian.Uint32(s.msg[1:5])) != len(s.msg)-5:
		return 0, fmt.Errorf("ShouldRateLimit: not one uncompressed gRPC message (%d bytes of DATA)", len(s.msg))
	}
	return overallCode(s.msg[5:])
}

// failAll counts every call in flight as failed with err.
func (c *h2Conn) failAll(err error) {
	for i := range c.streams {
		if s := &c.streams[i]; s.id != 0 {
			c.tally.record(time.Since(s.t0), 0, err)
			s.id = 0
		}
	}
	c.inFlight = 0
}
