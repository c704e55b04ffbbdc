// The ClusterNetworkPolicy conformance suite (sigs.k8s.io/network-policy-api's conformance package) as a
// test binary: scripts/k8s-build.sh runs `go test -c` on it here, scripts/k8s-conformance.sh runs it.
// A module of its own: v0.3.0 needs k8s.io/* v0.36.4, go 1.26.6 and controller-runtime, which would move the
// pinned Kubernetes build's dependencies in ../go.mod. To change the version:
//   cd tests/k8s/cnpconformance && go get -t sigs.k8s.io/network-policy-api/conformance@VERSION
// (and refresh deploy/crd/clusternetworkpolicies.yaml from the same version).
module weft/tests/k8s/cnpconformance

go 1.26.6

require sigs.k8s.io/network-policy-api v0.3.0 // indirect
