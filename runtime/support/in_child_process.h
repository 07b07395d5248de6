// Tests only: runs a body in a forked child process, for checks that need
// a process of their own (a write limit, dropped privileges, a SIGKILL).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include <fmt/format.h>

namespace kiln::process_testing {

// What `body` returned in the child (empty: success), or how the child died.
inline std::string inChildProcess(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    const std::string message = body();
    (void)!::write(fds[1], message.data(), message.size());
    ::_exit(message.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return fmt::format("the child died (wait status {:#x})", status);
  if (WEXITSTATUS(status) != 0 && message.empty()) return "the child failed without a message";
  return message;
}

}  // namespace kiln::process_testing
