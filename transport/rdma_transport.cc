#include "transport/rdma_transport.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/str_cat.h"

namespace fedgate::transport {
namespace {

constexpr char kMagic[4] = {'F', 'G', 'R', 'D'};
constexpr uint8_t kWireVersion = 1;
constexpr size_t kRecordBytes = 4 + 4 + 2 + 16 + 8 + 4 + 4;  // = 42
constexpr size_t kBufferBytes = 64 << 20;  // largest message size over rdma
constexpr uint32_t kEndOfRound = 0xffffffffu;
constexpr int kDepth = 64;  // outstanding work requests per queue pair

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

std::string EncodeQpInfo(const std::vector<RdmaQpInfo>& qps) {
  std::string out(kMagic, 4);
  out.push_back(static_cast<char>(kWireVersion));
  PutLe(&out, qps.size(), 2);
  for (const auto& q : qps) {
    PutLe(&out, q.qp_num, 4);
    PutLe(&out, q.psn, 4);
    PutLe(&out, q.lid, 2);
    out.append(reinterpret_cast<const char*>(q.gid.data()), q.gid.size());
    PutLe(&out, q.addr, 8);
    PutLe(&out, q.rkey, 4);
    PutLe(&out, q.mtu, 4);
  }
  return out;
}

absl::StatusOr<std::vector<RdmaQpInfo>> DecodeQpInfo(std::string_view wire) {
  if (wire.size() < 7 || std::memcmp(wire.data(), kMagic, 4) != 0) {
    return absl::InvalidArgumentError("rdma: queue-pair info has no FGRD header");
  }
  const auto* p = reinterpret_cast<const unsigned char*>(wire.data());
  if (p[4] != kWireVersion) {
    return absl::InvalidArgumentError(StrCat("rdma: queue-pair info version ", int(p[4]),
                                             " is not ", int(kWireVersion)));
  }
  const size_t n = GetLe(p + 5, 2);
  if (n == 0 || wire.size() != 7 + n * kRecordBytes) {
    return absl::InvalidArgumentError(StrCat("rdma: queue-pair info of ", wire.size(),
                                             " bytes does not hold ", n, " record(s)"));
  }
  std::vector<RdmaQpInfo> out(n);
  const unsigned char* r = p + 7;
  for (size_t i = 0; i < n; ++i, r += kRecordBytes) {
    out[i].qp_num = static_cast<uint32_t>(GetLe(r, 4));
    out[i].psn = static_cast<uint32_t>(GetLe(r + 4, 4));
    out[i].lid = static_cast<uint16_t>(GetLe(r + 8, 2));
    std::memcpy(out[i].gid.data(), r + 10, 16);
    out[i].addr = GetLe(r + 26, 8);
    out[i].rkey = static_cast<uint32_t>(GetLe(r + 34, 4));
    out[i].mtu = static_cast<uint32_t>(GetLe(r + 38, 4));
    if (out[i].qp_num == 0 || out[i].qp_num > 0xffffff || out[i].psn > 0xffffff) {
      return absl::InvalidArgumentError(StrCat("rdma: queue-pair record ", i, " is out of range"));
    }
  }
  return out;
}

QpTransition QpToInit(uint8_t port) {
  QpTransition t;
  t.state = IBV_QPS_INIT;
  t.port_num = port;
  t.access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  t.attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return t;
}

QpTransition QpToRtr(const RdmaQpInfo& remote, uint8_t port, uint8_t sgid_index) {
  QpTransition t;
  t.state = IBV_QPS_RTR;
  t.port_num = port;
  t.path_mtu = remote.mtu == 0 ? static_cast<uint32_t>(IBV_MTU_1024) : remote.mtu;
  t.dest_qp_num = remote.qp_num;
  t.rq_psn = remote.psn;
  t.dlid = remote.lid;
  // RoCE (no LID) needs global routing through the GID.
  t.is_global = remote.lid == 0;
  t.dgid = remote.gid;
  t.sgid_index = sgid_index;
  t.max_dest_rd_atomic = 1;
  t.min_rnr_timer = 12;
  t.attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

QpTransition QpToRts(uint32_t local_psn) {
  QpTransition t;
  t.state = IBV_QPS_RTS;
  t.sq_psn = local_psn;
  t.timeout = 14;
  t.retry_cnt = 7;
  t.rnr_retry = 7;  // retry forever while the receiver reposts
  t.max_rd_atomic = 1;
  t.attr_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

absl::Status CheckRdmaDevice() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list != nullptr) ibv_free_device_list(list);
  if (n <= 0) return absl::FailedPreconditionError("no RDMA device found");
  return absl::OkStatus();
}

namespace {

ibv_qp_attr ToAttr(const QpTransition& t) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof(a));
  a.qp_state = static_cast<ibv_qp_state>(t.state);
  a.port_num = t.port_num;
  a.qp_access_flags = static_cast<int>(t.access_flags);
  a.path_mtu = static_cast<ibv_mtu>(t.path_mtu);
  a.dest_qp_num = t.dest_qp_num;
  a.rq_psn = t.rq_psn;
  a.sq_psn = t.sq_psn;
  a.ah_attr.dlid = t.dlid;
  a.ah_attr.port_num = t.port_num;
  a.ah_attr.is_global = t.is_global ? 1 : 0;
  std::memcpy(a.ah_attr.grh.dgid.raw, t.dgid.data(), 16);
  a.ah_attr.grh.sgid_index = t.sgid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.max_dest_rd_atomic = t.max_dest_rd_atomic;
  a.min_rnr_timer = t.min_rnr_timer;
  a.timeout = t.timeout;
  a.retry_cnt = t.retry_cnt;
  a.rnr_retry = t.rnr_retry;
  a.max_rd_atomic = t.max_rd_atomic;
  return a;
}

// One device context with a buffer, a completion queue and N RC queue pairs.
class Verbs {
 public:
  ~Verbs() {
    for (auto* qp : qps_) ibv_destroy_qp(qp);
    if (mr_) ibv_dereg_mr(mr_);
    if (cq_) ibv_destroy_cq(cq_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
    std::free(buf_);
  }

  absl::Status Open(uint32_t n_qps) {
    if (auto st = CheckRdmaDevice(); !st.ok()) return st;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ctx_ = ibv_open_device(list[0]);
    const std::string name = ibv_get_device_name(list[0]);
    ibv_free_device_list(list);
    if (ctx_ == nullptr) return absl::UnavailableError(StrCat("rdma: cannot open ", name));
    if (ibv_query_port(ctx_, port_, &port_attr_) != 0) {
      return absl::UnavailableError(StrCat("rdma: cannot query port of ", name));
    }
    if (ibv_query_gid(ctx_, port_, gid_index_, &gid_) != 0) std::memset(&gid_, 0, sizeof(gid_));
    pd_ = ibv_alloc_pd(ctx_);
    cq_ = ibv_create_cq(ctx_, static_cast<int>(4 * kDepth * n_qps), nullptr, nullptr, 0);
    if (posix_memalign(&buf_, 4096, kBufferBytes) != 0) buf_ = nullptr;
    if (!pd_ || !cq_ || !buf_) return absl::ResourceExhaustedError("rdma: cannot allocate");
    mr_ = ibv_reg_mr(pd_, buf_, kBufferBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr_ == nullptr) return absl::ResourceExhaustedError("rdma: cannot register memory");
    for (uint32_t i = 0; i < n_qps; ++i) {
      ibv_qp_init_attr init;
      std::memset(&init, 0, sizeof(init));
      init.send_cq = cq_;
      init.recv_cq = cq_;
      init.qp_type = IBV_QPT_RC;
      init.cap.max_send_wr = 2 * kDepth;
      init.cap.max_recv_wr = 2 * kDepth;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      ibv_qp* qp = ibv_create_qp(pd_, &init);
      if (qp == nullptr) return absl::ResourceExhaustedError("rdma: cannot create a queue pair");
      qps_.push_back(qp);
      psns_.push_back(static_cast<uint32_t>(std::rand()) & 0xffffff);
      ibv_qp_attr a = ToAttr(QpToInit(port_));
      if (ibv_modify_qp(qp, &a, static_cast<int>(QpToInit(port_).attr_mask)) != 0) {
        return absl::UnavailableError("rdma: queue pair refused INIT");
      }
    }
    return absl::OkStatus();
  }

  std::vector<RdmaQpInfo> Infos() const {
    std::vector<RdmaQpInfo> out;
    for (size_t i = 0; i < qps_.size(); ++i) {
      RdmaQpInfo q;
      q.qp_num = qps_[i]->qp_num;
      q.psn = psns_[i];
      q.lid = port_attr_.lid;
      std::memcpy(q.gid.data(), gid_.raw, 16);
      q.addr = reinterpret_cast<uint64_t>(buf_);
      q.rkey = mr_->rkey;
      q.mtu = port_attr_.active_mtu;
      out.push_back(q);
    }
    return out;
  }

  absl::Status Connect(const std::vector<RdmaQpInfo>& remote) {
    if (remote.size() != qps_.size()) {
      return absl::InvalidArgumentError("rdma: the two sides disagree on the stream count");
    }
    for (size_t i = 0; i < qps_.size(); ++i) {
      auto rtr = QpToRtr(remote[i], port_, gid_index_);
      ibv_qp_attr a = ToAttr(rtr);
      if (ibv_modify_qp(qps_[i], &a, static_cast<int>(rtr.attr_mask)) != 0) {
        return absl::UnavailableError("rdma: queue pair refused RTR");
      }
      auto rts = QpToRts(psns_[i]);
      a = ToAttr(rts);
      if (ibv_modify_qp(qps_[i], &a, static_cast<int>(rts.attr_mask)) != 0) {
        return absl::UnavailableError("rdma: queue pair refused RTS");
      }
    }
    remote_ = remote;
    return absl::OkStatus();
  }

  bool PostRecv(size_t qp) {
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = qp;
    return ibv_post_recv(qps_[qp], &wr, &bad) == 0;
  }

  bool PostWrite(size_t qp, uint32_t bytes, uint32_t imm) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_), bytes, mr_->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = qp;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.sg_list = bytes > 0 ? &sge : nullptr;
    wr.num_sge = bytes > 0 ? 1 : 0;
    wr.wr.rdma.remote_addr = remote_[qp].addr;
    wr.wr.rdma.rkey = remote_[qp].rkey;
    return ibv_post_send(qps_[qp], &wr, &bad) == 0;
  }

  int Poll(ibv_wc* wcs, int n) { return ibv_poll_cq(cq_, n, wcs); }
  size_t size() const { return qps_.size(); }

 private:
  uint8_t port_ = 1;
  uint8_t gid_index_ = 0;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  void* buf_ = nullptr;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psns_;
  std::vector<RdmaQpInfo> remote_;
};

using SteadyClock = std::chrono::steady_clock;

class RdmaClient final : public ClientTransport {
 public:
  explicit RdmaClient(uint32_t streams) : streams_(streams) {}

  absl::Status Setup(const v1::BenchWelcome& welcome, const std::string&) override {
    if (auto st = verbs_.Open(streams_); !st.ok()) return st;
    auto remote = DecodeQpInfo(welcome.transport_info());
    if (!remote.ok()) return remote.status();
    return verbs_.Connect(*remote);
  }

  std::string RoundInfo() override { return EncodeQpInfo(verbs_.Infos()); }

  absl::StatusOr<std::vector<double>> Round(const v1::BenchRound& round,
                                            const std::function<bool()>& stop) override {
    if (round.size_bytes() > kBufferBytes) {
      return absl::InvalidArgumentError("rdma: message sizes above 64M are not supported");
    }
    std::vector<int> outstanding(verbs_.size(), 0);
    ibv_wc wcs[64];
    auto reap = [&]() -> absl::Status {
      const int n = verbs_.Poll(wcs, 64);
      for (int i = 0; i < n; ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS) {
          return absl::UnavailableError(
              StrCat("rdma: write failed: ", ibv_wc_status_str(wcs[i].status)));
        }
        --outstanding[wcs[i].wr_id];
      }
      return absl::OkStatus();
    };
    while (round.duration_ms() > 0 && !stop()) {
      for (size_t q = 0; q < verbs_.size(); ++q) {
        while (outstanding[q] < kDepth) {
          if (!verbs_.PostWrite(q, round.size_bytes(), 0)) {
            return absl::UnavailableError("rdma: post_send failed");
          }
          ++outstanding[q];
        }
      }
      if (auto st = reap(); !st.ok()) return st;
    }
    for (size_t q = 0; q < verbs_.size(); ++q) {
      verbs_.PostWrite(q, 0, kEndOfRound);
      ++outstanding[q];
    }
    const auto deadline = SteadyClock::now() + std::chrono::seconds(10);
    auto busy = [&] {
      for (int o : outstanding) {
        if (o > 0) return true;
      }
      return false;
    };
    while (busy() && SteadyClock::now() < deadline) {
      if (auto st = reap(); !st.ok()) return st;
    }
    return std::vector<double>{};  // no latency over rdma yet
  }

 private:
  uint32_t streams_;
  Verbs verbs_;
};

class RdmaServer final : public ServerTransport {
 public:
  absl::Status Setup(const v1::BenchHello& hello, v1::BenchWelcome* welcome) override {
    if (auto st = verbs_.Open(hello.streams()); !st.ok()) return st;
    welcome->set_transport_info(EncodeQpInfo(verbs_.Infos()));
    return absl::OkStatus();
  }

  absl::Status Round(const v1::BenchRound& round,
                     const std::function<void(const v1::BenchRoundResult&)>& report) override {
    if (!connected_) {
      auto remote = DecodeQpInfo(round.transport_info());
      if (!remote.ok()) return remote.status();
      if (auto st = verbs_.Connect(*remote); !st.ok()) return st;
      for (size_t q = 0; q < verbs_.size(); ++q) {
        for (int i = 0; i < kDepth; ++i) verbs_.PostRecv(q);
      }
      connected_ = true;
    }
    double bytes = 0, b0 = 0;
    size_t ended = 0;
    bool reported = round.duration_ms() == 0;
    if (reported) report(v1::BenchRoundResult());
    SteadyClock::time_point first{}, t0{};
    enum { kWaitFirst, kWarmup, kWindow, kDrain } phase = kWaitFirst;
    const auto give_up = SteadyClock::now() + std::chrono::milliseconds(
                                                   round.warmup_ms() + round.duration_ms() + 30000);
    ibv_wc wcs[64];
    while (ended < verbs_.size() && SteadyClock::now() < give_up) {
      const int n = verbs_.Poll(wcs, 64);
      for (int i = 0; i < n; ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS) {
          return absl::UnavailableError(
              StrCat("rdma: receive failed: ", ibv_wc_status_str(wcs[i].status)));
        }
        verbs_.PostRecv(wcs[i].wr_id);
        if (ntohl(wcs[i].imm_data) == kEndOfRound) {
          ++ended;
          continue;
        }
        bytes += wcs[i].byte_len;
        if (phase == kWaitFirst) {
          phase = kWarmup;
          first = SteadyClock::now();
        }
      }
      const auto now = SteadyClock::now();
      if (phase == kWarmup && now - first >= std::chrono::milliseconds(round.warmup_ms())) {
        phase = kWindow;
        t0 = now;
        b0 = bytes;
      } else if (phase == kWindow && now - t0 >= std::chrono::milliseconds(round.duration_ms())) {
        phase = kDrain;
        v1::BenchRoundResult r;
        r.set_payload_bytes(bytes - b0);
        r.set_seconds(std::chrono::duration<double>(now - t0).count());
        report(r);
        reported = true;
      }
    }
    if (!reported) return absl::DeadlineExceededError("rdma: the round never completed");
    return absl::OkStatus();
  }

 private:
  Verbs verbs_;
  bool connected_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ClientTransport>> MakeRdmaClient(uint32_t streams) {
  if (auto st = CheckRdmaDevice(); !st.ok()) return st;
  return std::unique_ptr<ClientTransport>(new RdmaClient(streams));
}

absl::StatusOr<std::unique_ptr<ServerTransport>> MakeRdmaServer() {
  if (auto st = CheckRdmaDevice(); !st.ok()) return st;
  return std::unique_ptr<ServerTransport>(new RdmaServer());
}

}  // namespace fedgate::transport
