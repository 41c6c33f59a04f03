// fedctl console [--listen 127.0.0.1:0] [--open]: the browser console, the
// way `kubectl proxy` and Jupyter work. Its first line on stdout is the URL
// with the token; it runs until SIGINT or SIGTERM.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "base/str_cat.h"
#include "base/text.h"
#include "gateway/cli/command.h"
#include "gateway/cli/console/console_server.h"
#include "gateway/security/certs.h"
#include "gateway/security/identity.h"

extern char** environ;

namespace fedgate::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDebianChartJs = "/usr/share/javascript/chart.js/chart.min.js";

// The page's folder: $FEDGATE_CONSOLE_DIR, else beside the binary (the build
// puts it there), else the installed share/fedgate/console.
std::string FindWebDir() {
  std::vector<fs::path> tried;
  if (const char* env = std::getenv("FEDGATE_CONSOLE_DIR"); env != nullptr && *env != '\0') {
    tried.emplace_back(env);
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      tried.push_back(exe.parent_path() / "console");
      tried.push_back(exe.parent_path().parent_path() / "share/fedgate/console");
    }
  }
  std::string where;
  for (const auto& p : tried) {
    if (fs::exists(p / "index.html")) return p.string();
    where += StrCat(where.empty() ? "" : ", ", p.string());
  }
  Die(StrCat("the console's files (index.html, console.js, console.css) are not in ", where,
             ": reinstall fedctl or set FEDGATE_CONSOLE_DIR"));
}

// Chart.js from Debian's libjs-chart.js (or a copy installed beside the page);
// "" when neither is there. $FEDGATE_CONSOLE_CHARTJS overrides ("" = none).
std::string FindChartJs(const std::string& web_dir) {
  if (const char* env = std::getenv("FEDGATE_CONSOLE_CHARTJS"); env != nullptr) {
    return *env != '\0' && access(env, R_OK) == 0 ? env : "";
  }
  for (const std::string& p : {std::string(kDebianChartJs), web_dir + "/vendor/chart.min.js"}) {
    if (access(p.c_str(), R_OK) == 0) return p;
  }
  return "";
}

std::string SessionJson(const gateway::Identity& me, const std::string& gateway,
                        const std::string& chart) {
  const bool admin = me.role == gateway::Role::kAdmin;
  return StrCat("{\"identity\": \"", JsonEscape(me.ToUri()), "\", \"role\": \"",
                admin ? "admin" : "user", "\", \"tenant\": \"", JsonEscape(me.tenant),
                "\", \"site\": \"", JsonEscape(me.site), "\", \"name\": \"", JsonEscape(me.name),
                "\", \"gateway\": \"", JsonEscape(gateway), "\", \"chart\": ",
                chart.empty() ? "false" : "true", ", \"chart_missing\": \"",
                chart.empty() ? "charts need Debian's libjs-chart.js (apt install libjs-chart.js); "
                                "every number is in the tables"
                              : "",
                "\"}");
}

void OpenBrowser(const std::string& url) {
  pid_t pid = 0;
  const char* argv[] = {"xdg-open", url.c_str(), nullptr};
  if (posix_spawnp(&pid, "xdg-open", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) {
    std::fprintf(stderr, "fedctl console: could not run xdg-open; open the URL yourself\n");
  }
}

int RunConsole(const Globals& g, const std::string& listen, bool open) {
  const std::string dir = TlsDir(g);
  auto cert = gateway::ReadFile(dir + "/cert.pem");
  if (!cert.ok()) Die(StrCat("cannot read ", dir, "/cert.pem"));
  auto me = gateway::IdentityFromCertPem(*cert);
  if (!me.ok()) Die(StrCat(dir, "/cert.pem: ", me.status().message()));
  if (me->role == gateway::Role::kGateway) {
    Die("a gateway's certificate is not a console identity: use a tenant user's or an admin's");
  }
  ConsoleOptions opts;
  opts.listen = listen;
  opts.web_dir = FindWebDir();
  opts.chart_js = FindChartJs(opts.web_dir);
  opts.session_json = SessionJson(*me, GatewayEndpoint(g), opts.chart_js);
  opts.token = NewConsoleToken();
  // Signals wait for sigwait below, not in the server's threads.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto server = ConsoleServer::Start(opts, ConsoleBackend(Connect(g)));
  if (!server.ok()) Die(std::string(server.status().message()), 2);
  const std::string url = StrCat("http://", (*server)->address(), "/?token=", opts.token);
  std::printf("%s\n", url.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "fedctl console: acting as %s through %s; Ctrl-C stops it\n",
               me->ToUri().c_str(), GatewayEndpoint(g).c_str());
  if (opts.chart_js.empty()) {
    std::fprintf(stderr, "fedctl console: no Chart.js (libjs-chart.js): tables only\n");
  }
  if (listen.rfind("127.", 0) != 0 && listen.rfind("[::1]", 0) != 0) {
    std::fprintf(stderr,
                 "fedctl console: listening on %s: anyone who can reach this port and holds the "
                 "token acts as %s\n",
                 (*server)->address().c_str(), me->ToUri().c_str());
  }
  if (open) OpenBrowser(url);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*server)->Stop();
  return 0;
}

}  // namespace

void AddConsoleCommands(CLI::App& app, Commands* out) {
  auto listen = std::make_shared<std::string>("127.0.0.1:0");
  auto open = std::make_shared<bool>(false);
  auto* console = app.add_subcommand(
      "console", "serve the browser console (sites, links, jobs, queue, usage) as this identity");
  console->add_option("--listen", *listen, "IP:PORT to serve on (default loopback, a free port)")
      ->capture_default_str();
  console->add_flag("--open", *open, "open the URL with xdg-open");
  out->push_back({console, [listen, open](const Globals& g) { return RunConsole(g, *listen, *open); }});
}

}  // namespace fedgate::cli
