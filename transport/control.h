// The benchmark control connection: length-prefixed protobuf messages over a
// blocking TCP socket. Framing is pure and tested on its own.
#pragma once

#include <google/protobuf/message_lite.h>

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fedgate::transport {

inline constexpr uint32_t kMaxControlFrameBytes = 1 << 20;

// 4-byte big-endian length, then the bytes.
std::string EncodeFrame(std::string_view payload);
// The payload length announced by a 4-byte header.
uint32_t DecodeFrameLength(const unsigned char header[4]);
// The announced length if within kMaxControlFrameBytes, else why not.
absl::StatusOr<uint32_t> CheckFrameHeader(const unsigned char header[4]);
// Parses one frame's payload into `msg`.
absl::Status ParseFramePayload(std::string_view payload, google::protobuf::MessageLite* msg);

// Applies a receive/send timeout to a socket (0 = none).
void SetSocketTimeouts(boost::asio::ip::tcp::socket& s, int timeout_ms);

class ControlChannel {
 public:
  explicit ControlChannel(boost::asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}
  absl::Status Send(const google::protobuf::MessageLite& msg);
  // Waits up to timeout_ms for a whole message.
  absl::Status Recv(google::protobuf::MessageLite* msg, int timeout_ms);
  boost::asio::ip::tcp::socket& socket() { return socket_; }

 private:
  boost::asio::ip::tcp::socket socket_;
};

}  // namespace fedgate::transport
