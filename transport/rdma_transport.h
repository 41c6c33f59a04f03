// The rdma transport: libibverbs RC queue pairs, RDMA WRITE WITH IMMEDIATE so
// the receiver sees a completion per message and counts what arrived. Queue
// pair details travel over the TCP control connection. The wire format and the
// queue-pair attributes are pure and tested without a NIC.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace fedgate::transport {

#ifdef FEDGATE_HAVE_RDMA
inline constexpr bool kRdmaBuilt = true;
#else
inline constexpr bool kRdmaBuilt = false;
#endif

// What one side tells the other about one queue pair.
struct RdmaQpInfo {
  uint32_t qp_num = 0;
  uint32_t psn = 0;       // initial packet sequence number (24 bits)
  uint16_t lid = 0;       // InfiniBand local id (0 on RoCE)
  std::array<uint8_t, 16> gid{};  // RoCE / global routing
  uint64_t addr = 0;      // remote buffer address for RDMA WRITE
  uint32_t rkey = 0;      // remote key of that buffer
  uint32_t mtu = 0;       // ibv_mtu enum value of the port
};

// Versioned, fixed-width little-endian records: "FGRD", version 1, count, then
// 42 bytes per queue pair.
std::string EncodeQpInfo(const std::vector<RdmaQpInfo>& qps);
absl::StatusOr<std::vector<RdmaQpInfo>> DecodeQpInfo(std::string_view wire);

// The queue-pair state transitions as plain values, so they can be checked
// without a device. `attr_mask` is the ibv_qp_attr_mask to pass along.
struct QpTransition {
  int state = 0;  // ibv_qp_state
  uint32_t attr_mask = 0;
  uint8_t port_num = 0;
  uint32_t access_flags = 0;
  uint32_t path_mtu = 0;
  uint32_t dest_qp_num = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint16_t dlid = 0;
  bool is_global = false;
  std::array<uint8_t, 16> dgid{};
  uint8_t sgid_index = 0;
  uint8_t max_dest_rd_atomic = 0;
  uint8_t min_rnr_timer = 0;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint8_t max_rd_atomic = 0;
};
QpTransition QpToInit(uint8_t port);
QpTransition QpToRtr(const RdmaQpInfo& remote, uint8_t port, uint8_t sgid_index);
QpTransition QpToRts(uint32_t local_psn);

// OK when at least one RDMA device exists; else "no RDMA device found".
absl::Status CheckRdmaDevice();

// Nullptr-free factories; without rdma-core at build time they say so.
absl::StatusOr<std::unique_ptr<ClientTransport>> MakeRdmaClient(uint32_t streams);
absl::StatusOr<std::unique_ptr<ServerTransport>> MakeRdmaServer();

}  // namespace fedgate::transport
