// What `fedctl console` answers under /v1/: the REST documents of DESIGN.md,
// made by the same gRPC calls fedctl makes, over the caller's own mTLS
// channel, so the page shows exactly what that identity may see.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fedgate::cli {

struct ConsoleReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class ConsoleBackend {
 public:
  explicit ConsoleBackend(std::shared_ptr<grpc::Channel> channel) : channel_(std::move(channel)) {}
  // GET /v1/sites|links|nodes|jobs|jobs/ID|jobs/ID/vc|jobs/ID/logs|quotas|usage
  // and POST /v1/jobs/ID:cancel; anything else 404 (submit: 405).
  ConsoleReply Answer(const std::string& method, const std::string& target) const;

 private:
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace fedgate::cli
