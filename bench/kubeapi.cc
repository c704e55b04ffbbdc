#include "bench/kubeapi.h"

#include <signal.h>

#include <thread>

#include "sys/exec.h"
#include "sys/files.h"

namespace weft::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kToken[] = "weft-bench-token";

Status Openssl(const std::vector<std::string>& args) {
  sys::ExecRequest req;
  req.path = "/usr/bin/openssl";
  req.argv = {"openssl"};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.env = {"PATH=/usr/bin:/bin"};
  req.timeout = std::chrono::seconds(30);
  WEFT_ASSIGN_OR_RETURN(auto r, sys::Exec(req));
  if (r.exit_code != 0) return Status::Error(Reason::kFailed, Domain::kExec,
                                             "openssl " + args[0] + " failed", r.err.substr(0, 500));
  return Status::Ok();
}

Status MakeCerts(const std::string& d, const std::string& ip) {
  const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"};
  std::vector<std::string> ca = {"req", "-x509"};
  ca.insert(ca.end(), ec.begin(), ec.end());
  ca.insert(ca.end(), {"-keyout", d + "/ca.key", "-out", d + "/ca.crt", "-subj", "/CN=weft-bench-ca", "-days", "2"});
  WEFT_RETURN_IF_ERROR(Openssl(ca));
  std::vector<std::string> csr = {"req", "-new"};
  csr.insert(csr.end(), ec.begin(), ec.end());
  csr.insert(csr.end(), {"-keyout", d + "/server.key", "-out", d + "/server.csr", "-subj", "/CN=kube-apiserver"});
  WEFT_RETURN_IF_ERROR(Openssl(csr));
  WEFT_RETURN_IF_ERROR(
      sys::WriteFileAtomic(d + "/ext", "subjectAltName=IP:" + ip + "\nextendedKeyUsage=serverAuth\n", 0644));
  return Openssl({"x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.crt", "-CAkey", d + "/ca.key",
                  "-CAcreateserial", "-out", d + "/server.crt", "-days", "2", "-extfile", d + "/ext"});
}

std::string Plural(const std::string& kind) {
  if (kind == "Pod") return "pods";
  if (kind == "Namespace") return "namespaces";
  if (kind == "Node") return "nodes";
  if (kind == "NetworkPolicy") return "networkpolicies";
  return "";
}

}  // namespace

KubeApi::KubeApi(sys::Netns ns, Daemon proc, std::string url, std::string token, std::string kubeconfig,
                 sys::TlsOptions tls)
    : ns_(std::move(ns)),
      proc_(std::move(proc)),
      url_(std::move(url)),
      token_(std::move(token)),
      kubeconfig_(std::move(kubeconfig)),
      client_(std::move(tls)) {}

KubeApi::~KubeApi() { proc_.Stop(SIGTERM, 2000); }

Result<std::unique_ptr<KubeApi>> KubeApi::Start(const std::string& netns_path, const std::string& ip,
                                                const std::string& dir, const std::string& script) {
  WEFT_RETURN_IF_ERROR(MakeCerts(dir, ip));
  const std::string url = "https://" + ip + ":6443";
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(netns_path));
  WEFT_ASSIGN_OR_RETURN(Daemon proc, Daemon::Start(netns_path,
                                                   {"/usr/bin/python3", script, "--listen", ip + ":6443", "--token",
                                                    kToken, "--cert", dir + "/server.crt", "--key", dir + "/server.key",
                                                    "--page-cap", "0", "--history", "1000000"},
                                                   dir + "/apiserver.log"));
  const std::string kubeconfig = dir + "/kubeconfig";
  WEFT_RETURN_IF_ERROR(sys::WriteFileAtomic(kubeconfig,
                                            "apiVersion: v1\n"
                                            "kind: Config\n"
                                            "clusters:\n"
                                            "- name: bench\n"
                                            "  cluster:\n"
                                            "    server: " +
                                                url +
                                                "\n"
                                                "    certificate-authority: " +
                                                dir +
                                                "/ca.crt\n"
                                                "users:\n"
                                                "- name: weftd\n"
                                                "  user:\n"
                                                "    token: " +
                                                kToken +
                                                "\n"
                                                "contexts:\n"
                                                "- name: bench\n"
                                                "  context:\n"
                                                "    cluster: bench\n"
                                                "    user: weftd\n"
                                                "current-context: bench\n",
                                            0600));
  sys::TlsOptions tls;
  tls.ca_file = dir + "/ca.crt";
  std::unique_ptr<KubeApi> api(new KubeApi(std::move(ns), std::move(proc), url, kToken, kubeconfig, tls));
  const auto end = Clock::now() + std::chrono::seconds(20);
  std::string last;
  while (Clock::now() < end) {
    auto r = api->Request("GET", "/readyz");
    if (r.ok() && r->status == 200) return api;
    last = r.ok() ? "HTTP " + std::to_string(r->status) : r.status().ToString();
    if (!api->proc_.Running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                       "the stand-in API server did not come up (" + last + "); see " + dir + "/apiserver.log");
}

Result<ApiReply> KubeApi::Request(const std::string& method, const std::string& path, const std::string& body,
                                  const std::string& content_type) {
  sys::HttpRequest req;
  req.method = method;
  req.url = url_ + path;
  req.headers = {"Authorization: Bearer " + token_, "Accept: application/json"};
  if (!body.empty()) {
    req.body = body;
    req.headers.push_back("Content-Type: " + (content_type.empty() ? std::string("application/json") : content_type));
  }
  req.timeout = std::chrono::seconds(60);
  ApiReply reply;
  Status st;
  // A connection the stand-in server dropped (it is Python on a busy
  // machine) is retried on a new one; HTTP answers are never retried.
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
    st = sys::RunInNetns(ns_, [&]() -> Status {
      reply.sent = Clock::now();
      WEFT_ASSIGN_OR_RETURN(sys::HttpResponse r, client_.Do(req));
      reply.answered = Clock::now();
      reply.status = r.status;
      reply.body = std::move(r.body);
      return Status::Ok();
    });
    reply.retries = attempt;
    if (st.ok()) return reply;
  }
  return st;
}

std::string KubeApi::CollectionPath(const std::string& kind, const std::string& ns) {
  if (kind == "ClusterNetworkPolicy") return "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies";
  const std::string base = kind == "NetworkPolicy" ? "/apis/networking.k8s.io/v1" : "/api/v1";
  return base + (ns.empty() ? "" : "/namespaces/" + ns) + "/" + Plural(kind);
}

std::string KubeApi::ObjectPath(const std::string& kind, const std::string& ns, const std::string& name) {
  return CollectionPath(kind, ns) + "/" + name;
}

Status KubeApi::Create(const json& obj) {
  const std::string kind = obj.value("kind", "");
  const json& meta = obj["metadata"];
  const std::string ns = kind == "Pod" || kind == "NetworkPolicy" ? meta.value("namespace", "default") : "";
  WEFT_ASSIGN_OR_RETURN(ApiReply r, Request("POST", CollectionPath(kind, ns), obj.dump()));
  if (r.status == 409 && r.retries > 0) return Status::Ok();  // the dropped attempt had created it
  if (r.status / 100 != 2)
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "create " + kind + " " + meta.value("name", "") + ": HTTP " + std::to_string(r.status),
                         r.body.substr(0, 300));
  return Status::Ok();
}

Status KubeApi::Store(const json& obj) {
  WEFT_ASSIGN_OR_RETURN(ApiReply r, Request("POST", "/_test/objects", obj.dump()));
  if (r.status / 100 != 2)
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "store " + obj.value("kind", "") + ": HTTP " + std::to_string(r.status),
                         r.body.substr(0, 300));
  return Status::Ok();
}

Result<ApiReply> KubeApi::MergePatch(const std::string& path, const json& patch) {
  WEFT_ASSIGN_OR_RETURN(ApiReply r, Request("PATCH", path, patch.dump(), "application/merge-patch+json"));
  if (r.status / 100 != 2)
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "patch " + path + ": HTTP " + std::to_string(r.status),
                         r.body.substr(0, 300));
  return r;
}

}  // namespace weft::bench
