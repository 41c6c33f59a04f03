// REST requests as they arrive: raw bytes through Beast's HTTP parser (with
// the server's body limit), then the routes that turn them into job-API calls,
// and the parser of a service's address (/v1/services/<name>/<path>).
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "federation/names.h"
#include "gateway/api/rest_routes.h"
#include "gateway/serve/service_target.h"
#include "tests/fuzz/quiet.h"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_done()) return 0;
  const auto& req = parser.get();
  // A service's address: a target accepted is one a replica may see, so it
  // never climbs out of the replica's root.
  const std::string_view target(req.target().data(), req.target().size());
  if (auto t = fedgate::gateway::ParseServiceTarget(target); t.ok()) {
    const std::string path = t->path.substr(0, t->path.find('?'));
    if (path.empty() || path[0] != '/' || path.find("/../") != std::string::npos ||
        path.ends_with("/..") || !fedgate::federation::IsValidName(t->name)) {
      __builtin_trap();
    }
  }
  auto call = fedgate::gateway::RouteRest(
      std::string_view(req.method_string().data(), req.method_string().size()),
      std::string_view(req.target().data(), req.target().size()), req.body());
  if (call.ok()) {
    (void)fedgate::federation::IsValidJobId(call->get.id());
    (void)fedgate::federation::IsValidJobId(call->cancel.id());
    (void)fedgate::federation::IsValidJobId(call->logs.id());
  }
  return 0;
}
