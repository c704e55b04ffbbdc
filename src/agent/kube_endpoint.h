#pragma once
// How to reach the Kubernetes API server. A header of its own so that the
// informer (informer.h) and the Node control plane (kube.h) can both use it
// without including each other.

#include <string>

#include "agent/http.h"

namespace weft::agent {

struct KubeEndpoint {
  std::string server;   // "https://10.96.0.1:443"
  std::string token;    // bearer token ("" = none)
  TlsOptions tls;
};

}  // namespace weft::agent
