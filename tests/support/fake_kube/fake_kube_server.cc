#include "tests/support/fake_kube/fake_kube_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <atomic>
#include <ctime>
#include <fstream>
#include <list>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "base/host_port.h"
#include "base/number.h"
#include "base/str_cat.h"
#include "gateway/kube/kube_nodes.h"
#include "gateway/security/certs.h"
#include "tests/support/fake_kube/fake_kubelet.h"

namespace fedgate::testing::fakekube {

using namespace gateway::kube;  // NOLINT: the JSON helpers
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Stream = beast::ssl_stream<tcp::socket>;

namespace {

const std::set<std::string> kClusterScoped = {"nodes", "namespaces"};
const std::set<std::string> kNamespaced = {"pods", "configmaps", "resourcequotas"};

std::string KindOf(const std::string& resource) {
  if (resource == "pods") return "Pod";
  if (resource == "nodes") return "Node";
  if (resource == "namespaces") return "Namespace";
  if (resource == "configmaps") return "ConfigMap";
  return "ResourceQuota";
}

Json StatusBody(int code, const std::string& reason, const std::string& message) {
  Json s = Obj();
  *Mutable(&s, {"kind"}) = Str("Status");
  *Mutable(&s, {"apiVersion"}) = Str("v1");
  *Mutable(&s, {"metadata"}) = Obj();
  *Mutable(&s, {"status"}) = Str(code < 300 ? "Success" : "Failure");
  *Mutable(&s, {"message"}) = Str(message);
  *Mutable(&s, {"reason"}) = Str(reason);
  *Mutable(&s, {"code"}) = Num(code);
  return s;
}

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const std::string hex(s.substr(i + 1, 2));
      char* end = nullptr;
      const long n = std::strtol(hex.c_str(), &end, 16);
      if (end == hex.c_str() + 2) {
        out += static_cast<char>(n);
        i += 2;
        continue;
      }
    }
    out += s[i] == '+' ? ' ' : s[i];
  }
  return out;
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      if (i > start) out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// One term of a label or field selector.
struct Term {
  std::string key, value;
  enum { kEq, kNe, kExists, kAbsent } op;
};

std::optional<std::vector<Term>> ParseSelector(const std::string& text) {
  std::vector<Term> out;
  for (const auto& part : Split(text, ',')) {
    Term t;
    if (auto p = part.find("!="); p != std::string::npos) {
      t = {part.substr(0, p), part.substr(p + 2), Term::kNe};
    } else if (auto q = part.find("=="); q != std::string::npos) {
      t = {part.substr(0, q), part.substr(q + 2), Term::kEq};
    } else if (auto r = part.find('='); r != std::string::npos) {
      t = {part.substr(0, r), part.substr(r + 1), Term::kEq};
    } else if (part[0] == '!') {
      t = {part.substr(1), "", Term::kAbsent};
    } else {
      t = {part, "", Term::kExists};
    }
    if (t.key.empty()) return std::nullopt;
    out.push_back(std::move(t));
  }
  return out;
}

bool Matches(const std::vector<Term>& terms, const std::function<std::optional<std::string>(const std::string&)>& get) {
  for (const auto& t : terms) {
    auto v = get(t.key);
    switch (t.op) {
      case Term::kEq: if (!v || *v != t.value) return false; break;
      case Term::kNe: if (v && *v == t.value) return false; break;
      case Term::kExists: if (!v) return false; break;
      case Term::kAbsent: if (v) return false; break;
    }
  }
  return true;
}

const std::map<std::string, std::vector<std::string>> kFields = {
    {"pods", {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"}},
    {"nodes", {"metadata.name", "spec.unschedulable"}},
};

std::optional<std::string> FieldOf(const Json& obj, const std::string& field) {
  if (field == "metadata.name") return FindString(obj, {"metadata", "name"});
  if (field == "metadata.namespace") return FindString(obj, {"metadata", "namespace"});
  if (field == "spec.nodeName") return FindString(obj, {"spec", "nodeName"});
  if (field == "status.phase") return FindString(obj, {"status", "phase"});
  if (field == "spec.unschedulable") {
    const Json* u = Find(obj, {"spec", "unschedulable"});
    return u && u->bool_value() ? "true" : "false";
  }
  return std::nullopt;
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 253) return false;
  for (char c : n) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
          c == '-' || c == '.')) {
      return false;
    }
  }
  return std::isalnum(static_cast<unsigned char>(n.front())) &&
         std::isalnum(static_cast<unsigned char>(n.back()));
}

struct Fault {
  std::string method, path, reason;
  int status = 0;
  int retry_after = 0;
  int64_t hang_ms = 0;
  int times = 1;
};

struct Request {
  std::string method, path;
  std::map<std::string, std::string> query;
  std::string body, content_type;
};

struct Answer {
  int code = 200;
  std::string body;
  std::string retry_after;
};

Answer Fail(int code, const std::string& reason, const std::string& message) {
  return {code, ToJson(StatusBody(code, reason, message)), ""};
}
Answer Ok(const Json& obj, int code = 200) { return {code, ToJson(obj), ""}; }

}  // namespace

struct FakeKubeServer::Impl {
  ServerOptions opt;
  Store store;
  std::unique_ptr<FakeKubelet> kubelet;
  asio::io_context io;
  ssl::context ctx{ssl::context::tls_server};
  tcp::acceptor acceptor{io};
  std::string ca_pem;
  int port = 0;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  std::mutex mu;  // conns, faults, counts
  struct Conn {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Conn> conns;
  std::set<int> fds;
  std::vector<Fault> faults;
  std::map<std::string, int64_t> counts;
  std::mutex admission;  // pod creation: quotas are checked and used in one step
  std::mt19937_64 rng{std::random_device{}()};

  void AcceptLoop() {
    while (!stopping) {
      boost::system::error_code ec;
      tcp::socket sock(io);
      acceptor.accept(sock, ec);
      if (ec || stopping) {
        if (stopping) return;
        continue;
      }
      std::lock_guard lock(mu);
      // Connections that ended are joined as new ones come (a long-lived
      // server keeps no threads of closed connections).
      for (auto it = conns.begin(); it != conns.end();) {
        if (it->done->load()) {
          it->thread.join();
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
      fds.insert(sock.native_handle());
      auto done = std::make_shared<std::atomic<bool>>(false);
      conns.push_back({std::thread([this, done, s = std::move(sock)]() mutable {
                         Serve(std::move(s));
                         *done = true;
                       }),
                       done});
    }
  }

  void Serve(tcp::socket sock) {
    const int fd = sock.native_handle();
    Stream stream(std::move(sock), ctx);
    boost::system::error_code ec;
    stream.handshake(ssl::stream_base::server, ec);
    beast::flat_buffer buf;
    while (!ec && !stopping) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      http::read(stream, buf, parser, ec);
      if (ec) break;
      auto& req = parser.get();
      if (!Handle(stream, req) || !req.keep_alive()) break;
    }
    stream.shutdown(ec);
    std::lock_guard lock(mu);
    fds.erase(fd);
  }

  void Write(Stream& s, const http::request<http::string_body>& req, const Answer& a) {
    http::response<http::string_body> res{static_cast<http::status>(a.code), req.version()};
    res.set(http::field::content_type, "application/json");
    if (!a.retry_after.empty()) res.set(http::field::retry_after, a.retry_after);
    res.keep_alive(req.keep_alive());
    res.body() = a.body;
    res.prepare_payload();
    boost::system::error_code ec;
    http::write(s, res, ec);
  }

  // Returns whether the connection stays open.
  bool Handle(Stream& s, http::request<http::string_body>& raw) {
    Request r;
    r.method = std::string(raw.method_string());
    const std::string target(raw.target());
    const auto q = target.find('?');
    r.path = target.substr(0, q);
    if (q != std::string::npos) {
      for (const auto& kv : Split(std::string_view(target).substr(q + 1), '&')) {
        const auto eq = kv.find('=');
        r.query[Decode(kv.substr(0, eq))] = eq == std::string::npos ? "" : Decode(kv.substr(eq + 1));
      }
    }
    r.body = raw.body();
    r.content_type = std::string(raw[http::field::content_type]);
    std::optional<Fault> fault;
    {
      std::lock_guard lock(mu);
      ++counts[StrCat(r.method, " ", r.path)];
      for (auto it = faults.begin(); it != faults.end(); ++it) {
        if ((it->method.empty() || it->method == r.method) && r.path.rfind(it->path, 0) == 0) {
          fault = *it;
          if (--it->times <= 0) faults.erase(it);
          break;
        }
      }
    }
    if (std::string(raw[http::field::authorization]) != "Bearer " + opt.token) {
      Write(s, raw, Fail(401, "Unauthorized", "Unauthorized"));
      return true;
    }
    if (fault) {
      if (fault->hang_ms > 0) {  // a server that never answers
        for (int64_t t = 0; t < fault->hang_ms && !stopping; t += 50) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return false;
      }
      static const std::map<int, std::string> kReasons = {
          {401, "Unauthorized"}, {403, "Forbidden"}, {404, "NotFound"}, {409, "AlreadyExists"},
          {410, "Expired"}, {429, "TooManyRequests"}};
      const auto known = kReasons.find(fault->status);
      const std::string reason = !fault->reason.empty() ? fault->reason
                                 : known != kReasons.end() ? known->second
                                                           : "InternalError";
      Answer a = Fail(fault->status, reason, StrCat("injected fault: ", fault->status));
      if (fault->retry_after > 0) a.retry_after = std::to_string(fault->retry_after);
      Write(s, raw, a);
      return true;
    }
    if (r.path.rfind("/fake/", 0) == 0) {
      Write(s, raw, Control(r));
      return true;
    }
    if (r.path == "/version") {
      Json v = Obj();
      *Mutable(&v, {"major"}) = Str("1");
      *Mutable(&v, {"minor"}) = Str("29");
      *Mutable(&v, {"gitVersion"}) = Str("v1.29.0-fedgate-fake");
      Write(s, raw, Ok(v));
      return true;
    }
    return Api(s, raw, r);
  }

  Answer Control(const Request& r) {
    if (r.path == "/fake/faults" && r.method == "POST") {
      auto j = ParseJson(r.body);
      if (!j.ok()) return Fail(400, "BadRequest", std::string(j.status().message()));
      Fault f;
      f.method = FindString(*j, {"method"});
      f.path = FindString(*j, {"path"});
      f.reason = FindString(*j, {"reason"});
      f.status = static_cast<int>(FindNumber(*j, {"status"}).value_or(0));
      f.retry_after = static_cast<int>(FindNumber(*j, {"retryAfter"}).value_or(0));
      f.hang_ms = static_cast<int64_t>(FindNumber(*j, {"hangMs"}).value_or(0));
      f.times = static_cast<int>(FindNumber(*j, {"times"}).value_or(1));
      std::lock_guard lock(mu);
      faults.push_back(f);
      return Ok(*j, 201);
    }
    if (r.path == "/fake/faults" && r.method == "DELETE") {
      std::lock_guard lock(mu);
      faults.clear();
      return Ok(Obj());
    }
    if (r.path == "/fake/requests") {
      Json out = Obj();
      std::lock_guard lock(mu);
      for (const auto& [k, n] : counts) *Mutable(&out, {k}) = Num(static_cast<double>(n));
      return Ok(out);
    }
    if (r.path == "/fake/compact" && r.method == "POST") {
      store.Compact();
      return Ok(Obj());
    }
    return Fail(404, "NotFound", "fake control paths: /fake/faults, /fake/requests, /fake/compact");
  }

  struct Route {
    std::string resource, ns, name, sub;
    bool all_namespaces = false;
  };

  std::optional<Route> Parse(const std::string& path) {
    const auto seg = Split(path, '/');
    if (seg.size() < 3 || seg[0] != "api" || seg[1] != "v1") return std::nullopt;
    Route rt;
    std::vector<std::string> rest(seg.begin() + 2, seg.end());
    if (rest[0] == "namespaces" && rest.size() >= 3) {
      rt.ns = rest[1];
      rest.erase(rest.begin(), rest.begin() + 2);
      if (!kNamespaced.contains(rest[0])) return std::nullopt;
    } else if (kNamespaced.contains(rest[0])) {
      if (rest.size() != 1) return std::nullopt;
      rt.all_namespaces = true;
    } else if (!kClusterScoped.contains(rest[0])) {
      return std::nullopt;
    }
    rt.resource = rest[0];
    if (rest.size() > 1) rt.name = rest[1];
    if (rest.size() > 2) rt.sub = rest[2];
    if (rest.size() > 3) return std::nullopt;
    if (!rt.sub.empty() && rt.sub != "status" && !(rt.sub == "log" && rt.resource == "pods")) {
      return std::nullopt;
    }
    return rt;
  }

  bool Api(Stream& s, http::request<http::string_body>& raw, const Request& r) {
    auto rt = Parse(r.path);
    if (!rt) {
      Write(s, raw, Fail(404, "NotFound", StrCat("the server could not find the requested resource (", r.path, ")")));
      return true;
    }
    const Key key{rt->resource, rt->ns, rt->name};
    if (r.method == "GET" && rt->name.empty()) {
      const auto w = r.query.find("watch");
      if (w != r.query.end() && (w->second == "1" || w->second == "true")) {
        Watch(s, raw, *rt, r);
        return false;
      }
      Write(s, raw, List(*rt, r));
      return true;
    }
    if (r.method == "GET" && rt->sub == "log") return Log(s, raw, key, r);
    Answer a;
    if (r.method == "GET") {
      auto obj = store.Get(key);
      a = obj ? Ok(*obj) : Fail(404, "NotFound", StrCat(rt->resource, " \"", rt->name, "\" not found"));
    } else if (r.method == "POST" && rt->name.empty() && !rt->all_namespaces) {
      a = Create(*rt, r);
    } else if ((r.method == "PUT" || r.method == "PATCH") && !rt->name.empty()) {
      a = Update(*rt, r);
    } else if (r.method == "DELETE" && !rt->name.empty() && rt->sub.empty()) {
      a = Delete(key, r);
    } else {
      a = Fail(405, "MethodNotAllowed", StrCat(r.method, " is not supported on ", r.path));
    }
    Write(s, raw, a);
    return true;
  }

  // The selectors of a list or watch; an answer when they are malformed.
  std::optional<Answer> Selectors(const Route& rt, const Request& r, std::vector<Term>* labels,
                                  std::vector<Term>* fields) {
    if (auto it = r.query.find("labelSelector"); it != r.query.end() && !it->second.empty()) {
      auto t = ParseSelector(it->second);
      if (!t) return Fail(400, "BadRequest", StrCat("unable to parse requirement: ", it->second));
      *labels = *t;
    }
    if (auto it = r.query.find("fieldSelector"); it != r.query.end() && !it->second.empty()) {
      auto t = ParseSelector(it->second);
      if (!t) return Fail(400, "BadRequest", StrCat("invalid field selector: ", it->second));
      auto known = kFields.contains(rt.resource) ? kFields.at(rt.resource)
                                                 : std::vector<std::string>{"metadata.name", "metadata.namespace"};
      for (const auto& term : *t) {
        if (std::find(known.begin(), known.end(), term.key) == known.end()) {
          return Fail(400, "BadRequest", StrCat("field label not supported: ", term.key));
        }
      }
      *fields = *t;
    }
    return std::nullopt;
  }

  static bool Selected(const Json& obj, const std::vector<Term>& labels, const std::vector<Term>& fields) {
    return Matches(labels, [&](const std::string& k) -> std::optional<std::string> {
             const Json* v = Find(obj, {"metadata", "labels", k});
             if (!v) return std::nullopt;
             return v->string_value();
           }) &&
           Matches(fields, [&](const std::string& k) { return FieldOf(obj, k); });
  }

  Answer List(const Route& rt, const Request& r) {
    std::vector<Term> labels, fields;
    if (auto bad = Selectors(rt, r, &labels, &fields)) return *bad;
    uint64_t rv = 0;
    Json list = Obj();
    *Mutable(&list, {"kind"}) = Str(KindOf(rt.resource) + "List");
    *Mutable(&list, {"apiVersion"}) = Str("v1");
    Json* items = Mutable(&list, {"items"});
    *items = gateway::kube::List();
    for (auto& obj : store.List(rt.resource, rt.ns, &rv)) {
      if (Selected(obj, labels, fields)) *Append(items) = obj;
    }
    *Mutable(&list, {"metadata", "resourceVersion"}) = Str(std::to_string(rv));
    return Ok(list);
  }

  static bool WriteChunk(Stream& s, const std::string& data) {
    boost::system::error_code ec;
    char size[20];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    const std::string chunk = StrCat(size, data, "\r\n");
    asio::write(s, asio::buffer(chunk), ec);
    return !ec;
  }

  static bool StartStream(Stream& s, const std::string& content_type) {
    boost::system::error_code ec;
    const std::string head = StrCat("HTTP/1.1 200 OK\r\nContent-Type: ", content_type,
                                    "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    asio::write(s, asio::buffer(head), ec);
    return !ec;
  }

  static void EndStream(Stream& s) {
    boost::system::error_code ec;
    asio::write(s, asio::buffer(std::string("0\r\n\r\n")), ec);
  }

  void Watch(Stream& s, http::request<http::string_body>& raw, const Route& rt, const Request& r) {
    std::vector<Term> labels, fields;
    if (auto bad = Selectors(rt, r, &labels, &fields)) {
      Write(s, raw, *bad);
      return;
    }
    int64_t timeout_s = 1800;
    if (auto it = r.query.find("timeoutSeconds"); it != r.query.end()) {
      timeout_s = ParseNumber<int64_t>(it->second).value_or(timeout_s);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    uint64_t since = 0;
    const std::string rv_text = r.query.contains("resourceVersion") ? r.query.at("resourceVersion") : "";
    if (!StartStream(s, "application/json")) return;
    const auto send = [&](const std::string& type, const Json& obj) {
      Json ev = Obj();
      *Mutable(&ev, {"type"}) = Str(type);
      *Mutable(&ev, {"object"}) = obj;
      return WriteChunk(s, ToJson(ev) + "\n");
    };
    if (rv_text.empty() || rv_text == "0") {
      // No version: the current state as ADDED events first, as the server does.
      for (auto& obj : store.List(rt.resource, rt.ns, &since)) {
        if (Selected(obj, labels, fields) && !send("ADDED", obj)) return;
      }
    } else {
      auto v = ParseNumber<uint64_t>(rv_text);
      if (!v) {
        (void)send("ERROR", StatusBody(400, "BadRequest", StrCat("invalid resourceVersion ", rv_text)));
        EndStream(s);
        return;
      }
      since = *v;
    }
    const auto match = [&](const Event& e) {
      return e.key.resource == rt.resource && (rt.ns.empty() || e.key.ns == rt.ns) &&
             Selected(e.object, labels, fields);
    };
    while (!stopping && std::chrono::steady_clock::now() < deadline) {
      auto events = store.WaitEvents(
          since, match, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(200)));
      if (!events) {
        (void)send("ERROR", StatusBody(410, "Expired", StrCat("too old resource version: ", since, " (",
                                                               store.Version(), ")")));
        break;
      }
      for (const auto& e : *events) {
        if (!send(e.type, e.object)) return;
        since = e.rv;
      }
    }
    EndStream(s);
  }

  bool Log(Stream& s, http::request<http::string_body>& raw, const Key& key, const Request& r) {
    auto pod = store.Get(key);
    if (!pod) {
      Write(s, raw, Fail(404, "NotFound", StrCat("pods \"", key.name, "\" not found")));
      return true;
    }
    std::vector<std::string> names;
    for (const char* f : {"initContainers", "containers"}) {
      if (const Json* cs = Find(*pod, {"spec", f}); cs && cs->has_list_value()) {
        for (const auto& c : cs->list_value().values()) names.push_back(FindString(c, {"name"}));
      }
    }
    std::string container = r.query.contains("container") ? r.query.at("container") : "";
    if (container.empty()) {
      size_t main = 0;
      if (const Json* cs = Find(*pod, {"spec", "containers"}); cs && cs->has_list_value()) {
        main = cs->list_value().values_size();
      }
      if (main != 1) {
        Write(s, raw, Fail(400, "BadRequest", StrCat("a container name must be specified for pod ", key.name)));
        return true;
      }
      container = FindString(*Find(*pod, {"spec", "containers"})->list_value().values().rbegin(), {"name"});
    }
    if (std::find(names.begin(), names.end(), container) == names.end()) {
      Write(s, raw, Fail(400, "BadRequest", StrCat("container ", container, " is not valid for pod ", key.name)));
      return true;
    }
    const std::string path = kubelet->LogPath(key, container);
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      Write(s, raw, Fail(400, "BadRequest", StrCat("container \"", container, "\" in pod \"", key.name,
                                                    "\" is waiting to start: ContainerCreating")));
      return true;
    }
    const bool follow = r.query.contains("follow") && (r.query.at("follow") == "true" || r.query.at("follow") == "1");
    if (!StartStream(s, "text/plain")) return false;
    char buf[64 * 1024];
    for (;;) {
      in.read(buf, sizeof(buf));
      const auto n = in.gcount();
      if (n > 0) {
        if (!WriteChunk(s, std::string(buf, static_cast<size_t>(n)))) return false;
        continue;
      }
      in.clear();
      if (!follow || stopping || !kubelet->Running(key)) {
        // One last read: what it wrote as it ended.
        in.read(buf, sizeof(buf));
        if (in.gcount() > 0) (void)WriteChunk(s, std::string(buf, static_cast<size_t>(in.gcount())));
        if (in.gcount() > 0 && follow) continue;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EndStream(s);
    return false;
  }

  // Quota admission for a new pod in `ns`: "" or why it is forbidden.
  std::string QuotaCheck(const std::string& ns, const std::string& name, const Json& pod) {
    uint64_t rv = 0;
    const uint64_t want = PodRequest(pod);
    uint64_t used = 0, count = 0;
    for (const auto& p : store.List("pods", ns, &rv)) {
      if (!PodHolds(p)) continue;
      used += PodRequest(p);
      ++count;
    }
    for (const auto& q : store.List("resourcequotas", ns, &rv)) {
      const std::string qname = FindString(q, {"metadata", "name"});
      for (const char* res : {"requests.nvidia.com/gpu", "limits.nvidia.com/gpu", "pods"}) {
        auto hard = QuantityCount(Find(q, {"spec", "hard", res}));
        if (!hard) continue;
        const bool pods = std::string_view(res) == "pods";
        const uint64_t u = pods ? count : used, w = pods ? 1 : want;
        if (w > 0 && u + w > static_cast<uint64_t>(*hard)) {
          return StrCat("pods \"", name, "\" is forbidden: exceeded quota: ", qname, ", requested: ", res,
                        "=", w, ", used: ", res, "=", u, ", limited: ", res, "=", *hard);
        }
      }
    }
    return "";
  }

  Answer Create(const Route& rt, const Request& r) {
    auto body = ParseJson(r.body);
    if (!body.ok() || !body->has_struct_value()) {
      return Fail(400, "BadRequest", StrCat("the body of the request was in an unknown format: ", r.body.substr(0, 80)));
    }
    Json obj = *body;
    const std::string kind = FindString(obj, {"kind"});
    if (!kind.empty() && kind != KindOf(rt.resource)) {
      return Fail(400, "BadRequest", StrCat("the kind ", kind, " does not match ", rt.resource));
    }
    *Mutable(&obj, {"kind"}) = Str(KindOf(rt.resource));
    *Mutable(&obj, {"apiVersion"}) = Str("v1");
    const std::string ns_in = FindString(obj, {"metadata", "namespace"});
    if (!ns_in.empty() && !rt.ns.empty() && ns_in != rt.ns) {
      return Fail(400, "BadRequest",
                  "the namespace of the provided object does not match the namespace sent on the request");
    }
    std::string name = FindString(obj, {"metadata", "name"});
    if (name.empty()) {
      const std::string gen = FindString(obj, {"metadata", "generateName"});
      if (gen.empty()) {
        return Fail(422, "Invalid", StrCat(KindOf(rt.resource), " is invalid: metadata.name: Required value: name or generateName is required"));
      }
      static const char* alnum = "bcdfghjklmnpqrstvwxz2456789";
      name = gen;
      for (int i = 0; i < 5; ++i) name += alnum[rng() % 27];
    }
    if (!ValidName(name)) {
      return Fail(422, "Invalid", StrCat(KindOf(rt.resource), " \"", name, "\" is invalid: metadata.name: Invalid value: \"",
                                          name, "\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"));
    }
    const Key key{rt.resource, rt.ns, name};
    std::unique_lock admit(admission, std::defer_lock);
    if (rt.resource == "pods") {
      const Json* cs = Find(obj, {"spec", "containers"});
      if (!cs || !cs->has_list_value() || cs->list_value().values_size() == 0) {
        return Fail(422, "Invalid", StrCat("Pod \"", name, "\" is invalid: spec.containers: Required value"));
      }
      for (const auto& c : cs->list_value().values()) {
        if (FindString(c, {"name"}).empty() || FindString(c, {"image"}).empty()) {
          return Fail(422, "Invalid", StrCat("Pod \"", name, "\" is invalid: spec.containers: name and image are required"));
        }
      }
      *Mutable(&obj, {"status"}) = Obj();
      *Mutable(&obj, {"status", "phase"}) = Str("Pending");
      admit.lock();
      if (std::string why = QuotaCheck(rt.ns, name, obj); !why.empty()) return Fail(403, "Forbidden", why);
    } else if (rt.resource == "namespaces") {
      *Mutable(&obj, {"status", "phase"}) = Str("Active");
    } else if (rt.resource == "configmaps") {
      if (const Json* d = Find(obj, {"data"}); d && d->has_struct_value()) {
        for (const auto& [k, v] : d->struct_value().fields()) {
          if (v.kind_case() != Json::kStringValue) {
            return Fail(400, "BadRequest", StrCat("configmap data.", k, " must be a string"));
          }
        }
      }
    }
    if (auto f = store.Create(key, &obj)) return Fail(f->code, f->reason, f->message);
    if (admit.owns_lock()) admit.unlock();
    if (rt.resource == "pods" && !FindString(obj, {"spec", "nodeName"}).empty()) kubelet->Start(key);
    return Ok(obj, 201);
  }

  Answer Update(const Route& rt, const Request& r) {
    if (r.method == "PATCH") {
      const std::string ct = r.content_type.substr(0, r.content_type.find(';'));
      if (ct != "application/merge-patch+json" && ct != "application/strategic-merge-patch+json") {
        return Fail(415, "UnsupportedMediaType",
                    StrCat("the fake API server takes merge patches only, not ", ct));
      }
    }
    auto body = ParseJson(r.body);
    if (!body.ok() || !body->has_struct_value()) {
      return Fail(400, "BadRequest", "the body of the request was in an unknown format");
    }
    const Key key{rt.resource, rt.ns, rt.name};
    const std::string expect = r.method == "PUT" ? FindString(*body, {"metadata", "resourceVersion"}) : "";
    // As the real server's guaranteed update: a patch, or an update that
    // names no resourceVersion, is applied again to the newest object when
    // another write came between (a kubelet's status); only an update that
    // names an old version conflicts.
    for (int tries = 0;; ++tries) {
      auto current = store.Get(key);
      if (!current) return Fail(404, "NotFound", StrCat(rt.resource, " \"", rt.name, "\" not found"));
      auto next = Apply(rt, r, *body, *current);
      if (!next.ok()) return Fail(next.status().code() == absl::StatusCode::kInvalidArgument ? 400 : 422,
                                  next.status().code() == absl::StatusCode::kInvalidArgument ? "BadRequest" : "Invalid",
                                  std::string(next.status().message()));
      auto f = store.Replace(key, &*next, expect.empty() ? FindString(*current, {"metadata", "resourceVersion"}) : expect);
      if (!f) return Ok(*next);
      if (f->code != 409 || !expect.empty() || tries >= 20) return Fail(f->code, f->reason, f->message);
    }
  }

  // The object an update or patch makes of `current`.
  absl::StatusOr<Json> Apply(const Route& rt, const Request& r, const Json& body, const Json& current) {
    const bool status_only = rt.sub == "status";
    Json next = current;
    if (r.method == "PATCH") {
      Json patch = body;
      if (status_only) {
        Json only = Obj();
        if (const Json* st = Find(patch, {"status"})) *Mutable(&only, {"status"}) = *st;
        patch = only;
      } else if (rt.resource == "pods" || rt.resource == "nodes") {
        Erase(&patch, {"status"});
      }
      MergePatch(&next, patch);
    } else {
      const std::string name = FindString(body, {"metadata", "name"});
      if (!name.empty() && name != rt.name) {
        return absl::InvalidArgumentError("the name of the object does not match the name on the URL");
      }
      if (status_only) {
        if (const Json* st = Find(body, {"status"})) *Mutable(&next, {"status"}) = *st;
      } else {
        next = body;
        if (const Json* st = Find(current, {"status"}); st && rt.resource != "namespaces") {
          *Mutable(&next, {"status"}) = *st;
        }
      }
    }
    if (rt.resource == "pods" && !status_only) {
      const Json* a = Find(current, {"spec"});
      const Json* b = Find(next, {"spec"});
      if (!a || !b || !Equal(*a, *b)) {
        return absl::FailedPreconditionError(StrCat("Pod \"", rt.name, "\" is invalid: spec: Forbidden: pod updates may not change fields other than metadata"));
      }
    }
    return next;
  }

  void DeletePod(const Key& key, int64_t grace) {
    (void)store.Modify(key, [&](Json* o) {
      if (!Find(*o, {"metadata", "deletionTimestamp"})) {
        *Mutable(o, {"metadata", "deletionTimestamp"}) = Str(NowText());
        *Mutable(o, {"metadata", "deletionGracePeriodSeconds"}) = Num(static_cast<double>(grace));
      }
    }, nullptr);
    kubelet->Stop(key, grace);
  }

  Answer Delete(const Key& key, const Request& r) {
    auto obj = store.Get(key);
    if (!obj) return Fail(404, "NotFound", StrCat(key.resource, " \"", key.name, "\" not found"));
    if (key.resource == "pods") {
      int64_t grace = static_cast<int64_t>(FindNumber(*obj, {"spec", "terminationGracePeriodSeconds"}).value_or(30));
      if (auto opts = ParseJson(r.body); opts.ok() && FindNumber(*opts, {"gracePeriodSeconds"})) {
        grace = static_cast<int64_t>(*FindNumber(*opts, {"gracePeriodSeconds"}));
      }
      if (auto it = r.query.find("gracePeriodSeconds"); it != r.query.end()) {
        grace = ParseNumber<int64_t>(it->second).value_or(grace);
      }
      DeletePod(key, grace);
      return Ok(store.Get(key).value_or(*obj));
    }
    Json gone;
    if (auto f = store.Remove(key, &gone)) return Fail(f->code, f->reason, f->message);
    // The garbage collector: pods owned by what was removed go too; a
    // namespace takes everything in it.
    const std::string uid = FindString(gone, {"metadata", "uid"});
    for (const auto& [k, pod] : store.Snapshot("pods")) {
      bool owned = key.resource == "namespaces" && k.ns == key.name;
      if (const Json* refs = Find(pod, {"metadata", "ownerReferences"}); refs && refs->has_list_value()) {
        for (const auto& ref : refs->list_value().values()) owned = owned || FindString(ref, {"uid"}) == uid;
      }
      if (owned) {
        DeletePod(k, static_cast<int64_t>(FindNumber(pod, {"spec", "terminationGracePeriodSeconds"}).value_or(30)));
      }
    }
    if (key.resource == "namespaces") {
      for (const char* res : {"configmaps", "resourcequotas"}) {
        for (const auto& [k, o] : store.Snapshot(res)) {
          if (k.ns == key.name) (void)store.Remove(k, nullptr);
        }
      }
    }
    return Ok(gone);
  }
};

FakeKubeServer::FakeKubeServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FakeKubeServer::~FakeKubeServer() {
  impl_->stopping = true;
  boost::system::error_code ec;
  impl_->acceptor.cancel(ec);
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->acceptor.close(ec);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  std::list<Impl::Conn> conns;
  {
    std::lock_guard lock(impl_->mu);
    for (int fd : impl_->fds) ::shutdown(fd, SHUT_RDWR);
    conns.swap(impl_->conns);
  }
  for (auto& c : conns) c.thread.join();
  impl_->kubelet.reset();
}

int FakeKubeServer::port() const { return impl_->port; }
const std::string& FakeKubeServer::ca_pem() const { return impl_->ca_pem; }
Store& FakeKubeServer::store() { return impl_->store; }

absl::StatusOr<std::unique_ptr<FakeKubeServer>> FakeKubeServer::Start(ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  if (impl->opt.token.empty()) return absl::InvalidArgumentError("--token is required");
  gateway::CertSpec spec;
  spec.common_name = "fake-kube-apiserver";
  spec.dns = {"localhost", "kubernetes.default.svc"};
  spec.ips = {"127.0.0.1"};
  auto kc = gateway::MakeCertificate(spec, nullptr);
  if (!kc.ok()) return kc.status();
  impl->ca_pem = kc->cert_pem;
  boost::system::error_code ec;
  impl->ctx.use_certificate_chain(asio::buffer(kc->cert_pem), ec);
  if (!ec) impl->ctx.use_private_key(asio::buffer(kc->key_pem), ssl::context::pem, ec);
  if (ec) return absl::InternalError(StrCat("certificate: ", ec.message()));
  const auto hp = SplitHostPort(impl->opt.listen);
  auto port = ParsePort(hp.port);
  if (!port) return absl::InvalidArgumentError(StrCat("--listen ", impl->opt.listen, ": want HOST:PORT"));
  auto addr = asio::ip::make_address(hp.host, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("--listen ", impl->opt.listen, ": ", ec.message()));
  tcp::endpoint ep(addr, static_cast<uint16_t>(*port));
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(64, ec);
  if (ec) return absl::UnavailableError(StrCat("listen on ", impl->opt.listen, ": ", ec.message()));
  impl->port = impl->acceptor.local_endpoint().port();
  if (impl->opt.log_dir.empty()) impl->opt.log_dir = StrCat("/tmp/fake-kube-", impl->port);
  impl->kubelet = std::make_unique<FakeKubelet>(&impl->store, impl->opt.log_dir, impl->opt.uid, impl->opt.gid);
  for (const char* ns : {"default", "kube-system"}) {
    Json obj = Obj();
    *Mutable(&obj, {"kind"}) = Str("Namespace");
    *Mutable(&obj, {"apiVersion"}) = Str("v1");
    *Mutable(&obj, {"status", "phase"}) = Str("Active");
    (void)impl->store.Create(Key{"namespaces", "", ns}, &obj);
  }
  auto* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  return std::unique_ptr<FakeKubeServer>(new FakeKubeServer(std::move(impl)));
}

}  // namespace fedgate::testing::fakekube
