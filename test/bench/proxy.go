package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// slowProxy is a TCP proxy that adds a fixed latency to every byte the client
// sends (so to every request, TLS handshake included), without limiting
// throughput: each chunk read from the client is written to the server
// `delay` after it arrived, in order. Replies pass unchanged. TLS passes
// through, so the member's certificate (issued for 127.0.0.1) still matches.
type slowProxy struct {
	target string
	delay  time.Duration
	ln     net.Listener
	conns  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	open   map[net.Conn]struct{}
}

func newSlowProxy(target string, delay time.Duration) (*slowProxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &slowProxy{target: target, delay: delay, ln: ln, open: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

func (p *slowProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

func (p *slowProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.open[c] = struct{}{}
	} else {
		delete(p.open, c)
	}
}

func (p *slowProxy) handle(client net.Conn) {
	d := net.Dialer{Timeout: 5 * time.Second}
	server, err := d.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.track(client, true)
	p.track(server, true)
	defer func() {
		_ = client.Close()
		_ = server.Close()
		p.track(client, false)
		p.track(server, false)
	}()
	done := make(chan struct{}, 2)
	go func() { delayedCopy(server, client, p.delay); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
}

// delayedCopy copies src to dst, holding every chunk for delay.
func delayedCopy(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{buf[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				_ = src.Close()
			}
			break
		}
	}
	// Drain, so that the reader can end.
	for range ch {
	}
	_ = dst.Close()
}

// close stops accepting and cuts every connection.
func (p *slowProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.open {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
