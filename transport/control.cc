#include "transport/control.h"

#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "base/str_cat.h"

namespace fedgate::transport {

std::string EncodeFrame(std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out(4, '\0');
  out[0] = static_cast<char>((n >> 24) & 0xff);
  out[1] = static_cast<char>((n >> 16) & 0xff);
  out[2] = static_cast<char>((n >> 8) & 0xff);
  out[3] = static_cast<char>(n & 0xff);
  out.append(payload);
  return out;
}

uint32_t DecodeFrameLength(const unsigned char header[4]) {
  return (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) | (uint32_t{header[2]} << 8) |
         uint32_t{header[3]};
}

absl::StatusOr<uint32_t> CheckFrameHeader(const unsigned char header[4]) {
  const uint32_t n = DecodeFrameLength(header);
  if (n > kMaxControlFrameBytes) {
    return absl::InvalidArgumentError(
        StrCat("control connection: frame of ", n, " bytes exceeds the limit (not fedbench?)"));
  }
  return n;
}

absl::Status ParseFramePayload(std::string_view payload, google::protobuf::MessageLite* msg) {
  if (!msg->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::InvalidArgumentError("control connection: malformed message");
  }
  return absl::OkStatus();
}

void SetSocketTimeouts(boost::asio::ip::tcp::socket& s, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

absl::Status ControlChannel::Send(const google::protobuf::MessageLite& msg) {
  const std::string frame = EncodeFrame(msg.SerializeAsString());
  boost::system::error_code ec;
  boost::asio::write(socket_, boost::asio::buffer(frame), ec);
  if (ec) return absl::UnavailableError(StrCat("control connection: send failed: ", ec.message()));
  return absl::OkStatus();
}

absl::Status ControlChannel::Recv(google::protobuf::MessageLite* msg, int timeout_ms) {
  SetSocketTimeouts(socket_, timeout_ms);
  unsigned char header[4];
  boost::system::error_code ec;
  boost::asio::read(socket_, boost::asio::buffer(header, 4), ec);
  if (ec == boost::asio::error::eof) {
    return absl::UnavailableError("control connection closed by the other side");
  }
  if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again ||
      ec == boost::asio::error::timed_out) {
    return absl::DeadlineExceededError(
        StrCat("control connection: no answer within ", timeout_ms, " ms"));
  }
  if (ec) return absl::UnavailableError(StrCat("control connection: ", ec.message()));
  auto n = CheckFrameHeader(header);
  if (!n.ok()) return n.status();
  std::string payload(*n, '\0');
  boost::asio::read(socket_, boost::asio::buffer(payload), ec);
  if (ec) return absl::UnavailableError(StrCat("control connection: ", ec.message()));
  return ParseFramePayload(payload, msg);
}

}  // namespace fedgate::transport
