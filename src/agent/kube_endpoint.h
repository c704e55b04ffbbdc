#pragma once
// How to reach the Kubernetes API server. A header of its own so that the
// informer (informer.h) and the Node control plane (kube.h) can both use it
// without including each other.

#include <memory>
#include <string>

#include "agent/kube_credentials.h"

namespace weft::agent {

struct KubeEndpoint {
  std::string server;          // "https://10.96.0.1:443"
  KubeCredentialFiles files;   // where the credentials come from
  // The live credentials (files re-read as they rotate) and their health,
  // shared by every client of this endpoint on every thread: shared
  // ownership because the informers' factories copy the endpoint and the
  // last of them to stop may be any. Set by InClusterEndpoint() and
  // KubeconfigEndpoint(), or KubeCredentials::Load(files).
  std::shared_ptr<KubeCredentials> credentials;
};

}  // namespace weft::agent
