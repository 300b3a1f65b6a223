package egress

import (
	"errors"
	"net"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// maxDNSPacket bounds a DNS message (plain UDP, no EDNS).
const maxDNSPacket = 512

// serveDNS answers A questions for declared host names with their forward
// address, AAAA (and any other type) for them with no records, and every
// other name with NXDOMAIN. Malformed packets are dropped.
func (px *Proxy) serveDNS(pc net.PacketConn) {
	defer px.wg.Done()
	buf := make([]byte, maxDNSPacket)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if resp, ok := px.answer(buf[:n]); ok {
			_, _ = pc.WriteTo(resp, addr)
		}
	}
}

func (px *Proxy) answer(pkt []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(pkt)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	addr, allowed := px.hosts[name]
	px.recordDNS(DNSQuestion{Name: name, Type: strings.TrimPrefix(q.Type.String(), "Type"), Allowed: allowed})
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	switch {
	case h.OpCode != 0:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case !allowed:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, maxDNSPacket), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if allowed && h.OpCode == 0 && q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
		if err := b.StartAnswers(); err != nil {
			return nil, false
		}
		rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60}
		if err := b.AResource(rr, dnsmessage.AResource{A: addr.As4()}); err != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, false
	}
	return out, true
}
