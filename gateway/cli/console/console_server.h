// `fedctl console`'s HTTP server: plain HTTP on one address (loopback by
// default), every request through the ConsoleGuard, the page's static files
// from a folder, /console/session (who the page acts as, what it may show),
// and /v1/... through the ConsoleBackend.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gateway/cli/console/console_backend.h"
#include "gateway/cli/console/console_guard.h"

namespace fedgate::cli {

struct ConsoleOptions {
  std::string listen = "127.0.0.1:0";
  std::string web_dir;     // index.html, console.css, console.js
  std::string chart_js;    // Chart.js's file, or "" when it is not installed
  std::string session_json;  // the /console/session document
  std::string token;
};

class ConsoleServer {
 public:
  static absl::StatusOr<std::unique_ptr<ConsoleServer>> Start(const ConsoleOptions& opts,
                                                             ConsoleBackend backend);
  ~ConsoleServer();
  // The address it listens on, HOST:PORT, as a browser writes it.
  std::string address() const;
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedgate::cli
