#include "transport/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>

#include "base/str_cat.h"

namespace fedgate::transport {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The sender announces each batch with a flag message so the receiver, which
// owns the timed window, can end the round without a count agreed up front.
constexpr int kBatch = 8;
constexpr int64_t kMore = 1;
constexpr int64_t kEnd = 0;

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::UnavailableError(StrCat("cuda: ", what, ": ", cudaGetErrorString(e)));
}
absl::Status NcclError(const char* what, ncclResult_t r) {
  return absl::UnavailableError(StrCat("nccl: ", what, ": ", ncclGetErrorString(r)));
}

// One rank of a two-rank communicator with a device payload buffer.
class NcclPeer {
 public:
  ~NcclPeer() {
    if (comm_) ncclCommDestroy(comm_);
    if (buf_) cudaFree(buf_);
    if (flag_) cudaFree(flag_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  absl::Status Init(const ncclUniqueId& id, int rank) {
    if (auto e = cudaSetDevice(0); e != cudaSuccess) return CudaError("set device", e);
    if (auto e = cudaStreamCreate(&stream_); e != cudaSuccess) return CudaError("stream", e);
    if (auto e = cudaMalloc(&flag_, sizeof(int64_t)); e != cudaSuccess) return CudaError("malloc", e);
    if (auto r = ncclCommInitRank(&comm_, 2, id, rank); r != ncclSuccess) {
      return NcclError("init", r);
    }
    rank_ = rank;
    return absl::OkStatus();
  }

  absl::Status Reserve(size_t bytes) {
    if (bytes <= cap_) return absl::OkStatus();
    if (buf_) cudaFree(buf_);
    buf_ = nullptr;
    if (auto e = cudaMalloc(&buf_, bytes); e != cudaSuccess) return CudaError("malloc", e);
    cap_ = bytes;
    return absl::OkStatus();
  }

  absl::Status SendFlag(int64_t v) {
    cudaMemcpyAsync(flag_, &v, sizeof(v), cudaMemcpyHostToDevice, stream_);
    if (auto r = ncclSend(flag_, sizeof(v), ncclChar, 1 - rank_, comm_, stream_); r != ncclSuccess) {
      return NcclError("send", r);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> RecvFlag() {
    if (auto r = ncclRecv(flag_, sizeof(int64_t), ncclChar, 1 - rank_, comm_, stream_);
        r != ncclSuccess) {
      return NcclError("recv", r);
    }
    int64_t v = 0;
    cudaMemcpyAsync(&v, flag_, sizeof(v), cudaMemcpyDeviceToHost, stream_);
    if (auto e = cudaStreamSynchronize(stream_); e != cudaSuccess) return CudaError("sync", e);
    return v;
  }

  absl::Status Payload(size_t bytes, bool send) {
    auto r = send ? ncclSend(buf_, bytes, ncclChar, 1 - rank_, comm_, stream_)
                  : ncclRecv(buf_, bytes, ncclChar, 1 - rank_, comm_, stream_);
    if (r != ncclSuccess) return NcclError(send ? "send" : "recv", r);
    return absl::OkStatus();
  }

  absl::Status Sync() {
    if (auto e = cudaStreamSynchronize(stream_); e != cudaSuccess) return CudaError("sync", e);
    return absl::OkStatus();
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* buf_ = nullptr;
  void* flag_ = nullptr;
  size_t cap_ = 0;
  int rank_ = 0;
};

class NcclClient final : public ClientTransport {
 public:
  absl::Status Setup(const v1::BenchWelcome& welcome, const std::string&) override {
    if (welcome.transport_info().size() != sizeof(ncclUniqueId)) {
      return absl::InvalidArgumentError("nccl: the server sent no unique id");
    }
    std::memcpy(&id_, welcome.transport_info().data(), sizeof(id_));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<double>> Round(const v1::BenchRound& round,
                                            const std::function<bool()>& stop) override {
    // Joining blocks until the server joins too, which it does in its Round.
    if (!ready_) {
      if (auto st = peer_.Init(id_, 0); !st.ok()) return st;
      ready_ = true;
    }
    if (auto st = peer_.Reserve(round.size_bytes()); !st.ok()) return st;
    while (round.duration_ms() > 0 && !stop()) {
      if (auto st = peer_.SendFlag(kMore); !st.ok()) return st;
      for (int i = 0; i < kBatch; ++i) {
        if (auto st = peer_.Payload(round.size_bytes(), true); !st.ok()) return st;
      }
      if (auto st = peer_.Sync(); !st.ok()) return st;
    }
    if (auto st = peer_.SendFlag(kEnd); !st.ok()) return st;
    if (auto st = peer_.Sync(); !st.ok()) return st;
    return std::vector<double>{};
  }

 private:
  ncclUniqueId id_{};
  NcclPeer peer_;
  bool ready_ = false;
};

class NcclServer final : public ServerTransport {
 public:
  absl::Status Setup(const v1::BenchHello&, v1::BenchWelcome* welcome) override {
    if (auto r = ncclGetUniqueId(&id_); r != ncclSuccess) return NcclError("unique id", r);
    welcome->set_transport_info(std::string(reinterpret_cast<const char*>(&id_), sizeof(id_)));
    return absl::OkStatus();
  }

  absl::Status Round(const v1::BenchRound& round,
                     const std::function<void(const v1::BenchRoundResult&)>& report) override {
    if (!ready_) {
      if (auto st = peer_.Init(id_, 1); !st.ok()) return st;
      ready_ = true;
    }
    if (auto st = peer_.Reserve(round.size_bytes()); !st.ok()) return st;
    bool reported = false;
    if (round.duration_ms() == 0) {
      report(v1::BenchRoundResult());
      reported = true;
    }
    double bytes = 0, b0 = 0;
    SteadyClock::time_point first{}, t0{};
    int phase = 0;  // 0 waiting for payload, 1 warm-up, 2 window, 3 drain
    while (true) {
      auto flag = peer_.RecvFlag();
      if (!flag.ok()) return flag.status();
      if (*flag == kEnd) break;
      for (int i = 0; i < kBatch; ++i) {
        if (auto st = peer_.Payload(round.size_bytes(), false); !st.ok()) return st;
      }
      if (auto st = peer_.Sync(); !st.ok()) return st;  // the bytes are in device memory now
      bytes += static_cast<double>(kBatch) * round.size_bytes();
      const auto now = SteadyClock::now();
      if (phase == 0) {
        phase = 1;
        first = now;
      }
      if (phase == 1 && now - first >= std::chrono::milliseconds(round.warmup_ms())) {
        phase = 2;
        t0 = now;
        b0 = bytes;
      } else if (phase == 2 && now - t0 >= std::chrono::milliseconds(round.duration_ms())) {
        phase = 3;
        v1::BenchRoundResult r;
        r.set_payload_bytes(bytes - b0);
        r.set_seconds(std::chrono::duration<double>(now - t0).count());
        report(r);
        reported = true;
      }
    }
    if (!reported) return absl::DeadlineExceededError("nccl: the sender ended before the window");
    return absl::OkStatus();
  }

 private:
  ncclUniqueId id_{};
  NcclPeer peer_;
  bool ready_ = false;
};

}  // namespace

absl::Status CheckGpu() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    return absl::FailedPreconditionError(
        StrCat("no CUDA GPU found", e != cudaSuccess ? StrCat(" (", cudaGetErrorString(e), ")")
                                                     : std::string()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ClientTransport>> MakeNcclClient() {
  if (auto st = CheckGpu(); !st.ok()) return st;
  return std::unique_ptr<ClientTransport>(new NcclClient());
}

absl::StatusOr<std::unique_ptr<ServerTransport>> MakeNcclServer() {
  if (auto st = CheckGpu(); !st.ok()) return st;
  return std::unique_ptr<ServerTransport>(new NcclServer());
}

}  // namespace fedgate::transport
