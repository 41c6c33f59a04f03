// The nccl transport: ncclSend / ncclRecv between two ranks on two hosts, with
// device buffers; the NCCL unique id travels over the control connection.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace fedgate::transport {

#ifdef FEDGATE_HAVE_NCCL
inline constexpr bool kNcclBuilt = true;
#else
inline constexpr bool kNcclBuilt = false;
#endif

// OK when CUDA sees at least one GPU; else "no CUDA GPU found".
absl::Status CheckGpu();

absl::StatusOr<std::unique_ptr<ClientTransport>> MakeNcclClient();
absl::StatusOr<std::unique_ptr<ServerTransport>> MakeNcclServer();

}  // namespace fedgate::transport
