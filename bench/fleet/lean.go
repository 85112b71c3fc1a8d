package main

// The lean load: the observing probes spoken at the protocol level. Each
// is its own HTTP/2 connection with one ProbeService.Connect stream that
// says Hello and then sends one Reports message with the observed points
// of one flush interval at a time, so the daemon reads exactly what a
// thousand library probes send it. What it saves is the load generator's
// own CPU: on one two-core machine the library probes' goroutines, timers
// and gRPC writers take a third of a core or more, which the daemon under
// test would otherwise not have.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// leanProbe is one connection and its one Connect stream.
type leanProbe struct {
	conn net.Conn
	mu   sync.Mutex // serialises writes
	fr   *http2.Framer
	// What the daemon still lets this side send (HTTP/2 flow control).
	sendConn, sendStream int64
	welcomed             atomic.Bool
	closed               atomic.Bool
}

const leanStream = 1

// dialLean opens a connection to addr and starts the Connect stream with
// a Hello named name.
func dialLean(addr, name string) (*leanProbe, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &leanProbe{conn: conn, fr: http2.NewFramer(conn, conn), sendConn: 65535, sendStream: 65535}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var headers bytes.Buffer
	enc := hpack.NewEncoder(&headers)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/stepd.v1.ProbeService/Connect"},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	hello := &stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Hello{Hello: &stepdv1.Hello{
		Name: name, Language: "go", Pid: int64(os.Getpid()), Labels: map[string]string{"fleet": "idle"},
	}}}
	p.mu.Lock()
	_, err = io.WriteString(conn, http2.ClientPreface)
	if err == nil {
		err = p.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	}
	if err == nil {
		err = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: leanStream, BlockFragment: headers.Bytes(), EndHeaders: true})
	}
	if err == nil {
		err = p.fr.WriteData(leanStream, false, grpcMessage(hello))
	}
	p.mu.Unlock()
	if err != nil {
		conn.Close()
		return nil, err
	}
	go p.read()
	return p, nil
}

// grpcMessage frames m as one gRPC message.
func grpcMessage(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	out := make([]byte, 5+len(b))
	binary.BigEndian.PutUint32(out[1:5], uint32(len(b)))
	copy(out[5:], b)
	return out
}

// read answers what the protocol asks (settings, pings), keeps the flow
// control windows, and notes the Welcome.
func (p *leanProbe) read() {
	defer p.closed.Store(true)
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			p.mu.Lock()
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				p.sendStream += int64(v) - 65535
			}
			_ = p.fr.WriteSettingsAck()
			p.mu.Unlock()
		case *http2.PingFrame:
			if !f.IsAck() {
				p.mu.Lock()
				_ = p.fr.WritePing(true, f.Data)
				p.mu.Unlock()
			}
		case *http2.WindowUpdateFrame:
			p.mu.Lock()
			if f.StreamID == 0 {
				p.sendConn += int64(f.Increment)
			} else {
				p.sendStream += int64(f.Increment)
			}
			p.mu.Unlock()
		case *http2.DataFrame:
			// Welcome first, then Armed and heartbeats; the window they
			// used is given back so the daemon never stalls on it.
			p.welcomed.Store(true)
			if n := uint32(len(f.Data())); n > 0 {
				p.mu.Lock()
				_ = p.fr.WriteWindowUpdate(0, n)
				_ = p.fr.WriteWindowUpdate(leanStream, n)
				p.mu.Unlock()
			}
			if f.StreamEnded() {
				return
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				return
			}
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			return
		}
	}
}

// send writes one message on the stream; false when flow control or the
// connection does not let it go.
func (p *leanProbe) send(msg []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(len(msg))
	if p.closed.Load() || p.sendConn < n || p.sendStream < n {
		return false
	}
	if err := p.fr.WriteData(leanStream, false, msg); err != nil {
		return false
	}
	p.sendConn -= n
	p.sendStream -= n
	return true
}

// leanMain is the lean load's process, with the same stdin and stdout
// conversation as loadMain.
func leanMain(addr string, n, rate int, flush time.Duration) error {
	probes := make([]*leanProbe, n)
	for i := range probes {
		p, err := dialLean(addr, fmt.Sprintf("p%d", i+1))
		if err != nil {
			return fmt.Errorf("probe %d: %w", i+1, err)
		}
		defer p.conn.Close()
		probes[i] = p
	}
	var observed, dropped atomic.Int64
	go func() {
		for {
			connected := 0
			for _, p := range probes {
				if p.welcomed.Load() && !p.closed.Load() {
					connected++
				}
			}
			fmt.Printf("c %d %d %d\n", connected, observed.Load(), dropped.Load())
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return conversation(func(stop chan struct{}) {
		// A library probe observing rate/n points a second sends what one
		// flush interval gathered in one message.
		batch := max(1, int(math.Round(float64(rate)/float64(n)*flush.Seconds())))
		// Every millisecond the probes whose turn has come send one batch
		// each, round robin; what a late tick missed goes with the next one.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		began, sent, next := time.Now(), 0, 0
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				report := &stepdv1.ObservedReport{Kind: "tool_result", Name: "Read", Value: structpb.NewStringValue("ok"), Time: timestamppb.New(now)}
				reports := &stepdv1.Reports{}
				for range batch {
					reports.Observed = append(reports.Observed, report)
				}
				msg := grpcMessage(&stepdv1.ConnectRequest{Message: &stepdv1.ConnectRequest_Reports{Reports: reports}})
				for due := int(now.Sub(began).Seconds() * float64(rate)); sent+batch <= due; sent += batch {
					if probes[next].send(msg) {
						observed.Add(int64(batch))
					} else {
						dropped.Add(int64(batch))
					}
					next = (next + 1) % len(probes)
				}
			}
		}
	})
}
