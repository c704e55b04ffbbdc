// Command kubedns is the cluster DNS of scripts/cluster.sh's cluster, a
// stand-in for CoreDNS, which the Go module proxy does not serve and agnhost
// does not carry. It answers what the upstream sig-network e2e suite asks of
// a cluster DNS (docs/cluster.md, "Cluster DNS"):
//
//	<svc>.<ns>.svc.<domain>      A/AAAA: the Service's ClusterIPs; for a
//	                             headless Service its EndpointSlices' ready
//	                             addresses; CNAME for an ExternalName Service
//	<a-b-c-d>.<ns>.pod.<domain>  A: the address the name spells (as CoreDNS's
//	                             `pods insecure`)
//	<host>.<svc>.<ns>.svc.<domain>  A/AAAA: the endpoint of the Service whose
//	                             hostname (pod spec.hostname + subdomain) or
//	                             dashed address is <host>
//	_<port>._<proto>.<svc>.<ns>.svc.<domain>  SRV: per named port, the Service
//	                             name (ClusterIP) or each ready endpoint's
//	                             <host>.<svc>... name (headless)
//	<reversed IP>.in-addr.arpa / ip6.arpa  PTR: a ClusterIP's Service name, a
//	                             headless Service's endpoint's name
//
// from a client-go informer on Services and EndpointSlices (watches, so a new
// Service resolves as soon as the API server has it). Any other name in
// <domain> is NXDOMAIN; a name outside it (and the reverse zones) is REFUSED (no recursion: the
// cluster has no way out). UDP and TCP on --listen; --health serves /ready
// (200 once the informers have synced) and /healthz.
//
// The DNS messages are built by hand (RFC 1035 §4): the standard library has
// no DNS server, and this module takes nothing but Kubernetes and etcd.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	typeA     = 1
	typeCNAME = 5
	typePTR   = 12
	typeSRV   = 33
	typeAAAA  = 28
	typeANY   = 255
	classIN   = 1

	rcodeOK       = 0
	rcodeFormErr  = 1
	rcodeServFail = 2
	rcodeNXDomain = 3
	rcodeNotImp   = 4
	rcodeRefused  = 5
)

type server struct {
	domain   string // "cluster.local." (lower case, dot-terminated)
	ttl      uint32
	services cache.Indexer
	slices   cache.Indexer
	synced   atomic.Bool
}

// answer is one resource record of an answer.
type answer struct {
	typ   uint16
	rdata []byte
}

// lookup resolves name (lower case, dot-terminated) for qtype: the records,
// and the rcode.
func (s *server) lookup(name string, qtype uint16) ([]answer, int) {
	if strings.HasSuffix(name, ".in-addr.arpa.") || strings.HasSuffix(name, ".ip6.arpa.") {
		return s.reverse(name, qtype)
	}
	if name != s.domain && !strings.HasSuffix(name, "."+s.domain) {
		return nil, rcodeRefused
	}
	labels := strings.Split(strings.TrimSuffix(strings.TrimSuffix(name, s.domain), "."), ".")
	if n := len(labels); n == 4 && labels[3] == "svc" {
		return s.endpointHost(labels[0], labels[2], labels[1], qtype)
	}
	if n := len(labels); n == 5 && labels[4] == "svc" && strings.HasPrefix(labels[0], "_") && strings.HasPrefix(labels[1], "_") {
		return s.srv(labels[0][1:], labels[1][1:], labels[3], labels[2], qtype)
	}
	if len(labels) == 3 && labels[2] == "pod" {
		addr, err := netip.ParseAddr(strings.ReplaceAll(labels[0], "-", "."))
		if err != nil || !addr.Is4() {
			return nil, rcodeNXDomain
		}
		return ipAnswers([]netip.Addr{addr}, qtype), rcodeOK
	}
	if len(labels) != 3 || labels[2] != "svc" {
		// the zone's inner names (svc.<domain>, <ns>.svc.<domain>) exist, empty
		if name == s.domain || (len(labels) <= 2 && labels[len(labels)-1] == "svc") {
			return nil, rcodeOK
		}
		return nil, rcodeNXDomain
	}
	obj, ok, err := s.services.GetByKey(labels[1] + "/" + labels[0])
	if err != nil || !ok {
		return nil, rcodeNXDomain
	}
	svc := obj.(*corev1.Service)
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		target := strings.ToLower(strings.TrimSuffix(svc.Spec.ExternalName, ".")) + "."
		return []answer{{typeCNAME, encodeName(target)}}, rcodeOK
	}
	var addrs []netip.Addr
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		objs, _ := s.slices.ByIndex("service", svc.Namespace+"/"+svc.Name)
		for _, o := range objs {
			for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
					continue
				}
				for _, a := range ep.Addresses {
					if addr, err := netip.ParseAddr(a); err == nil {
						addrs = append(addrs, addr)
					}
				}
			}
		}
	} else {
		for _, ip := range svc.Spec.ClusterIPs {
			if addr, err := netip.ParseAddr(ip); err == nil {
				addrs = append(addrs, addr)
			}
		}
	}
	return ipAnswers(addrs, qtype), rcodeOK
}

// endpoints calls f for every endpoint of the Service ns/svc (ready ones
// only unless all) with its DNS host label: its hostname, else its first
// address dashed (CoreDNS's endpoint names).
func (s *server) endpoints(ns, svc string, all bool, f func(host string, ep discoveryv1.Endpoint, es *discoveryv1.EndpointSlice)) {
	objs, _ := s.slices.ByIndex("service", ns+"/"+svc)
	for _, o := range objs {
		es := o.(*discoveryv1.EndpointSlice)
		for _, ep := range es.Endpoints {
			if len(ep.Addresses) == 0 || (!all && ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			host := strings.NewReplacer(".", "-", ":", "-").Replace(ep.Addresses[0])
			if ep.Hostname != nil && *ep.Hostname != "" {
				host = strings.ToLower(*ep.Hostname)
			}
			f(host, ep, es)
		}
	}
}

// endpointHost: <host>.<svc>.<ns>.svc.<domain>.
func (s *server) endpointHost(host, ns, svc string, qtype uint16) ([]answer, int) {
	if _, ok, _ := s.services.GetByKey(ns + "/" + svc); !ok {
		return nil, rcodeNXDomain
	}
	var addrs []netip.Addr
	s.endpoints(ns, svc, false, func(h string, ep discoveryv1.Endpoint, _ *discoveryv1.EndpointSlice) {
		if h != host {
			return
		}
		for _, a := range ep.Addresses {
			if addr, err := netip.ParseAddr(a); err == nil {
				addrs = append(addrs, addr)
			}
		}
	})
	if len(addrs) == 0 {
		return nil, rcodeNXDomain
	}
	return ipAnswers(addrs, qtype), rcodeOK
}

// srv: _<port>._<proto>.<svc>.<ns>.svc.<domain>, SRV 0 <weight> <port> <target>.
func (s *server) srv(port, proto, ns, svcName string, qtype uint16) ([]answer, int) {
	obj, ok, _ := s.services.GetByKey(ns + "/" + svcName)
	if !ok {
		return nil, rcodeNXDomain
	}
	svc := obj.(*corev1.Service)
	record := func(p uint16, target string) answer {
		rd := binary.BigEndian.AppendUint16(nil, 0) // priority
		rd = binary.BigEndian.AppendUint16(rd, 100) // weight
		rd = binary.BigEndian.AppendUint16(rd, p)
		return answer{typeSRV, append(rd, encodeName(target)...)}
	}
	svcFQDN := svcName + "." + ns + ".svc." + s.domain
	var out []answer
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		for _, p := range svc.Spec.Ports {
			if strings.ToLower(p.Name) == port && strings.ToLower(string(p.Protocol)) == proto {
				out = append(out, record(uint16(p.Port), svcFQDN))
			}
		}
	} else {
		s.endpoints(ns, svcName, false, func(host string, _ discoveryv1.Endpoint, es *discoveryv1.EndpointSlice) {
			for _, p := range es.Ports {
				if p.Name != nil && p.Port != nil && strings.ToLower(*p.Name) == port &&
					p.Protocol != nil && strings.ToLower(string(*p.Protocol)) == proto {
					out = append(out, record(uint16(*p.Port), host+"."+svcFQDN))
				}
			}
		})
	}
	if len(out) == 0 {
		return nil, rcodeNXDomain
	}
	if qtype != typeSRV && qtype != typeANY {
		return nil, rcodeOK
	}
	return out, rcodeOK
}

// reverse: a PTR for a Service's ClusterIP or a headless Service's endpoint.
func (s *server) reverse(name string, qtype uint16) ([]answer, int) {
	var addr netip.Addr
	if v4, ok := strings.CutSuffix(name, ".in-addr.arpa."); ok {
		l := strings.Split(v4, ".")
		if len(l) != 4 {
			return nil, rcodeRefused
		}
		a, err := netip.ParseAddr(l[3] + "." + l[2] + "." + l[1] + "." + l[0])
		if err != nil {
			return nil, rcodeNXDomain
		}
		addr = a
	} else {
		n := strings.Split(strings.TrimSuffix(name, ".ip6.arpa."), ".")
		if len(n) != 32 {
			return nil, rcodeRefused
		}
		var b strings.Builder
		for i := 31; i >= 0; i-- {
			b.WriteString(n[i])
			if i%4 == 0 && i > 0 {
				b.WriteByte(':')
			}
		}
		a, err := netip.ParseAddr(b.String())
		if err != nil {
			return nil, rcodeNXDomain
		}
		addr = a
	}
	var targets []string
	for _, o := range s.services.List() {
		svc := o.(*corev1.Service)
		for _, ip := range svc.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil && a == addr {
				targets = append(targets, svc.Name+"."+svc.Namespace+".svc."+s.domain)
			}
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			s.endpoints(svc.Namespace, svc.Name, false, func(host string, ep discoveryv1.Endpoint, _ *discoveryv1.EndpointSlice) {
				for _, ip := range ep.Addresses {
					if a, err := netip.ParseAddr(ip); err == nil && a == addr {
						targets = append(targets, host+"."+svc.Name+"."+svc.Namespace+".svc."+s.domain)
					}
				}
			})
		}
	}
	if len(targets) == 0 {
		return nil, rcodeNXDomain
	}
	if qtype != typePTR && qtype != typeANY {
		return nil, rcodeOK
	}
	out := make([]answer, 0, len(targets))
	for _, t := range targets {
		out = append(out, answer{typePTR, encodeName(t)})
	}
	return out, rcodeOK
}

func ipAnswers(addrs []netip.Addr, qtype uint16) []answer {
	var out []answer
	for _, a := range addrs {
		switch {
		case a.Is4() && (qtype == typeA || qtype == typeANY):
			b := a.As4()
			out = append(out, answer{typeA, b[:]})
		case a.Is6() && !a.Is4In6() && (qtype == typeAAAA || qtype == typeANY):
			b := a.As16()
			out = append(out, answer{typeAAAA, b[:]})
		}
	}
	return out
}

func encodeName(name string) []byte {
	var b []byte
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" || len(l) > 63 {
			continue
		}
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0)
}

// parseQuestion reads the first question of msg: its name (lower case,
// dot-terminated), type and class, and where the question ends.
func parseQuestion(msg []byte) (string, uint16, uint16, int, error) {
	if len(msg) < 12 || binary.BigEndian.Uint16(msg[4:6]) != 1 {
		return "", 0, 0, 0, errors.New("not one question")
	}
	var labels []string
	i := 12
	for {
		if i >= len(msg) {
			return "", 0, 0, 0, errors.New("truncated name")
		}
		n := int(msg[i])
		i++
		if n == 0 {
			break
		}
		if n > 63 || i+n > len(msg) { // no compression in a question
			return "", 0, 0, 0, errors.New("bad label")
		}
		labels = append(labels, strings.ToLower(string(msg[i:i+n])))
		i += n
	}
	if i+4 > len(msg) {
		return "", 0, 0, 0, errors.New("truncated question")
	}
	return strings.Join(labels, ".") + ".", binary.BigEndian.Uint16(msg[i:]), binary.BigEndian.Uint16(msg[i+2:]), i + 4, nil
}

// handle answers one query message; nil when it should be dropped.
func (s *server) handle(msg []byte) []byte {
	if len(msg) < 12 || msg[2]&0x80 != 0 { // too short, or a response
		return nil
	}
	reply := func(rcode int, qend int, answers []answer) []byte {
		out := make([]byte, 12, 512)
		copy(out, msg[:4])
		out[2] = 0x80 | msg[2]&0x79 | 0x04 // QR, opcode and RD as asked, AA
		out[3] = byte(rcode)
		if qend > 0 {
			binary.BigEndian.PutUint16(out[4:], 1)
			out = append(out, msg[12:qend]...)
		}
		binary.BigEndian.PutUint16(out[6:], uint16(len(answers)))
		for _, a := range answers {
			out = append(out, 0xc0, 12) // the question's name
			out = binary.BigEndian.AppendUint16(out, a.typ)
			out = binary.BigEndian.AppendUint16(out, classIN)
			out = binary.BigEndian.AppendUint32(out, s.ttl)
			out = binary.BigEndian.AppendUint16(out, uint16(len(a.rdata)))
			out = append(out, a.rdata...)
		}
		return out
	}
	if op := (msg[2] >> 3) & 0xf; op != 0 {
		return reply(rcodeNotImp, 0, nil)
	}
	name, qtype, qclass, qend, err := parseQuestion(msg)
	if err != nil {
		return reply(rcodeFormErr, 0, nil)
	}
	if qclass != classIN {
		return reply(rcodeRefused, qend, nil)
	}
	if !s.synced.Load() {
		return reply(rcodeServFail, qend, nil)
	}
	answers, rcode := s.lookup(name, qtype)
	return reply(rcode, qend, answers)
}

func (s *server) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if out := s.handle(buf[:n]); out != nil {
			if len(out) > 512 { // truncated: the client retries over TCP
				out = out[:12]
				out[2] |= 0x02
				binary.BigEndian.PutUint16(out[4:], 0)
				binary.BigEndian.PutUint16(out[6:], 0)
			}
			_, _ = pc.WriteTo(out, from)
		}
	}
}

func (s *server) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go func() {
			defer c.Close()
			for {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var n uint16
				if binary.Read(c, binary.BigEndian, &n) != nil {
					return
				}
				msg := make([]byte, n)
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				out := s.handle(msg)
				if out == nil {
					return
				}
				if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
					return
				}
			}
		}()
	}
}

func main() {
	listen := flag.String("listen", ":53", "address for DNS over UDP and TCP")
	health := flag.String("health", ":8080", "address of /ready and /healthz (empty: none)")
	domain := flag.String("domain", "cluster.local", "the cluster's DNS domain")
	ttl := flag.Uint("ttl", 5, "TTL of every answer, seconds")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	var cfg *rest.Config
	var err error
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		log.Fatalf("kubedns: no API server configuration: %v", err)
	}
	cfg.UserAgent = "weft-kubedns"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("kubedns: %v", err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	svcInf := factory.Core().V1().Services().Informer()
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	if err := sliceInf.AddIndexers(cache.Indexers{"service": func(o interface{}) ([]string, error) {
		es := o.(*discoveryv1.EndpointSlice)
		if n := es.Labels[discoveryv1.LabelServiceName]; n != "" {
			return []string{es.Namespace + "/" + n}, nil
		}
		return nil, nil
	}}); err != nil {
		log.Fatalf("kubedns: %v", err)
	}
	s := &server{
		domain:   strings.ToLower(strings.Trim(*domain, ".")) + ".",
		ttl:      uint32(*ttl),
		services: svcInf.GetIndexer(),
		slices:   sliceInf.GetIndexer(),
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	pc, err := net.ListenPacket("udp", *listen)
	if err != nil {
		log.Fatalf("kubedns: %v", err)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("kubedns: %v", err)
	}
	go s.serveUDP(pc)
	go s.serveTCP(l)
	if *health != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
			if !s.synced.Load() {
				http.Error(w, "informers not synced", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		hs := &http.Server{Addr: *health, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Fatalf("kubedns: %v", err)
			}
		}()
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
		os.Exit(1)
	}
	s.synced.Store(true)
	log.Printf("kubedns: serving %s on %s (udp, tcp)", s.domain, *listen)
	<-ctx.Done()
	pc.Close()
	l.Close()
}
