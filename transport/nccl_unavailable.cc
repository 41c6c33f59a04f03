// Built when CUDA or NCCL is absent: the nccl transport says it is not built.
#include "transport/nccl_transport.h"

namespace fedgate::transport {

absl::Status CheckGpu() {
  return absl::UnimplementedError(
      "this fedbench was built without CUDA and NCCL (none found under /usr/local/cuda)");
}
absl::StatusOr<std::unique_ptr<ClientTransport>> MakeNcclClient() { return CheckGpu(); }
absl::StatusOr<std::unique_ptr<ServerTransport>> MakeNcclServer() { return CheckGpu(); }

}  // namespace fedgate::transport
