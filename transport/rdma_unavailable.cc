// Built when rdma-core is absent: the rdma transport says it is not built.
#include "transport/rdma_transport.h"

namespace fedgate::transport {

absl::Status CheckRdmaDevice() {
  return absl::UnimplementedError("this fedbench was built without rdma-core (libibverbs)");
}
absl::StatusOr<std::unique_ptr<ClientTransport>> MakeRdmaClient(uint32_t) {
  return CheckRdmaDevice();
}
absl::StatusOr<std::unique_ptr<ServerTransport>> MakeRdmaServer() { return CheckRdmaDevice(); }

}  // namespace fedgate::transport
