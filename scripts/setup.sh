#!/usr/bin/env bash
# Installs every Debian 12 package Weft's build, tests, demo and benchmarks need.
# Idempotent: a second run only checks that everything is present.
set -euo pipefail

PACKAGES=(
  # build (cmake/dependencies.cmake names the package of any library missing)
  build-essential cmake ninja-build pkg-config
  libnl-3-dev libnl-route-3-dev libsqlite3-dev nlohmann-json3-dev libcurl4-openssl-dev
  libssl-dev libyaml-dev libcli11-dev libgtest-dev libcpp-httplib-dev
  libnftnl-dev libmnl-dev libnetfilter-conntrack-dev libnetfilter-log-dev
  # the checking tree (scripts/build.sh --san: clang's ASan+UBSan and libFuzzer)
  clang libclang-rt-14-dev
  # compiler cache: scripts/build.sh compiles through it when present
  ccache
  # runtime tools the tests and demo drive (curl: etcd's and weftd's HTTP
  # endpoints; python3: the stand-in API server; openssl: its certificates)
  iproute2 nftables iptables iputils-ping procps conntrack sqlite3 openssl curl python3
  # jq: scripts/cluster.sh and the real-cluster tests read kubectl's JSON with it;
  # ca-certificates: Go (scripts/k8s-build.sh) fetches modules over HTTPS, and a
  # minbase Debian has no CA bundle
  jq ca-certificates
  # git: the build stamps each binary's --version with the commit it was built
  # from, and version_test builds a repository of its own with it
  git
  etcd-server containernetworking-plugins busybox-static
  # real runtimes (interop tests; grpc_tools.protoc needs pkg_resources)
  podman runc containerd python3-grpcio python3-grpc-tools python3-protobuf python3-pkg-resources
  # the image test (deploy/build-image.sh: a Debian root filesystem for
  # podman; python3-yaml: the test reads deploy/weftd.yaml)
  mmdebstrap python3-yaml
  # benchmarks
  iperf3 gnuplot-nox
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs Debian packages)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# etcd-server's package starts a system etcd; the tests run their own in a netns.
if command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now etcd >/dev/null 2>&1 || true
  systemctl disable --now containerd >/dev/null 2>&1 || true
fi
echo "setup.sh: done"
