package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func testServer(t *testing.T) *server {
	t.Helper()
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{"service": func(o interface{}) ([]string, error) {
		es := o.(*discoveryv1.EndpointSlice)
		return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
	}})
	add := func(x interface{}) {
		if err := svcs.Add(x); err != nil {
			t.Fatal(err)
		}
	}
	add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.3.4", ClusterIPs: []string{"10.96.3.4", "fd00:10:96::34"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}})
	add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "Foo.Example.com"}})
	add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hl", Namespace: "ns2"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}})
	no := false
	pname, pport, pproto, host := "http", int32(8080), corev1.ProtocolTCP, "q1"
	if err := slices.Add(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "hl-x", Namespace: "ns2", Labels: map[string]string{discoveryv1.LabelServiceName: "hl"}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5"}},
			{Addresses: []string{"10.244.2.6"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}},
			{Addresses: []string{"10.244.2.7"}, Hostname: &host},
		},
		Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &pport, Protocol: &pproto}}}); err != nil {
		t.Fatal(err)
	}
	s := &server{domain: "cluster.local.", ttl: 5, services: svcs, slices: slices}
	s.synced.Store(true)
	return s
}

func query(name string, qtype uint16) []byte {
	q := []byte{0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	q = append(q, encodeName(name)...)
	q = binary.BigEndian.AppendUint16(q, qtype)
	return binary.BigEndian.AppendUint16(q, classIN)
}

// decode returns the reply's rcode and its answers as "A 1.2.3.4",
// "AAAA ...", "CNAME name.", checking the header and echoed question.
func decode(t *testing.T, q, r []byte) (int, []string) {
	t.Helper()
	if len(r) < len(q) || r[0] != q[0] || r[1] != q[1] || r[2]&0x80 == 0 || r[2]&0x04 == 0 || r[2]&0x01 == 0 {
		t.Fatalf("bad header %x", r)
	}
	if string(r[12:len(q)]) != string(q[12:]) {
		t.Fatalf("question not echoed")
	}
	var out []string
	i := len(q)
	for n := binary.BigEndian.Uint16(r[6:]); n > 0; n-- {
		if r[i] != 0xc0 || r[i+1] != 12 {
			t.Fatalf("answer name is not a pointer to the question")
		}
		typ := binary.BigEndian.Uint16(r[i+2:])
		l := int(binary.BigEndian.Uint16(r[i+10:]))
		rd := r[i+12 : i+12+l]
		switch typ {
		case typeA, typeAAAA:
			out = append(out, map[uint16]string{typeA: "A", typeAAAA: "AAAA"}[typ]+" "+net.IP(rd).String())
		case typeCNAME:
			var labels []string
			for j := 0; rd[j] != 0; j += int(rd[j]) + 1 {
				labels = append(labels, string(rd[j+1:j+1+int(rd[j])]))
			}
			out = append(out, "CNAME "+strings.Join(labels, ".")+".")
		case typePTR:
			out = append(out, "PTR "+nameOf(rd))
		case typeSRV:
			out = append(out, fmt.Sprintf("SRV %d %d %d %s", binary.BigEndian.Uint16(rd), binary.BigEndian.Uint16(rd[2:]),
				binary.BigEndian.Uint16(rd[4:]), nameOf(rd[6:])))
		}
		i += 12 + l
	}
	if i != len(r) {
		t.Fatalf("%d trailing bytes", len(r)-i)
	}
	return int(r[3] & 0xf), out
}

func nameOf(rd []byte) string {
	var labels []string
	for j := 0; rd[j] != 0; j += int(rd[j]) + 1 {
		labels = append(labels, string(rd[j+1:j+1+int(rd[j])]))
	}
	return strings.Join(labels, ".") + "."
}

func TestLookup(t *testing.T) {
	s := testServer(t)
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
		want  string
	}{
		{"web.ns1.svc.cluster.local", typeA, rcodeOK, "A 10.96.3.4"},
		{"WEB.Ns1.svc.cluster.local", typeA, rcodeOK, "A 10.96.3.4"},
		{"web.ns1.svc.cluster.local", typeAAAA, rcodeOK, "AAAA fd00:10:96::34"},
		{"web.ns2.svc.cluster.local", typeA, rcodeNXDomain, ""},
		{"ext.ns1.svc.cluster.local", typeA, rcodeOK, "CNAME foo.example.com."},
		{"hl.ns2.svc.cluster.local", typeA, rcodeOK, "A 10.244.1.5,A 10.244.2.7"},
		{"q1.hl.ns2.svc.cluster.local", typeA, rcodeOK, "A 10.244.2.7"},
		{"10-244-1-5.hl.ns2.svc.cluster.local", typeA, rcodeOK, "A 10.244.1.5"},
		{"10-244-2-6.hl.ns2.svc.cluster.local", typeA, rcodeNXDomain, ""}, // not ready
		{"q2.hl.ns2.svc.cluster.local", typeA, rcodeNXDomain, ""},
		{"_http._tcp.web.ns1.svc.cluster.local", typeSRV, rcodeOK, "SRV 0 100 80 web.ns1.svc.cluster.local."},
		{"_http._tcp.web.ns1.svc.cluster.local", typeA, rcodeOK, ""},
		{"_http._udp.web.ns1.svc.cluster.local", typeSRV, rcodeNXDomain, ""},
		{"_http._tcp.hl.ns2.svc.cluster.local", typeSRV, rcodeOK,
			"SRV 0 100 8080 10-244-1-5.hl.ns2.svc.cluster.local.,SRV 0 100 8080 q1.hl.ns2.svc.cluster.local."},
		{"4.3.96.10.in-addr.arpa", typePTR, rcodeOK, "PTR web.ns1.svc.cluster.local."},
		{"4.3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa", typePTR, rcodeOK, "PTR web.ns1.svc.cluster.local."},
		{"7.2.244.10.in-addr.arpa", typePTR, rcodeOK, "PTR q1.hl.ns2.svc.cluster.local."},
		{"9.9.9.10.in-addr.arpa", typePTR, rcodeNXDomain, ""},
		{"3.96.10.in-addr.arpa", typePTR, rcodeRefused, ""},
		{"10-244-1-7.ns1.pod.cluster.local", typeA, rcodeOK, "A 10.244.1.7"},
		{"x.ns1.pod.cluster.local", typeA, rcodeNXDomain, ""},
		{"ns1.svc.cluster.local", typeA, rcodeOK, ""},
		{"web.ns1.svc.cluster.local.ns1.svc.cluster.local", typeA, rcodeNXDomain, ""},
		{"example.com", typeA, rcodeRefused, ""},
	} {
		q := query(c.name, c.qtype)
		rcode, got := decode(t, q, s.handle(q))
		if rcode != c.rcode || strings.Join(got, ",") != c.want {
			t.Errorf("%s type %d: rcode %d %q, want %d %q", c.name, c.qtype, rcode, got, c.rcode, c.want)
		}
	}
}

func TestBadQueries(t *testing.T) {
	s := testServer(t)
	if r := s.handle([]byte{1, 2, 3}); r != nil {
		t.Errorf("short message answered")
	}
	q := query("web.ns1.svc.cluster.local", typeA)
	resp := append([]byte{}, q...)
	resp[2] |= 0x80
	if r := s.handle(resp); r != nil {
		t.Errorf("a response was answered")
	}
	bad := append([]byte{}, q[:14]...) // name cut short
	if r := s.handle(bad); r == nil || r[3]&0xf != rcodeFormErr {
		t.Errorf("truncated question: %x", r)
	}
	s.synced.Store(false)
	if r := s.handle(q); r == nil || r[3]&0xf != rcodeServFail {
		t.Errorf("before sync: %x", r)
	}
}
