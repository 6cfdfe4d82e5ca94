#include "trainer/config/launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm::trainer {

namespace {

volatile sig_atomic_t g_forward_signal = 0;
void on_signal(int sig) { g_forward_signal = sig; }

// The rendezvous store's listening socket, opened here (port 0: one the kernel
// picks) and handed to rank 0 (ZLM_STORE_LISTEN_FD), so that no other job can
// take the port between its choice and rank 0's start, and a port in use is
// said before any rank starts. IPv6 with IPv4 mapped where the host has it.
int open_store_socket(int port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  int err = 0;
  if (fd >= 0) {
    const int no = 0, yes = 1;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0) return fd;
    err = errno;
    ::close(fd);
    if (err == EADDRINUSE) errno = err;
  }
  if (err != EADDRINUSE) {  // no IPv6 here: IPv4 alone
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw Error(ErrorKind::Io, "cannot open the rendezvous socket: %s", std::strerror(errno));
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in a4{};
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a4), sizeof a4) == 0) return fd;
    err = errno;
    ::close(fd);
  }
  if (err == EADDRINUSE)
    throw Error(ErrorKind::Usage, "port %d is in use (another job?) ---> HINT: give this job another --master-port (or MASTER_PORT), or "
                "leave it out on one node to use a free one", port);
  throw Error(ErrorKind::Io, "cannot open the rendezvous socket on port %d: %s", port, std::strerror(err));
}

int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw Error(ErrorKind::Io, "cannot read the rendezvous socket's port: %s", std::strerror(errno));
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
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

const std::vector<std::string>& launcher_flag_names() {
  static const std::vector<std::string> names = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                                                 "--nproc_per_node", "--node_rank", "--master_addr", "--master_port",
                                                 "--num_gpus", "--num_accelerators", "--num_nodes", "--hostfile", "-H", "--no_ssh"};
  return names;
}

std::vector<std::string> strip_launcher_flags(int argc, const char* const* argv) {
  const auto& names = launcher_flag_names();
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string name = a.substr(0, a.find('='));
    if (i > 0 && std::find(names.begin(), names.end(), name) != names.end()) {
      if (name == a && name != "--no_ssh") ++i;  // "--flag VALUE"
      continue;
    }
    out.push_back(a);
  }
  return out;
}

std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::Io, "--hostfile %s: cannot read it: %s", path.c_str(), std::strerror(errno));
  static const std::regex kLine(R"(^(\S+)\s+slots=(\d+))");
  std::vector<Host> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t first = line.find_first_not_of(" \t\r\n\v\f"), last = line.find_last_not_of(" \t\r\n\v\f");
    const std::string stripped = first == std::string::npos ? "" : line.substr(first, last - first + 1);
    if (stripped.empty() || stripped[0] == '#') continue;
    std::smatch m;
    if (!std::regex_search(stripped, m, kLine) || m[2].length() > 6)
      throw Error(ErrorKind::Usage, "--hostfile %s:%d: '%s' is not 'HOSTNAME slots=N' (DeepSpeed's hostfile format)", path.c_str(), number,
                  stripped.c_str());
    for (const auto& h : hosts)
      if (h.name == m[1].str()) throw Error(ErrorKind::Usage, "--hostfile %s:%d: host %s is listed twice", path.c_str(), number, h.name.c_str());
    hosts.push_back({m[1].str(), std::stoi(m[2].str())});
  }
  return hosts;
}

namespace {

// The most ranks this machine can hold: its cores x 4 (at least 64), and
// ~256 MiB of available memory for each (a rank with LibTorch loaded).
int most_local_ranks() {
  const long cores = std::max(1L, static_cast<long>(std::thread::hardware_concurrency()));
  long most = std::max(64L, 4 * cores);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long kib = 0;
  while (meminfo >> key >> kib)
    if (key == "MemAvailable:") most = std::min(most, std::max(1L, kib / (256 * 1024)));
  return static_cast<int>(most);
}

// The deepspeed launcher's hostfile into the plan (see launch_plan).
void apply_hostfile(const TrainArgs& a, LaunchPlan& plan) {
  std::error_code ec;
  if (!std::filesystem::exists(a.hostfile, ec)) {
    ZLM_LOG_WRN("--hostfile %s does not exist: proceeding with this machine only (as the deepspeed launcher does)", a.hostfile.c_str());
    return;
  }
  std::vector<Host> hosts = read_hostfile(a.hostfile);
  if (hosts.empty()) throw Error(ErrorKind::Usage, "--hostfile %s lists no host", a.hostfile.c_str());
  if (a.given.count("--nnodes")) {
    if (a.nnodes > static_cast<int64_t>(hosts.size()))
      throw Error(ErrorKind::Usage, "--num_nodes %ld: --hostfile %s lists %zu hosts", (long)a.nnodes, a.hostfile.c_str(), hosts.size());
    hosts.resize(static_cast<size_t>(a.nnodes));
  }
  plan.nnodes = static_cast<int>(hosts.size());
  if (hosts.size() > 1) {
    if (!a.no_ssh || !a.given.count("--node-rank"))
      throw Error(ErrorKind::Usage, "--hostfile %s: %zu hosts: pretrain_gpt starts ranks on this machine only (the deepspeed launcher would "
                  "ssh into each) ---> HINT: run the same command on each host with --no_ssh --node_rank R (its index in the hostfile), "
                  "as DeepSpeed's no-ssh mode, or start the ranks with srun or mpirun", a.hostfile.c_str(), hosts.size());
    if (plan.master_addr.empty()) plan.master_addr = hosts[0].name;
  }
  if (!a.given.count("--nproc-per-node")) plan.nproc_per_node = hosts[static_cast<size_t>(plan.node_rank)].slots;
  if (plan.nproc_per_node < 1)
    throw Error(ErrorKind::Usage, "--hostfile %s: host %s has no slots", a.hostfile.c_str(), hosts[static_cast<size_t>(plan.node_rank)].name.c_str());
}

}  // namespace

LaunchPlan launch_plan(const TrainArgs& a) {
  LaunchPlan plan{static_cast<int>(a.nproc_per_node), static_cast<int>(a.nnodes), static_cast<int>(a.node_rank), a.master_addr,
                  static_cast<int>(a.master_port)};
  if (!a.hostfile.empty()) apply_hostfile(a, plan);
  if (plan.nproc_per_node > 0 && plan.nproc_per_node > most_local_ranks())
    throw Error(ErrorKind::Usage, "--nproc-per-node %d: this machine holds at most %d ranks (%u cores x 4, at least 64, and ~256 MiB of "
                "available memory each)", plan.nproc_per_node, most_local_ranks(), std::thread::hardware_concurrency());
  return plan;
}

namespace {

struct Rendezvous {
  std::string addr;
  int port = 0;
  int listen_fd = -1;  // node 0: the store's socket, for rank 0
  std::string job_id;  // for the ranks to recognise their own store (DistEnv::job_id)
};

Rendezvous rendezvous(const LaunchPlan& plan) {
  Rendezvous r;
  r.addr = !plan.master_addr.empty() ? plan.master_addr : std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  r.port = plan.master_port;
  if (r.port == 0 && std::getenv("MASTER_PORT")) r.port = std::atoi(std::getenv("MASTER_PORT"));
  if (r.port == 0 && plan.nnodes > 1) r.port = 29500;
  if (plan.node_rank == 0) {  // this node holds the store
    r.listen_fd = open_store_socket(r.port);
    r.port = bound_port(r.listen_fd);
    if (::listen(r.listen_fd, 2048) != 0) throw Error(ErrorKind::Io, "cannot listen on port %d: %s", r.port, std::strerror(errno));
  }
  // One node: this launcher is the job. Several: each node's launcher is its
  // own process, so only an id they share (ZLM_JOB_ID, Slurm's) names the job.
  if (const char* id = std::getenv("ZLM_JOB_ID"); id && *id) r.job_id = id;
  else if (plan.nnodes == 1) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    r.job_id = std::string(host) + ":" + std::to_string(::getpid()) + ":" + std::to_string(::time(nullptr));
  }
  return r;
}

// A child of this process that becomes rank `local` of this node: its
// environment, then the program again with the launcher flags left out.
pid_t start_rank(const LaunchPlan& plan, int local, const Rendezvous& rv, const std::string& threads, const std::vector<std::string>& child_argv) {
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(ErrorKind::Io, "fork failed: %s", std::strerror(errno));
  if (pid > 0) return pid;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  const int world = plan.nproc_per_node * plan.nnodes, rank = plan.node_rank * plan.nproc_per_node + local;
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(plan.nproc_per_node).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(plan.node_rank).c_str(), 1);
  setenv("MASTER_ADDR", rv.addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(rv.port).c_str(), 1);
  if (rv.listen_fd >= 0 && rank == 0) setenv("ZLM_STORE_LISTEN_FD", std::to_string(rv.listen_fd).c_str(), 1);
  else if (rv.listen_fd >= 0) ::close(rv.listen_fd);  // only rank 0 accepts
  setenv("OMP_NUM_THREADS", threads.c_str(), 0);
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  setenv("ZLM_LAUNCHER", "pretrain_gpt --nproc-per-node", 1);  // only names the launcher in the log
  if (!rv.job_id.empty()) setenv("ZLM_JOB_ID", rv.job_id.c_str(), 1);
  std::vector<char*> cargv;
  for (const auto& s : child_argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  ::execv("/proc/self/exe", cargv.data());
  std::fprintf(stderr, "pretrain_gpt: cannot start rank %d: %s\n", rank, std::strerror(errno));
  _exit(127);
}

// Waits for every rank; the first failure (or a signal to the launcher) stops the others.
class Supervisor {
 public:
  Supervisor(const LaunchPlan& plan, std::vector<pid_t> pids) : plan_(plan), pids_(std::move(pids)), done_(pids_.size(), false) {}
  int run() {
    if (pids_.empty() && g_forward_signal) return 128 + g_forward_signal;  // signalled before any rank started
    size_t remaining = pids_.size();
    while (remaining > 0) {
      if (g_forward_signal && !stopping_) {
        ZLM_LOG_WRN("launcher got signal %d; stopping every rank", static_cast<int>(g_forward_signal));
        stop(g_forward_signal, 128 + g_forward_signal);
      }
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        remaining -= reap(pid, status);
        continue;
      }
      if (pid < 0 && errno != EINTR) break;
      if (stopping_ && std::chrono::steady_clock::now() > deadline_) {
        ZLM_LOG_ERR("ranks did not stop within 15 s of SIGTERM; killing them");
        signal_all(SIGKILL);
        deadline_ = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return result_;
  }

 private:
  size_t reap(pid_t pid, int status) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] != pid) continue;
      done_[i] = true;
      if (exit_code(status) != 0 && !stopping_) {
        ZLM_LOG_ERR("rank %d %s; stopping the other ranks", plan_.node_rank * plan_.nproc_per_node + static_cast<int>(i),
                    describe_status(status).c_str());
        stop(SIGTERM, exit_code(status));
      }
      return 1;
    }
    return 0;
  }
  void stop(int sig, int result) {
    signal_all(sig);
    result_ = result;
    stopping_ = true;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  }
  void signal_all(int sig) {
    for (size_t i = 0; i < pids_.size(); ++i)
      if (!done_[i]) ::kill(pids_[i], sig);
  }

  const LaunchPlan& plan_;
  std::vector<pid_t> pids_;
  std::vector<bool> done_;
  int result_ = 0;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace

int launch_local_ranks(const LaunchPlan& plan, const std::vector<std::string>& child_argv) {
  const Rendezvous rv = rendezvous(plan);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = std::to_string(std::max(1u, cores / static_cast<unsigned>(plan.nproc_per_node)));
  ZLM_LOG_INF("starting %d local ranks (world size %d, node %d of %d, rendezvous %s:%d)", plan.nproc_per_node,
              plan.nproc_per_node * plan.nnodes, plan.node_rank, plan.nnodes, rv.addr.c_str(), rv.port);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::vector<pid_t> pids;
  for (int local = 0; local < plan.nproc_per_node && !g_forward_signal; ++local)  // a signal stops the start-up too
    pids.push_back(start_rank(plan, local, rv, threads, child_argv));
  if (rv.listen_fd >= 0) ::close(rv.listen_fd);  // rank 0 has it: the port is freed when rank 0 ends
  return Supervisor(plan, std::move(pids)).run();
}

}  // namespace zlm::trainer
