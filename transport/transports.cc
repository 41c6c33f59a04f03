#include "base/str_cat.h"
#include "transport/nccl_transport.h"
#include "transport/rdma_transport.h"
#include "transport/tcp_transport.h"
#include "transport/transport.h"

namespace fedgate::transport {

std::vector<std::string> AvailableTransports() {
  std::vector<std::string> out = {"tcp"};
  if (kRdmaBuilt) out.push_back("rdma");
  if (kNcclBuilt) out.push_back("nccl");
  return out;
}

absl::StatusOr<std::unique_ptr<ClientTransport>> MakeClientTransport(const std::string& name,
                                                                     uint32_t streams) {
  if (name == "tcp") return MakeTcpClient(streams);
  if (name == "rdma") return MakeRdmaClient(streams);
  if (name == "nccl") return MakeNcclClient();
  return absl::InvalidArgumentError(
      StrCat("unknown transport \"", name, "\" (want tcp, rdma or nccl)"));
}

absl::StatusOr<std::unique_ptr<ServerTransport>> MakeServerTransport(const std::string& name) {
  if (name == "tcp") return MakeTcpServer();
  if (name == "rdma") return MakeRdmaServer();
  if (name == "nccl") return MakeNcclServer();
  return absl::InvalidArgumentError(
      StrCat("unknown transport \"", name, "\" (want tcp, rdma or nccl)"));
}

}  // namespace fedgate::transport
