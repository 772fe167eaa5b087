// Helpers for the lib/dist tests.
#pragma once

#include <arpa/inet.h>   // htonl, ntohs
#include <netinet/in.h>  // sockaddr_in
#include <sys/socket.h>  // socket, bind, getsockname
#include <unistd.h>      // close

#include "tests/catch.h"

namespace fp8t::test {

// A TCP port on the loopback interface that was free a moment ago (for a TCP store).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace fp8t::test
