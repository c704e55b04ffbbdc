#include "e2e/kube_api.h"

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace weft::testing {
namespace {

sys::Netns OpenNetns(const TestNetns& ns) {
  auto n = sys::Netns::Open(ns.path());
  if (!n.ok()) throw std::runtime_error("FakeApiServer: " + n.status().ToString());
  return std::move(n).value();
}

void Run(const std::vector<std::string>& argv) {
  std::string out, err;
  if (Cmd(argv, &out, &err) != 0) throw std::runtime_error("FakeApiServer: " + argv[0] + " " + argv[1] + ": " + err);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) throw std::runtime_error("FakeApiServer: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("FakeApiServer: cannot rename " + tmp);
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A CA and a server certificate signed by it, valid for the addresses the
// server is reached at (EC P-256: fast to make).
void MakeCertificates(const std::string& dir) {
  Run({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
       dir + "/ca.key", "-out", dir + "/ca.crt", "-subj", "/CN=weft-test-ca", "-days", "2"});
  Run({"openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
       dir + "/server.key", "-out", dir + "/server.csr", "-subj", "/CN=kube-apiserver"});
  WriteFile(dir + "/server.ext",
            "subjectAltName=IP:192.0.2.254,IP:2001:db8::fe,IP:127.0.0.1,DNS:kubernetes.default.svc\n"
            "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n");
  Run({"openssl", "x509", "-req", "-in", dir + "/server.csr", "-CA", dir + "/ca.crt", "-CAkey", dir + "/ca.key",
       "-CAcreateserial", "-out", dir + "/server.crt", "-days", "2", "-extfile", dir + "/server.ext"});
}

bool Namespaced(const std::string& kind) {
  return kind == "Pod" || kind == "NetworkPolicy" || kind == "ServiceAccount" || kind == "Service" ||
         kind == "EndpointSlice";
}

}  // namespace

FakeApiServer::FakeApiServer(const TestNetns& ns, const std::string& dir, std::string token, std::string host)
    : dir_(dir), host_(std::move(host)), ns_name_(ns.name()), token_(std::move(token)), netns_(OpenNetns(ns)) {
  static std::once_flag http_once;
  std::call_once(http_once, [] {
    if (!sys::InitHttp().ok()) throw std::runtime_error("FakeApiServer: curl_global_init failed");
  });
  Run({"mkdir", "-p", dir_});
  MakeCertificates(dir_);
  WriteFile(dir_ + "/token", token_ + "\n");
  WriteKubeconfig();
  http_ = sys::HttpClient(sys::TlsOptions{.ca_file = ca_file()});
  Start();
}

void FakeApiServer::Start() {
  proc_ = std::make_unique<Child>(
      ns_name_,
      std::vector<std::string>{"/usr/bin/python3", FAKE_APISERVER, "--listen", host_ + ":6443", "--cert",
                               dir_ + "/server.crt", "--key", dir_ + "/server.key", "--token", token(), "--state",
                               dir_ + "/state.json"},
      dir_ + "/apiserver.log");
  bool up = WaitFor(
      [&] {
        if (!proc_->Running()) return true;
        return Request("GET", "/healthz") == 200;
      },
      15000, 50);
  if (!up || !proc_->Running())
    throw std::runtime_error("FakeApiServer: not answering on " + server() + ":\n" +
                             ReadFileOrEmpty(dir_ + "/apiserver.log"));
}

void FakeApiServer::Restart(std::chrono::milliseconds down) {
  if (proc_->Stop(SIGTERM) != 0) throw std::runtime_error("FakeApiServer: did not save its state on SIGTERM");
  proc_.reset();
  std::this_thread::sleep_for(down);
  Start();
}

FakeApiServer::~FakeApiServer() { proc_.reset(); }

std::string FakeApiServer::server() const {
  return host_.find(':') == std::string::npos ? "https://" + host_ + ":6443" : "https://[" + host_ + "]:6443";
}

std::string FakeApiServer::token() const {
  std::lock_guard<std::mutex> l(mu_);
  return token_;
}

void FakeApiServer::WriteKubeconfig() const {
  WriteFile(kubeconfig(),
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: weft-test\n"
            "  cluster:\n"
            "    server: " + server() + "\n"
            "    certificate-authority: " + ca_file() + "\n"
            "users:\n"
            "- name: weftd\n"
            "  user:\n"
            "    tokenFile: " + dir_ + "/token\n"
            "contexts:\n"
            "- name: weft-test\n"
            "  context:\n"
            "    cluster: weft-test\n"
            "    user: weftd\n"
            "current-context: weft-test\n");
}

int FakeApiServer::Request(const std::string& method, const std::string& path, const nlohmann::json& body,
                           std::string* out, const std::string& content_type) {
  std::lock_guard<std::mutex> l(mu_);
  sys::HttpRequest req;
  req.method = method;
  req.url = server() + path;
  req.headers = {"Authorization: Bearer " + token_, "Accept: application/json"};
  if (!body.is_null()) {
    req.headers.push_back("Content-Type: " + content_type);
    req.body = body.dump();
  }
  req.timeout = std::chrono::seconds(10);
  int code = 0;
  std::string text;
  // The connection is made (and remade) on a thread inside the netns; a
  // kept-alive one stays there.
  Status st = sys::RunInNetns(netns_, [&] {
    auto r = http_.Do(req);
    if (!r.ok()) {
      text = r.status().ToString();
      return Status::Ok();
    }
    code = static_cast<int>(r->status);
    text = std::move(r->body);
    return Status::Ok();
  });
  if (!st.ok()) text = st.ToString();
  if (out) *out = std::move(text);
  return code;
}

std::string FakeApiServer::PathFor(const std::string& kind, const std::string& ns, const std::string& name) {
  std::string p;
  if (kind == "Node") {
    p = "/api/v1/nodes";
  } else if (kind == "Namespace") {
    p = "/api/v1/namespaces";
  } else if (kind == "Pod") {
    p = ns.empty() ? "/api/v1/pods" : "/api/v1/namespaces/" + ns + "/pods";
  } else if (kind == "NetworkPolicy") {
    p = "/apis/networking.k8s.io/v1" + (ns.empty() ? std::string() : "/namespaces/" + ns) + "/networkpolicies";
  } else if (kind == "ClusterNetworkPolicy") {
    p = "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies";
  } else if (kind == "Service") {
    p = ns.empty() ? "/api/v1/services" : "/api/v1/namespaces/" + ns + "/services";
  } else if (kind == "EndpointSlice") {
    p = "/apis/discovery.k8s.io/v1" + (ns.empty() ? std::string() : "/namespaces/" + ns) + "/endpointslices";
  } else if (kind == "ServiceAccount") {
    p = "/api/v1/namespaces/" + ns + "/serviceaccounts";
  } else if (kind == "ClusterRole" || kind == "ClusterRoleBinding") {
    p = std::string("/apis/rbac.authorization.k8s.io/v1/") + (kind == "ClusterRole" ? "clusterroles" : "clusterrolebindings");
  } else {
    throw std::runtime_error("FakeApiServer: no such kind " + kind);
  }
  if (!name.empty()) p += "/" + name;
  return p;
}

nlohmann::json FakeApiServer::Get(const std::string& kind, const std::string& ns, const std::string& name) {
  std::string out;
  int code = Request("GET", PathFor(kind, ns, name), nullptr, &out);
  if (code == 404) return nullptr;
  if (code != 200) throw std::runtime_error("FakeApiServer: GET " + PathFor(kind, ns, name) + ": " +
                                            std::to_string(code) + " " + out);
  return nlohmann::json::parse(out);
}

nlohmann::json FakeApiServer::Apply(nlohmann::json obj) {
  if (!obj.is_object() || !obj.contains("kind") || !obj["kind"].is_string())
    throw std::runtime_error("FakeApiServer::Apply: not an object with a kind: " + obj.dump());
  const std::string kind = obj["kind"];
  nlohmann::json& meta = obj["metadata"];
  if (!meta.is_object()) meta = nlohmann::json::object();
  const std::string name = meta.value("name", "");
  std::string ns;
  if (Namespaced(kind)) {
    ns = meta.value("namespace", "default");
    meta["namespace"] = ns;
  }
  if (!obj.contains("apiVersion"))
    obj["apiVersion"] = kind == "NetworkPolicy"          ? "networking.k8s.io/v1"
                        : kind == "ClusterNetworkPolicy" ? "policy.networking.k8s.io/v1alpha2"
                        : kind.rfind("ClusterRole", 0) == 0 ? "rbac.authorization.k8s.io/v1"
                        : kind == "EndpointSlice"           ? "discovery.k8s.io/v1"
                                                         : "v1";
  meta.erase("resourceVersion");
  const std::string what = kind + " " + (ns.empty() ? "" : ns + "/") + name;
  std::string out;
  int code = Request("POST", PathFor(kind, ns), obj, &out);
  if (code == 409 && out.find("\"AlreadyExists\"") != std::string::npos)
    code = Request("PUT", PathFor(kind, ns, name), obj, &out);
  if (code != 200 && code != 201)
    throw std::runtime_error("FakeApiServer::Apply " + what + ": " + std::to_string(code) + " " + out);
  nlohmann::json stored = nlohmann::json::parse(out);
  // The status is written when a field the caller set differs from what was
  // stored (the server adds fields of its own, such as a Node's zero-valued
  // nodeInfo, which are no reason to write). Unconditionally, as a kubelet's
  // status updates are: weftd may have patched the object (its Node's
  // annotations) since the write above, and a stale resourceVersion would
  // make the server refuse with 409.
  bool status_differs = false;
  if (kind != "NetworkPolicy" && obj.contains("status") && obj["status"].is_object()) {
    const nlohmann::json have = stored.value("status", nlohmann::json::object());
    for (auto it = obj["status"].begin(); it != obj["status"].end(); ++it)
      if (!have.is_object() || !have.contains(it.key()) || have[it.key()] != it.value()) status_differs = true;
  }
  if (status_differs) {
    nlohmann::json s = stored;
    s["status"] = obj["status"];
    s["metadata"].erase("resourceVersion");
    code = Request("PUT", PathFor(kind, ns, stored["metadata"].value("name", name)) + "/status", s, &out);
    if (code != 200)
      throw std::runtime_error("FakeApiServer::Apply " + what + " (status): " + std::to_string(code) + " " + out);
    stored = nlohmann::json::parse(out);
  }
  return stored;
}

bool FakeApiServer::Delete(const std::string& kind, const std::string& ns, const std::string& name) {
  std::string out;
  int code = Request("DELETE", PathFor(kind, ns, name), nullptr, &out);
  if (code == 404) return false;
  if (code != 200 && code != 202)
    throw std::runtime_error("FakeApiServer::Delete " + kind + " " + name + ": " + std::to_string(code) + " " + out);
  return true;
}

void FakeApiServer::Control(const std::string& path, const nlohmann::json& body) {
  std::string out;
  int code = Request("POST", path, body.is_null() ? nlohmann::json::object() : body, &out);
  if (code != 200) throw std::runtime_error("FakeApiServer: POST " + path + ": " + std::to_string(code) + " " + out);
}

void FakeApiServer::Bookmark() { Control("/_test/bookmark"); }
void FakeApiServer::InstallCrd(const std::string& plural) { Control("/_test/crds", {{"install", {plural}}}); }
void FakeApiServer::Expire() { Control("/_test/expire"); }
void FakeApiServer::CutWatches() { Control("/_test/partial"); }
void FakeApiServer::SetDefaulting(bool on) { Control("/_test/defaults", {{"enabled", on}}); }
void FakeApiServer::SetPageCap(int cap, int expire_after_pages, const std::string& expire_resource) {
  Control("/_test/pages", {{"cap", cap}, {"expire_after_pages", expire_after_pages}, {"resource", expire_resource}});
}

void FakeApiServer::RotateToken(const std::string& token) {
  Control("/_test/token", {{"token", token}});
  {
    std::lock_guard<std::mutex> l(mu_);
    token_ = token;
  }
  WriteFile(dir_ + "/token", token + "\n");
}

std::string FakeApiServer::CreateToken(const std::string& ns, const std::string& sa, const std::string& pod) {
  nlohmann::json spec = nlohmann::json::object();
  if (!pod.empty()) spec["boundObjectRef"] = {{"kind", "Pod"}, {"apiVersion", "v1"}, {"name", pod}};
  std::string out;
  const std::string path = "/api/v1/namespaces/" + ns + "/serviceaccounts/" + sa + "/token";
  int code = Request("POST", path, {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}, {"spec", spec}},
                     &out);
  if (code != 201) throw std::runtime_error("FakeApiServer: POST " + path + ": " + std::to_string(code) + " " + out);
  return nlohmann::json::parse(out)["status"]["token"].get<std::string>();
}

std::string FakeApiServer::KubeconfigWithToken(const std::string& name, const std::string& token) const {
  const std::string token_file = dir_ + "/token-" + name, path = dir_ + "/kubeconfig-" + name;
  WriteFile(token_file, token);
  std::ifstream in(kubeconfig());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const std::string from = "tokenFile: " + dir_ + "/token\n";
  auto at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("FakeApiServer: no tokenFile in " + kubeconfig());
  text.replace(at, from.size(), "tokenFile: " + token_file + "\n");
  WriteFile(path, text);
  return path;
}

nlohmann::json FakeApiServer::Writes() {
  std::string out;
  int code = Request("GET", "/_test/writes", nullptr, &out);
  if (code != 200) throw std::runtime_error("FakeApiServer: GET /_test/writes: " + std::to_string(code) + " " + out);
  return nlohmann::json::parse(out);
}

std::string FakeApiServer::Log() {
  std::string out;
  int code = Request("GET", "/_test/log", nullptr, &out);
  if (code != 200) return "(no log: " + std::to_string(code) + " " + out + ")";
  std::string lines;
  try {
    for (const auto& l : nlohmann::json::parse(out)) lines += l.get<std::string>() + "\n";
  } catch (const nlohmann::json::exception&) {
    return out;
  }
  return lines;
}

}  // namespace weft::testing
