// fedgate-allreduce: a small distributed workload that uses only the rank
// environment fedgate gives every rank (DESIGN.md "Rank environment").
//
// Rank 0 listens on MASTER_PORT (the rendezvous); every rank opens its own
// ring listener and reports its address there; rank 0 sends everyone the
// table; each rank connects to the next one, and the ring all-reduces a
// vector (each rank contributes rank + 1 in every element). A rank exits 0
// only if its result is the expected sum and every other rank agreed. Socket
// timeouts make the others fail within seconds when any rank dies.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kTimeoutS = 10;
constexpr size_t kElems = 1 << 16;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "allreduce: %s\n", what.c_str());
  std::exit(1);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') Die(std::string("missing environment variable ") + name);
  return v;
}

void Timeouts(int fd) {
  timeval tv{kTimeoutS, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void SendAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) Die("send failed (a peer rank is gone?)");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void RecvAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = recv(fd, c, n, 0);
    if (r <= 0) Die("receive failed or timed out (a peer rank is gone?)");
    c += r;
    n -= static_cast<size_t>(r);
  }
}

int Listen(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    Die("cannot resolve " + host);
  }
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 256) != 0) {
    Die("cannot listen on " + host + ":" + std::to_string(port) + ": " + strerror(errno));
  }
  freeaddrinfo(res);
  return fd;
}

int Accept(int lfd) {
  timeval tv{kTimeoutS * 3, 0};
  setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int fd = accept(lfd, nullptr, nullptr);
  if (fd < 0) Die("no peer connected in time");
  Timeouts(fd);
  return fd;
}

int Connect(const std::string& host, int port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutS * 3);
  while (true) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) == 0) {
      int fd = socket(res->ai_family, SOCK_STREAM, 0);
      const bool ok = connect(fd, res->ai_addr, res->ai_addrlen) == 0;
      freeaddrinfo(res);
      if (ok) {
        Timeouts(fd);
        return fd;
      }
      close(fd);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      Die("cannot reach " + host + ":" + std::to_string(port));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

struct Addr {
  char host[64];
  int32_t port;
};

}  // namespace

int main() {
  const int rank = std::stoi(Env("RANK"));
  const int world = std::stoi(Env("WORLD_SIZE"));
  const std::string master = Env("MASTER_ADDR");
  const int master_port = std::stoi(Env("MASTER_PORT"));
  const char* node_env = std::getenv("FEDGATE_NODE_ADDR");
  const std::string me = node_env && *node_env ? node_env : master;
  std::printf("rank %d/%d: site %s, local rank %s, group rank %s, GPU %s, master %s:%d\n", rank,
              world, std::getenv("FEDGATE_SITE") ? std::getenv("FEDGATE_SITE") : "?",
              Env("LOCAL_RANK").c_str(), Env("GROUP_RANK").c_str(),
              Env("CUDA_VISIBLE_DEVICES").c_str(), master.c_str(), master_port);
  std::fflush(stdout);
  if (rank < 0 || rank >= world) Die("RANK outside [0, WORLD_SIZE)");

  // Every rank's ring listener, on an ephemeral port.
  const int ring_l = Listen(me, 0);
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  getsockname(ring_l, reinterpret_cast<sockaddr*>(&ss), &sl);
  const int my_port = ntohs(ss.ss_family == AF_INET
                                ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  std::vector<Addr> table(world);
  if (rank == 0) {
    const int rl = Listen(master, master_port);
    std::vector<int> peers(world, -1);
    std::snprintf(table[0].host, sizeof(table[0].host), "%s", me.c_str());
    table[0].port = my_port;
    for (int i = 1; i < world; ++i) {
      int fd = Accept(rl);
      int32_t r;
      Addr a;
      RecvAll(fd, &r, sizeof(r));
      RecvAll(fd, &a, sizeof(a));
      if (r <= 0 || r >= world || peers[r] != -1) Die("bad or duplicate rank at rendezvous");
      peers[r] = fd;
      table[r] = a;
    }
    for (int i = 1; i < world; ++i) SendAll(peers[i], table.data(), sizeof(Addr) * world);
    for (int i = 1; i < world; ++i) close(peers[i]);
    close(rl);
  } else {
    int fd = Connect(master, master_port);
    int32_t r = rank;
    Addr a{};
    std::snprintf(a.host, sizeof(a.host), "%s", me.c_str());
    a.port = my_port;
    SendAll(fd, &r, sizeof(r));
    SendAll(fd, &a, sizeof(a));
    RecvAll(fd, table.data(), sizeof(Addr) * world);
    close(fd);
  }

  // The ring: send to next, receive from previous.
  std::vector<double> mine(kElems, rank + 1.0), sum = mine, passing = mine, incoming(kElems);
  if (world > 1) {
    const int next = (rank + 1) % world;
    int to_next = -1, from_prev = -1;
    std::thread dial([&] { to_next = Connect(table[next].host, table[next].port); });
    from_prev = Accept(ring_l);
    dial.join();
    for (int step = 0; step < world - 1; ++step) {
      std::thread tx([&] { SendAll(to_next, passing.data(), kElems * sizeof(double)); });
      RecvAll(from_prev, incoming.data(), kElems * sizeof(double));
      tx.join();
      for (size_t i = 0; i < kElems; ++i) sum[i] += incoming[i];
      passing.swap(incoming);
    }
    // Agreement: every rank's checksum travels once around the ring.
    double check = sum[0] + sum[kElems - 1];
    double from = 0;
    std::thread tx([&] { SendAll(to_next, &check, sizeof(check)); });
    RecvAll(from_prev, &from, sizeof(from));
    tx.join();
    if (from != check) Die("ranks disagree on the result");
    close(to_next);
    close(from_prev);
  }
  const double want = world * (world + 1) / 2.0;
  for (double v : sum) {
    if (v != want) Die("wrong sum " + std::to_string(v) + ", want " + std::to_string(want));
  }
  std::printf("rank %d/%d: allreduce of %zu doubles OK, every element = %.0f\n", rank, world,
              kElems, want);
  return 0;
}
