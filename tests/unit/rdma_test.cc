// The rdma pieces that need no NIC: the queue-pair wire format and the state
// transitions handed to ibv_modify_qp.
#include <gtest/gtest.h>

#include "transport/rdma_transport.h"

#ifdef FEDGATE_HAVE_RDMA
#include <infiniband/verbs.h>

namespace fedgate::transport {
namespace {

RdmaQpInfo Sample(uint32_t qpn) {
  RdmaQpInfo q;
  q.qp_num = qpn;
  q.psn = 0xabcdef;
  q.lid = 7;
  for (int i = 0; i < 16; ++i) q.gid[i] = static_cast<uint8_t>(i * 3);
  q.addr = 0x7f00deadbeef0000ull;
  q.rkey = 0x12345678;
  q.mtu = IBV_MTU_4096;
  return q;
}

TEST(RdmaWire, RoundTripsEveryField) {
  const std::vector<RdmaQpInfo> qps = {Sample(0x11), Sample(0xfffffe)};
  auto back = DecodeQpInfo(EncodeQpInfo(qps));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*back)[i].qp_num, qps[i].qp_num);
    EXPECT_EQ((*back)[i].psn, qps[i].psn);
    EXPECT_EQ((*back)[i].lid, qps[i].lid);
    EXPECT_EQ((*back)[i].gid, qps[i].gid);
    EXPECT_EQ((*back)[i].addr, qps[i].addr);
    EXPECT_EQ((*back)[i].rkey, qps[i].rkey);
    EXPECT_EQ((*back)[i].mtu, qps[i].mtu);
  }
}

TEST(RdmaWire, RejectsTruncatedForeignAndOutOfRange) {
  std::string wire = EncodeQpInfo({Sample(5)});
  EXPECT_FALSE(DecodeQpInfo(wire.substr(0, wire.size() - 1)).ok());
  EXPECT_FALSE(DecodeQpInfo("GET / HTTP/1.1").ok());
  std::string v2 = wire;
  v2[4] = 2;
  EXPECT_NE(std::string(DecodeQpInfo(v2).status().message()).find("version"), std::string::npos);
  auto bad = Sample(5);
  bad.qp_num = 0x1000000;  // 25 bits: no such queue pair number
  EXPECT_FALSE(DecodeQpInfo(EncodeQpInfo({bad})).ok());
  EXPECT_FALSE(DecodeQpInfo(EncodeQpInfo({})).ok());
}

TEST(RdmaQp, InitAllowsRemoteWrites) {
  auto t = QpToInit(1);
  EXPECT_EQ(t.state, IBV_QPS_INIT);
  EXPECT_EQ(t.port_num, 1);
  EXPECT_TRUE(t.access_flags & IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(t.attr_mask, unsigned(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS));
}

TEST(RdmaQp, RtrTargetsTheRemoteQueuePair) {
  auto remote = Sample(0x42);
  auto t = QpToRtr(remote, 1, 3);
  EXPECT_EQ(t.state, IBV_QPS_RTR);
  EXPECT_EQ(t.dest_qp_num, 0x42u);
  EXPECT_EQ(t.rq_psn, remote.psn);
  EXPECT_EQ(t.dlid, 7);
  EXPECT_FALSE(t.is_global) << "InfiniBand with a LID routes locally";
  EXPECT_EQ(t.path_mtu, unsigned(IBV_MTU_4096));
  EXPECT_TRUE(t.attr_mask & IBV_QP_AV);
  EXPECT_TRUE(t.attr_mask & IBV_QP_DEST_QPN);
  remote.lid = 0;  // RoCE
  auto roce = QpToRtr(remote, 1, 3);
  EXPECT_TRUE(roce.is_global);
  EXPECT_EQ(roce.dgid, remote.gid);
  EXPECT_EQ(roce.sgid_index, 3);
  remote.mtu = 0;
  EXPECT_EQ(QpToRtr(remote, 1, 0).path_mtu, unsigned(IBV_MTU_1024)) << "unknown MTU: safe default";
}

TEST(RdmaQp, RtsRetriesAndUsesOurPsn) {
  auto t = QpToRts(0x123);
  EXPECT_EQ(t.state, IBV_QPS_RTS);
  EXPECT_EQ(t.sq_psn, 0x123u);
  EXPECT_EQ(t.rnr_retry, 7) << "7 = retry forever while the receiver reposts";
  EXPECT_TRUE(t.attr_mask & IBV_QP_SQ_PSN);
}

}  // namespace
}  // namespace fedgate::transport
#endif  // FEDGATE_HAVE_RDMA
