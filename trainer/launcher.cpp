#include "trainer/launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm::trainer {

namespace {

volatile sig_atomic_t g_forward_signal = 0;
void on_signal(int sig) { g_forward_signal = sig; }

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(ErrorKind::Io, "cannot open a socket to find a free port: %s", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(ErrorKind::Io, "cannot find a free port: %s", std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + ::strsignal(WTERMSIG(status));
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::vector<std::string> strip_launcher_flags(int argc, const char* const* argv) {
  static const std::set<std::string> kFlags = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                                               "--nproc_per_node", "--node_rank", "--master_addr", "--master_port",
                                               "--num_gpus", "--num_accelerators", "--num_nodes", "--hostfile", "-H"};
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    std::string name = a.substr(0, a.find('='));
    if (i > 0 && kFlags.count(name)) {
      if (name == a) ++i;  // "--flag VALUE"
      continue;
    }
    out.push_back(a);
  }
  return out;
}

int hostfile_local_slots(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::Io, "--hostfile %s: cannot read it: %s", path.c_str(), std::strerror(errno));
  std::vector<std::pair<std::string, int>> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string host, slots;
    if (!(words >> host)) continue;  // blank or comment
    std::string rest;
    int n = 0;
    if (!(words >> slots) || slots.rfind("slots=", 0) != 0 || (words >> rest) ||
        std::from_chars(slots.data() + 6, slots.data() + slots.size(), n).ptr != slots.data() + slots.size() || n < 1)
      throw Error(ErrorKind::Usage, "--hostfile %s:%d: '%s' is not 'HOSTNAME slots=N' (DeepSpeed's hostfile format)", path.c_str(), number,
                  line.c_str());
    hosts.emplace_back(host, n);
  }
  if (hosts.empty()) throw Error(ErrorKind::Usage, "--hostfile %s lists no host", path.c_str());
  if (hosts.size() > 1)
    throw Error(ErrorKind::Usage, "--hostfile %s lists %zu hosts: pretrain_gpt starts ranks on this machine only (the deepspeed launcher "
                "would ssh into each) ---> HINT: run pretrain_gpt --nnodes %zu --node-rank R --master-addr %s on each host, or start the "
                "ranks with srun or mpirun", path.c_str(), hosts.size(), hosts.size(), hosts[0].first.c_str());
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  const std::string& host = hosts[0].first;
  if (host != "localhost" && host.rfind("127.", 0) != 0 && host != "::1" && host != name)
    throw Error(ErrorKind::Usage, "--hostfile %s names host '%s', not this machine ('%s') ---> HINT: run pretrain_gpt on that host",
                path.c_str(), host.c_str(), name);
  return hosts[0].second;
}

int launch_local_ranks(const LaunchPlan& plan, const std::vector<std::string>& child_argv) {
  const int world = plan.nproc_per_node * plan.nnodes;
  std::string addr = !plan.master_addr.empty() ? plan.master_addr
                     : std::getenv("MASTER_ADDR")  ? std::getenv("MASTER_ADDR")
                                                   : "127.0.0.1";
  int port = plan.master_port;
  if (port == 0 && std::getenv("MASTER_PORT")) port = std::atoi(std::getenv("MASTER_PORT"));
  if (port == 0) port = plan.nnodes == 1 ? free_port() : 29500;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string threads = std::to_string(std::max(1u, cores / static_cast<unsigned>(plan.nproc_per_node)));
  ZLM_LOG_INF("starting %d local ranks (world size %d, node %d of %d, rendezvous %s:%d)", plan.nproc_per_node, world,
              plan.node_rank, plan.nnodes, addr.c_str(), port);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<pid_t> pids;
  for (int local = 0; local < plan.nproc_per_node; ++local) {
    pid_t pid = ::fork();
    if (pid < 0) throw Error(ErrorKind::Io, "fork failed: %s", std::strerror(errno));
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      const int rank = plan.node_rank * plan.nproc_per_node + local;
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(plan.nproc_per_node).c_str(), 1);
      setenv("GROUP_RANK", std::to_string(plan.node_rank).c_str(), 1);
      setenv("MASTER_ADDR", addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("OMP_NUM_THREADS", threads.c_str(), 0);
      unsetenv("TORCHELASTIC_USE_AGENT_STORE");
      setenv("ZLM_LAUNCHER", "pretrain_gpt --nproc-per-node", 1);  // only names the launcher in the log
      std::vector<char*> cargv;
      for (const auto& s : child_argv) cargv.push_back(const_cast<char*>(s.c_str()));
      cargv.push_back(nullptr);
      ::execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "pretrain_gpt: cannot start rank %d: %s\n", rank, std::strerror(errno));
      _exit(127);
    }
    pids.push_back(pid);
  }

  // Supervise: the first failure stops everyone.
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  int result = 0;
  bool stopping = false;
  auto deadline = std::chrono::steady_clock::time_point::max();
  auto stop_all = [&](int sig) {
    for (size_t i = 0; i < pids.size(); ++i)
      if (!done[i]) ::kill(pids[i], sig);
  };
  while (remaining > 0) {
    if (g_forward_signal && !stopping) {
      ZLM_LOG_WRN("launcher got signal %d; stopping every rank", static_cast<int>(g_forward_signal));
      stop_all(g_forward_signal);
      result = 128 + g_forward_signal;
      stopping = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    }
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid) continue;
        done[i] = true;
        --remaining;
        const int rank = plan.node_rank * plan.nproc_per_node + static_cast<int>(i);
        if (exit_code(status) != 0 && !stopping) {
          ZLM_LOG_ERR("rank %d %s; stopping the other ranks", rank, describe_status(status).c_str());
          result = exit_code(status);
          stopping = true;
          stop_all(SIGTERM);
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (stopping && std::chrono::steady_clock::now() > deadline) {
      ZLM_LOG_ERR("ranks did not stop within 15 s of SIGTERM; killing them");
      stop_all(SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace zlm::trainer
