#pragma once
// How to reach the Kubernetes API server, and where that comes from: the
// service-account mount in a cluster, or a kubeconfig. A header of its own so
// that the informer (informer.h) and the Node control plane (kube.h) can both
// use it without including each other.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kube/kube_credentials.h"

namespace weft::kube {

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

// From the service-account mount: KUBERNETES_SERVICE_HOST/PORT from `env`,
// token and CA from `sa_dir` (/var/run/secrets/kubernetes.io/serviceaccount).
Result<KubeEndpoint> InClusterEndpoint(const std::vector<std::string>& env, const std::string& sa_dir);
// From a kubeconfig (YAML or JSON): the current context's cluster and user.
// Inline *-data fields are written to files under `scratch_dir`.
Result<KubeEndpoint> KubeconfigEndpoint(const std::string& path, const std::string& scratch_dir);
// The same from already-read kubeconfig text (unit tests).
Result<KubeEndpoint> ParseKubeconfig(std::string_view text, const std::string& scratch_dir,
                                     const std::string& base_dir);

}  // namespace weft::kube
