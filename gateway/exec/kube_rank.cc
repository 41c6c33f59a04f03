#include "gateway/exec/kube_rank.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "base/number.h"
#include "base/str_cat.h"
#include "gateway/kube/kube_client.h"
#include "gateway/kube/kube_objects.h"

extern char** environ;

namespace fedgate::gateway {
namespace {

using namespace kube;  // NOLINT: the JSON helpers

void Say(const std::string& what) { std::cerr << "fedgate-kube-rank: " << what << std::endl; }

// The rank's own environment: what the gateway gave it, less the API
// credentials and what belongs to the gateway's host.
std::vector<std::pair<std::string, std::string>> RankEnvironment() {
  static const char* const kHost[] = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ",
                                      "TMPDIR", "PWD", "SHLVL", "OLDPWD", "_", "ASAN_OPTIONS",
                                      "LSAN_OPTIONS", "UBSAN_OPTIONS"};
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    if (k.rfind("FEDGATE_KUBE_", 0) == 0) continue;
    bool host = false;
    for (const char* h : kHost) host = host || k == h;
    if (!host) out.emplace_back(k, kv.substr(eq + 1));
  }
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

struct Args {
  std::string hold, node, container;
  int64_t grace_s = 30;
  std::vector<std::string> command;
};

std::optional<Args> Parse(int argc, char** argv) {
  Args a;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) return std::nullopt;
    const std::string v = argv[++i];
    if (f == "--hold") {
      a.hold = v;
    } else if (f == "--node") {
      a.node = v;
    } else if (f == "--container") {
      a.container = v;
    } else if (f == "--grace") {
      auto g = ParseNumber<int64_t>(v);
      if (!g || *g < 0) return std::nullopt;
      a.grace_s = *g;
    } else {
      return std::nullopt;
    }
  }
  for (; i < argc; ++i) a.command.emplace_back(argv[i]);
  if (a.hold.empty() || a.node.empty() || a.container.empty() || a.command.empty()) return std::nullopt;
  return a;
}

// The container's state in the pod: "" (not yet), "running", or "terminated".
std::string ContainerState(const Json& pod, const std::string& container, int* code) {
  const Json* st = Find(pod, {"status", "containerStatuses"});
  if (!st || !st->has_list_value()) return "";
  for (const auto& c : st->list_value().values()) {
    if (FindString(c, {"name"}) != container) continue;
    if (Find(c, {"state", "terminated"})) {
      *code = static_cast<int>(FindNumber(c, {"state", "terminated", "exitCode"}).value_or(1));
      return "terminated";
    }
    if (Find(c, {"state", "running"})) return "running";
  }
  return "";
}

}  // namespace

int RunKubeRank(int argc, char** argv) {
  auto args = Parse(argc, argv);
  if (!args) {
    Say("usage: fedgate-kube-rank --hold ID --node NODE --container rank-N [--grace S] -- COMMAND...");
    return 2;
  }
  // Signals are taken by one thread (below), never by the streaming one.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  KubeAccess access;
  access.server = Env("FEDGATE_KUBE_SERVER");
  access.token = Env("FEDGATE_KUBE_TOKEN");
  access.ca_pem = Env("FEDGATE_KUBE_CA");
  access.insecure_skip_verify = Env("FEDGATE_KUBE_INSECURE") == "1";
  access.cert_pem = Env("FEDGATE_KUBE_CERT");
  access.key_pem = Env("FEDGATE_KUBE_KEY");
  access.source = "FEDGATE_KUBE_* environment";
  auto made = KubeClient::Make(access);
  if (!made.ok()) {
    Say(std::string(made.status().message()));
    return 1;
  }
  // Lives until the process ends (main leaves with _exit): the signal
  // thread may still be using it then.
  const KubeClient& c = *made->release();
  // API errors are retried: the shim's fence ends this process if the
  // gateway is gone for good.
  const auto retry = [](int* tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10000, 250 << std::min(*tries, 6))));
    ++*tries;
  };
  std::string ns, pod;
  for (int tries = 0;;) {
    auto list = JsonOf(
        c.Call("GET", StrCat("/api/v1/pods?labelSelector=", QueryEscape(StrCat(kHoldLabel, "=", args->hold)),
                             "&fieldSelector=", QueryEscape("spec.nodeName=" + args->node))),
        "finding the hold's pod");
    if (list.ok()) {
      const Json* items = Find(*list, {"items"});
      if (!items || !items->has_list_value() || items->list_value().values_size() == 0) {
        Say(StrCat("no pod of hold ", args->hold, " on node ", args->node, ": it was deleted"));
        return 137;
      }
      const Json& p = items->list_value().values(0);
      ns = FindString(p, {"metadata", "namespace"});
      pod = FindString(p, {"metadata", "name"});
      break;
    }
    Say(std::string(list.status().message()));
    retry(&tries);
  }
  const std::string pod_path = StrCat("/api/v1/namespaces/", ns, "/pods/", pod);
  // The commit: this rank's environment and command as annotations; the
  // rank whose patch completes the pod's set lets the init step go.
  Json mine = Obj();
  *Mutable(&mine, {"metadata", "annotations"}) =
      CommitAnnotations(args->container, RankEnvironment(), args->command);
  Json go = Obj();
  *Mutable(&go, {"metadata", "annotations", kCommitted}) = Str("true");
  // The pod after the patch, or nullopt when it is gone (the hold was released).
  const auto patch = [&](const Json& body) -> std::optional<Json> {
    for (int tries = 0;;) {
      auto r = JsonOf(c.Call("PATCH", pod_path, ToJson(body), "application/merge-patch+json"), "committing");
      if (r.ok()) return *r;
      if (r.status().code() == absl::StatusCode::kNotFound) {
        Say(StrCat("pod ", ns, "/", pod, " is gone: the hold was released"));
        return std::nullopt;
      }
      Say(std::string(r.status().message()));
      retry(&tries);
    }
  };
  auto after = patch(mine);
  if (!after) return 137;
  if (AllRanksCommitted(*after) && !patch(go)) return 137;
  std::atomic<bool> stopping{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    stopping = true;
    Say(StrCat("stopping: deleting pod ", ns, "/", pod, " with a grace period of ", args->grace_s, " s"));
    (void)c.Call("DELETE", StrCat(pod_path, "?gracePeriodSeconds=", args->grace_s));
  });
  signals.detach();

  // Follow the log; a broken stream is followed again from where it was.
  uint64_t written = 0;
  for (int tries = 0;;) {
    uint64_t seen = 0;
    auto streamed = c.Stream(
        StrCat(pod_path, "/log?follow=true&container=", args->container), std::chrono::hours(24 * 365),
        [&](std::string_view bytes) {
          const uint64_t skip = written > seen ? std::min<uint64_t>(written - seen, bytes.size()) : 0;
          seen += bytes.size();
          if (skip < bytes.size()) {
            (void)std::fwrite(bytes.data() + skip, 1, bytes.size() - skip, stdout);
            std::fflush(stdout);
            written += bytes.size() - skip;
          }
          return true;
        });
    auto p = JsonOf(c.Call("GET", pod_path), "reading the pod");
    if (!p.ok() && p.status().code() == absl::StatusCode::kNotFound) {
      Say(StrCat("pod ", ns, "/", pod, " is gone"));
      return stopping ? 143 : 137;
    }
    if (p.ok()) {
      int code = 0;
      const std::string state = ContainerState(*p, args->container, &code);
      if (state == "terminated") return code;
      if (FindString(*p, {"status", "phase"}) == "Failed" && state.empty()) {
        Say(StrCat("pod ", ns, "/", pod, " failed before ", args->container, " ran: ",
                   FindString(*p, {"status", "reason"}), " ", FindString(*p, {"status", "message"})));
        return 1;
      }
      // Not started yet (the log answers 400), or the stream broke.
      if (streamed.ok()) tries = 0;
    } else {
      Say(std::string(p.status().message()));
    }
    retry(&tries);
  }
}

}  // namespace fedgate::gateway
