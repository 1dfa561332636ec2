// A serving loop that links cliffguard: loads the bundles named on the command line,
// runs a BERT-base layer's GEMMs at a few token counts, and prints what hit, what
// missed, and the ranked miss report. With --metrics-port it also serves the
// runtime's counters at http://127.0.0.1:PORT/metrics for Prometheus to scrape.
//
//   serve [--metrics-port PORT] [--hold-seconds S] [BUNDLE.cgb ...]
//
// PORT 0 picks a free port (printed as "metrics: http://127.0.0.1:PORT/metrics");
// --hold-seconds keeps the endpoint up that long after serving (default 0).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cliffguard/runtime.h"

namespace {

// A minimal HTTP/1.0 endpoint on the loopback interface: GET /metrics answers the
// runtime's MetricsText, anything else 404. One connection at a time, closed after
// each answer.
class MetricsServer {
 public:
  explicit MetricsServer(const cliffguard::Runtime& rt) : rt_(rt) {}
  ~MetricsServer() {
    stop_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  // Binds 127.0.0.1:port (0: any free port); returns the port, or -1.
  int Start(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return -1;
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return -1;
    thread_ = std::thread([this] { Loop(); });
    return ntohs(addr.sin_port);
  }

 private:
  void Loop() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      char buf[2048];
      const ssize_t n = ::recv(c, buf, sizeof buf - 1, 0);
      const std::string request(buf, n > 0 ? size_t(n) : 0);
      std::string response;
      if (request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0) {
        const std::string body = rt_.MetricsText();
        response = "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      } else {
        response = "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      }
      for (size_t done = 0; done < response.size();) {
        const ssize_t w = ::send(c, response.data() + done, response.size() - done, MSG_NOSIGNAL);
        if (w <= 0) break;
        done += size_t(w);
      }
      ::close(c);
    }
  }

  const cliffguard::Runtime& rt_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace cliffguard;
  // The CPU libraries read their environment when they load: idle OpenMP and
  // OpenBLAS workers sleep, OpenBLAS runs the host's vector ISA (cliffguard/device.h).
  if (SetLibraryEnvironment()) ::execv("/proc/self/exe", argv);
  int metrics_port = -1;
  double hold_seconds = 0;
  std::vector<std::string> bundles;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--metrics-port" || arg == "--hold-seconds") && i + 1 < argc) {
      char* end = nullptr;
      const double v = std::strtod(argv[++i], &end);
      if (*end != '\0' || v < 0 || (arg == "--metrics-port" && (v > 65535 || v != int(v)))) {
        std::fprintf(stderr, "serve: %s %s: expected %s\n", arg.c_str(), argv[i],
                     arg == "--metrics-port" ? "a port in [0, 65535]" : "seconds >= 0");
        return 2;
      }
      (arg == "--metrics-port" ? metrics_port = int(v) : hold_seconds = v);
    } else {
      bundles.push_back(arg);
    }
  }
  RuntimeOptions options;  // CLIFFGUARD_MISS_REPORT=path also writes the report at exit
  auto rt = Runtime::Create(options);
  if (!rt.ok()) {
    std::fprintf(stderr, "serve: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  Runtime& runtime = **rt;
  MetricsServer metrics(runtime);
  if (metrics_port >= 0) {
    const int port = metrics.Start(metrics_port);
    if (port < 0) {
      std::fprintf(stderr, "serve: cannot listen on 127.0.0.1:%d: %s\n", metrics_port, std::strerror(errno));
      return 1;
    }
    std::printf("metrics: http://127.0.0.1:%d/metrics\n", port);
    std::fflush(stdout);
  }
  for (const std::string& path : bundles) {
    auto report = runtime.LoadBundleFile(path);
    if (!report.ok()) {  // a bad bundle is refused; serving goes on without it
      std::fprintf(stderr, "serve: %s\n", report.status().ToString().c_str());
      continue;
    }
    std::printf("loaded %s: %zu of %zu entries\n", path.c_str(), report->entries_loaded, report->entries_total);
  }
  const int64_t hidden = 768, ffn = 3072;
  for (int64_t tokens : {16, 128}) {
    // QKV/output projection, FFN up, FFN down: C[tokens x n] = A[tokens x k] * W[k x n].
    for (auto [n, k] : {std::pair{hidden, hidden}, std::pair{ffn, hidden}, std::pair{hidden, ffn}}) {
      std::vector<float> a(size_t(tokens * k), 0.5f), w(size_t(k * n), 0.25f), c(size_t(tokens * n));
      auto plan = runtime.PlanGemm(OpKey::Gemm(tokens, n, k));  // resolve once per shape
      if (!plan.ok()) {
        std::fprintf(stderr, "serve: %s\n", plan.status().ToString().c_str());
        return 1;
      }
      for (int step = 0; step < 10; ++step) {
        Status st = plan->Run(a.data(), k, w.data(), n, c.data(), n);
        if (!st.ok()) {
          std::fprintf(stderr, "serve: %s\n", st.ToString().c_str());
          return 1;
        }
      }
      std::printf("%-34s %s  c[0]=%g\n", plan->key().ToString().c_str(), plan->hit() ? "hit " : "miss",
                  double(c[0]));
    }
  }
  const MissReport report = runtime.GetMissReport();
  std::printf("\n%llu calls, %llu hits, %llu misses\n", (unsigned long long)report.calls,
              (unsigned long long)report.hits, (unsigned long long)report.misses);
  std::printf("%s\n", MissReportToJson(report).c_str());
  std::fflush(stdout);
  if (metrics_port >= 0 && hold_seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(hold_seconds));
  return 0;
}
