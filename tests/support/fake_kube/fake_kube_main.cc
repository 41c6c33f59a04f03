// fake-kube-apiserver --listen ADDR --token TOKEN [--log-dir DIR]
//                     [--run-as USER] [--ca-out FILE]
// Serves until SIGTERM/SIGINT; prints "listening on https://HOST:PORT" once
// ready (the port, when ADDR asks for 0). --ca-out writes its self-signed
// certificate (clients may trust it instead of skipping verification).
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "tests/support/fake_kube/fake_kube_server.h"

int main(int argc, char** argv) {
  fedgate::testing::fakekube::ServerOptions opt;
  std::string ca_out;
  const std::string usage =
      "usage: fake-kube-apiserver --listen HOST:PORT --token TOKEN [--log-dir DIR] [--run-as USER] "
      "[--ca-out FILE]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << usage;
      return 0;
    }
    if (i + 1 >= argc) {
      std::cerr << "fake-kube-apiserver: " << a << " needs a value\n" << usage;
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--listen") {
      opt.listen = v;
    } else if (a == "--token") {
      opt.token = v;
    } else if (a == "--log-dir") {
      opt.log_dir = v;
    } else if (a == "--ca-out") {
      ca_out = v;
    } else if (a == "--run-as") {
      const passwd* pw = ::getpwnam(v.c_str());
      if (!pw) {
        std::cerr << "fake-kube-apiserver: --run-as: no user " << v << "\n";
        return 2;
      }
      opt.uid = pw->pw_uid;
      opt.gid = pw->pw_gid;
    } else {
      std::cerr << "fake-kube-apiserver: unknown flag " << a << "\n" << usage;
      return 2;
    }
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  auto server = fedgate::testing::fakekube::FakeKubeServer::Start(opt);
  if (!server.ok()) {
    std::cerr << "fake-kube-apiserver: " << server.status().message() << "\n";
    return 1;
  }
  if (!ca_out.empty()) {
    std::ofstream(ca_out) << (*server)->ca_pem();
  }
  const std::string host = opt.listen.substr(0, opt.listen.rfind(':'));
  std::cout << "listening on https://" << host << ":" << (*server)->port() << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}
