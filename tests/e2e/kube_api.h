#pragma once
// The stand-in Kubernetes API server (tests/integration/agent/fake_apiserver.py)
// as a test fixture: a throwaway CA and server certificate, the server
// inside a test netns on https://192.0.2.254:6443, a kubeconfig for weftd,
// and fast in-process requests (libcurl through sys::HttpClient, one
// kept-alive TLS connection, made from a thread inside the netns).
//
// Thread-safety: every method may be called from any thread; requests are
// serialized.

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "e2e/cluster.h"
#include "sys/http.h"
#include "sys/netns.h"

namespace weft::testing {

class FakeApiServer {
 public:
  // Makes a CA + server cert (openssl CLI; SANs 192.0.2.254, 2001:db8::fe
  // and 127.0.0.1) under `dir`, starts fake_apiserver.py inside netns `ns`
  // on <host>:6443 (`ns` must hold `host`: the Underlay's kIp, or kIp6 for
  // an IPv6-only underlay) and waits until it answers.
  // Throws std::runtime_error when any of that fails. The child process is
  // killed in the destructor; `dir` is left for the caller to remove.
  FakeApiServer(const TestNetns& ns, const std::string& dir, std::string token = "weft-test-token",
                std::string host = "192.0.2.254");
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  std::string server() const;
  std::string ca_file() const { return dir_ + "/ca.crt"; }
  // A kubeconfig (certificate-authority + tokenFile) weftd can use. The
  // token file is rewritten by RotateToken, as a projected token is.
  std::string kubeconfig() const { return dir_ + "/kubeconfig"; }
  std::string token() const;

  // A request as a client makes it (from inside the netns, with the
  // current token); returns the HTTP status (0: no answer, the reason in
  // *out), the body in *out. A null `body` sends none.
  int Request(const std::string& method, const std::string& path, const nlohmann::json& body = nullptr,
              std::string* out = nullptr, const std::string& content_type = "application/json");

  // The object, or null when it does not exist.
  nlohmann::json Get(const std::string& kind, const std::string& ns, const std::string& name);
  // Create-or-replace any object (Node, Namespace, Pod, NetworkPolicy, Service, EndpointSlice,
  // ClusterNetworkPolicy) by
  // its kind/metadata, as a client would: POST, and PUT when it exists;
  // then, when the object carries a status field the server did not take
  // (a Pod's status is reset on create, and no update writes any status),
  // PUT .../status, unconditionally (no resourceVersion: weftd may have
  // patched the object meanwhile). So a new Pod with a status.podIP is seen by watchers
  // first Pending without an IP (ADDED), then with it (MODIFIED), as from a
  // kubelet. A namespaced object without metadata.namespace goes to
  // "default". Returns the stored object; throws std::runtime_error with
  // the server's answer when it refuses (the server's rules hold: a Pod's
  // spec is immutable but for images, so move a pod by Delete + Apply).
  nlohmann::json Apply(nlohmann::json obj);
  // Deletes immediately; false when it did not exist. `ns` "" for
  // cluster-scoped kinds. A Namespace takes its pods and policies with it.
  bool Delete(const std::string& kind, const std::string& ns, const std::string& name);

  // A BOOKMARK at the current resourceVersion to every watch that allows them.
  void Bookmark();
  // The server serves a CRD's resource from now on, as after creating the
  // CRD ("clusternetworkpolicies": ClusterNetworkPolicy, v1alpha2).
  void InstallCrd(const std::string& plural);
  // Compaction: older continue tokens and watch RVs get 410; open watches
  // get ERROR 410.
  void Expire();
  // Every open watch gets half an event line, then its connection is cut.
  void CutWatches();
  // From now on only `token` is accepted (401 for the old one); the
  // kubeconfig's token file and this fixture's requests switch to it.
  void RotateToken(const std::string& token);
  // Defaulting on create/update (on by default); off stores objects as sent.
  void SetDefaulting(bool on);
  // At most `cap` items in a list page whatever the limit (0: limit only;
  // the server starts at 7). `expire_after_pages` > 0 compacts right after
  // that many more pages carrying a continue token were served (of
  // `expire_resource`, e.g. "nodes", when not empty).
  void SetPageCap(int cap, int expire_after_pages = 0, const std::string& expire_resource = "");
  // Stops the server as a restart does (SIGTERM: it writes its objects and
  // resourceVersion to its state file), leaves the address refusing
  // connections for `down`, then starts it again and waits until it
  // answers: objects and resourceVersions go on, its event history starts
  // empty (older watch RVs and continue tokens get 410). Throws when the
  // server does not come back.
  void Restart(std::chrono::milliseconds down);
  // Requests seen so far, one "METHOD PATH[ CONTENT-TYPE] -> CODE" per line.
  std::string Log();
  // A ServiceAccount token from the stand-in's TokenRequest (bound to Pod
  // `pod` of the same namespace when given: its user then names the pod's
  // node, as kube-apiserver's does). Throws on failure.
  std::string CreateToken(const std::string& ns, const std::string& sa, const std::string& pod = "");
  // A copy of kubeconfig() whose tokenFile holds `token`; returns its path.
  std::string KubeconfigWithToken(const std::string& name, const std::string& token) const;
  // Every write so far: [{"method", "path", "code", "user", "node"}] (node:
  // the node named in the writer's token, "" for none).
  nlohmann::json Writes();
  // "/api/v1/namespaces/NS/pods[/NAME]" etc. for a kind; throws for kinds
  // the server does not serve.
  static std::string PathFor(const std::string& kind, const std::string& ns, const std::string& name = "");

 private:
  // A /_test control; throws unless it answers 200.
  void Control(const std::string& path, const nlohmann::json& body = nullptr);
  void WriteKubeconfig() const;

  // Starts the process and waits until it answers (throws otherwise).
  void Start();

  std::string dir_;
  std::string host_;
  std::string ns_name_;
  mutable std::mutex mu_;
  std::string token_;
  sys::Netns netns_;
  sys::HttpClient http_;
  std::unique_ptr<Child> proc_;
};

}  // namespace weft::testing
