// The tcp transport (Boost.Asio, blocking sockets, one thread per stream):
// the baseline that works everywhere.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace fedgate::transport {

std::unique_ptr<ClientTransport> MakeTcpClient(uint32_t streams);
std::unique_ptr<ServerTransport> MakeTcpServer();

}  // namespace fedgate::transport
