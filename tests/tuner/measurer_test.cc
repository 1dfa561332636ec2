// Measurer: correctness gate, crash and hang isolation, timing sanity. Uses planted
// kernel variants (defined here, passed explicitly) so that no real kernel has to
// misbehave.
#include "cliffguard/tuner/measurer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cpu_wait.h"
#include "harness.h"
#include "sanitizers.h"

namespace cliffguard::tuner::testing {
namespace {

// The whitespace-separated integers a test's child process wrote to `path`, which
// is then removed (empty when it cannot be read).
std::vector<long> TakeNumbers(const std::string& path) {
  std::vector<long> out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    for (long v; std::fscanf(f, "%ld", &v) == 1;) out.push_back(v);
    std::fclose(f);
  }
  std::remove(path.c_str());
  return out;
}

constexpr int32_t kBlockValues[] = {4, 8, 16, 32};
constexpr int32_t kUnrollValues[] = {1, 2, 4};
constexpr ParamSpec kPlantedParams[] = {
    {"blk", kBlockValues, 8, "rows of C per block (planted test kernel)"},
    {"unroll", kUnrollValues, 1, "k unroll (planted test kernel; no effect)"},
};
// The crashing and hanging variants have one point each, so a tuner test can
// cover the whole planted space without spending many timeouts.
constexpr int32_t kOneBlock[] = {8};
constexpr ParamSpec kOnePointParams[] = {{"blk", kOneBlock, 8, "rows of C per block (planted test kernel)"}};

// A correct, simple GEMM: C = op(A) op(B), row-major, beta = 0.
Status PlantedGemm(const KernelVariant&, const GemmArgs& g, const ParamValues& p) {
  const float* a = static_cast<const float*>(g.a);
  const float* b = static_cast<const float*>(g.b);
  float* c = static_cast<float*>(g.c);
  const int64_t blk = p[0];
  for (int64_t i0 = 0; i0 < g.m; i0 += blk)
    for (int64_t i = i0; i < std::min(g.m, i0 + blk); ++i) {
      for (int64_t j = 0; j < g.n; ++j) c[i * g.ldc + j] = 0;
      for (int64_t q = 0; q < g.k; ++q) {
        const float av = g.trans_a ? a[q * g.lda + i] : a[i * g.lda + q];
        for (int64_t j = 0; j < g.n; ++j) c[i * g.ldc + j] += av * (g.trans_b ? b[j * g.ldb + q] : b[q * g.ldb + j]);
      }
    }
  return Status::Ok();
}

Status WrongGemm(const KernelVariant& v, const GemmArgs& g, const ParamValues& p) {
  CG_RETURN_IF_ERROR(PlantedGemm(v, g, p));
  static_cast<float*>(g.c)[(g.m - 1) * g.ldc + g.n - 1] += 0.5f;  // one wrong element
  return Status::Ok();
}

Status CrashGemm(const KernelVariant&, const GemmArgs&, const ParamValues&) {
  std::raise(SIGSEGV);
  return Status::Ok();
}

Status HangGemm(const KernelVariant&, const GemmArgs&, const ParamValues&) {
  volatile bool forever = true;
  while (forever) {
  }
  return Status::Ok();
}

// Appends its blk to the file at g_call_log on every call: the order in which a
// worker ran the candidates.
const char* g_call_log = nullptr;
Status LoggedGemm(const KernelVariant& v, const GemmArgs& g, const ParamValues& p) {
  if (FILE* f = std::fopen(g_call_log, "a")) {
    std::fprintf(f, "%d\n", int(p[0]));
    std::fclose(f);
  }
  return PlantedGemm(v, g, p);
}
const KernelVariant kLogged = {"test_f32_gemm_logged__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kPlantedParams, nullptr, nullptr, nullptr, {.gemm = LoggedGemm}, {.gemm = {1, 1}}};

// The fast one is faster only because it runs the correct kernel; the planted bad
// variants would "win" if their time counted (they do no work at all or crash).
const KernelVariant kPlanted[] = {
    {"test_f32_gemm_good__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kPlantedParams, nullptr, nullptr, nullptr, {.gemm = PlantedGemm}, {.gemm = {1, 1}}},
    {"test_f32_gemm_wrong__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kPlantedParams, nullptr, nullptr, nullptr, {.gemm = WrongGemm}, {.gemm = {1, 1}}},
    {"test_f32_gemm_crash__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kOnePointParams, nullptr, nullptr, nullptr, {.gemm = CrashGemm}, {.gemm = {1, 1}}},
    {"test_f32_gemm_hang__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kOnePointParams, nullptr, nullptr, nullptr, {.gemm = HangGemm}, {.gemm = {1, 1}}},
};

}  // namespace

// Shared with tuner_test.cc (same test binary).
std::vector<const KernelVariant*> PlantedVariants() {
  std::vector<const KernelVariant*> v;
  for (const auto& k : kPlanted) v.push_back(&k);
  return v;
}

MeasureOptions FastMeasureOptions() {
  MeasureOptions o;
  o.min_time_ms = 1;
  o.warmup_ms = 0.2;
  o.timeout_s = 1.5;
  o.rotate_bytes = 1 << 20;
  return o;
}

namespace {

Schedule Sched(int variant, int32_t blk = 8, int32_t unroll = 1) {
  Schedule s;
  s.variant = &kPlanted[variant];
  s.params[0] = blk;
  if (kPlanted[variant].params.size() > 1) s.params[1] = unroll;
  return s;
}

TEST(MeasurerTest, GoodWrongCrashHangBecomeRecordsAndMeasuringGoesOn) {
  SandboxMeasurer m(HostCpuDevice(1), FastMeasureOptions());
  const OpKey key = OpKey::Gemm(24, 40, 16);
  std::vector<Schedule> batch = {Sched(0, 4), Sched(1), Sched(2), Sched(0, 16), Sched(3), Sched(0, 32, 4)};
  std::vector<size_t> streamed;
  auto res = m.Measure(key, batch, [&](size_t i, const MeasureResult&) { streamed.push_back(i); });
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->size(), batch.size());
  EXPECT_EQ(streamed.size(), batch.size());
  for (size_t i : {0, 3, 5}) {
    EXPECT_TRUE((*res)[i].ok) << i << ": " << (*res)[i].error;
    EXPECT_GT((*res)[i].median_us, 0);
    EXPECT_EQ((*res)[i].schedule, batch[i]);
  }
  EXPECT_FALSE((*res)[1].ok);
  EXPECT_NE((*res)[1].error.find("wrong result: max rel error"), std::string::npos) << (*res)[1].error;
  EXPECT_FALSE((*res)[2].ok);
#if defined(CG_TEST_ASAN)
  // AddressSanitizer catches the signal, reports and exits the worker with status 1.
  EXPECT_EQ((*res)[2].error.rfind("crashed", 0), 0u) << (*res)[2].error;
#else
  EXPECT_NE((*res)[2].error.find("SIGSEGV"), std::string::npos) << (*res)[2].error;
#endif
  EXPECT_FALSE((*res)[4].ok);
  EXPECT_NE((*res)[4].error.find("timeout"), std::string::npos) << (*res)[4].error;
}

TEST(MeasurerTest, TransposesAndSampledCheck) {
  MeasureOptions o = FastMeasureOptions();
  o.full_check_elements = 16;  // forces the sampled check
  o.max_checked = 64;
  SandboxMeasurer m(HostCpuDevice(1), o);
  for (auto [ta, tb] : {std::pair{false, true}, std::pair{true, false}, std::pair{true, true}}) {
    const OpKey key = OpKey::Gemm(9, 33, 7, ta, tb);
    std::vector<Schedule> batch = {Sched(0), Sched(1)};
    auto res = m.Measure(key, batch);
    ASSERT_TRUE(res.ok());
    EXPECT_TRUE((*res)[0].ok) << key.ToString() << ": " << (*res)[0].error;
    EXPECT_FALSE((*res)[1].ok) << key.ToString();  // the corner element is always checked
  }
}

TEST(MeasurerTest, InvalidScheduleIsAnErrorRecordWithoutRunning) {
  SandboxMeasurer m(HostCpuDevice(1), FastMeasureOptions());
  Schedule bad = Sched(0, 5);  // 5 is not an allowed blk value
  auto res = m.Measure(OpKey::Gemm(8, 8, 8), std::vector<Schedule>{bad});
  ASSERT_TRUE(res.ok());
  EXPECT_FALSE((*res)[0].ok);
  EXPECT_NE((*res)[0].error.find("invalid schedule"), std::string::npos) << (*res)[0].error;
}

TEST(MeasurerTest, InterleavedRemeasureAndDefaultSchedule) {
  SandboxMeasurer m(HostCpuDevice(1), FastMeasureOptions());
  const OpKey key = OpKey::Gemm(16, 32, 16);
  std::vector<Schedule> batch = {Sched(0, 4), Sched(0, 8), Sched(1)};
  auto res = m.MeasureInterleaved(key, batch);
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE((*res)[0].ok);
  EXPECT_TRUE((*res)[1].ok);
  EXPECT_FALSE((*res)[2].ok);
  EXPECT_TRUE((*res)[2].round_us.empty());
  for (int i : {0, 1}) EXPECT_EQ((*res)[i].round_us.size(), size_t(FastMeasureOptions().interleave_rounds));
  // One window for the rounds of every candidate: the same cpu_wait; none for an error.
  const bool proc = ReadCpuCounters().ok;
  EXPECT_EQ((*res)[0].cpu_wait, (*res)[1].cpu_wait);
  if (proc) EXPECT_TRUE((*res)[0].cpu_wait >= 0 && (*res)[0].cpu_wait <= 1) << (*res)[0].cpu_wait;
  EXPECT_EQ((*res)[2].cpu_wait, -1);
  auto def = DefaultSchedule(key, m.device());
  if (def.ok()) {
    auto d = m.Measure(key, std::vector<Schedule>{*def});
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE((*d)[0].ok) << (*d)[0].error;
    if (proc) EXPECT_TRUE((*d)[0].cpu_wait >= 0 && (*d)[0].cpu_wait <= 1) << (*d)[0].cpu_wait;
  }
}

// cpu_wait: the measuring thread's run-queue wait over its running and runnable time,
// plus the steal over the window's CPU time; at most 1; -1 without both readings.
TEST(MeasurerTest, CpuWaitIsTheThreadsQueuedShareAndTheStealShare) {
  const auto at = [](double run_ms, double wait_ms, double steal_s) {
    CpuCounters c;
    c.run_ns = run_ms * 1e6;
    c.wait_ns = wait_ms * 1e6;
    c.steal_s = steal_s;
    c.ok = true;
    return c;
  };
  const CpuCounters t0 = at(1000, 50, 10);
  EXPECT_DOUBLE_EQ(CpuWaitShare(t0, at(1100, 50, 10), 0.1, 2), 0);        // quiet
  EXPECT_DOUBLE_EQ(CpuWaitShare(t0, at(1075, 75, 10), 0.1, 2), 0.25);     // waited 25 of 100 ms
  EXPECT_NEAR(CpuWaitShare(t0, at(1100, 50, 10.05), 0.1, 2), 0.25, 1e-12);  // 50 ms stolen of 2 x 100 ms
  EXPECT_NEAR(CpuWaitShare(t0, at(1075, 75, 10.05), 0.1, 2), 0.5, 1e-12);  // both
  EXPECT_DOUBLE_EQ(CpuWaitShare(t0, at(1010, 140, 10.2), 0.1, 1), 1);     // capped
  EXPECT_DOUBLE_EQ(CpuWaitShare(t0, t0, 0.1, 2), 0);                      // slept the whole window
  CpuCounters unread = t0;
  unread.ok = false;
  EXPECT_EQ(CpuWaitShare(unread, t0, 0.1, 2), -1);
  EXPECT_EQ(CpuWaitShare(t0, unread, 0.1, 2), -1);
  EXPECT_EQ(CpuWaitShare(t0, t0, 0, 2), -1);
  // This thread, on Linux: read from /proc, and a window that ran is in [0, 1].
  const CpuCounters now = ReadCpuCounters();
  if (!now.ok) GTEST_SKIP() << "/proc/thread-self/schedstat or /proc/stat is not readable here";
  const CpuWaitMeter window;
  volatile double x = 0;
  for (int i = 0; i < 1000000; ++i) x = x + 1;
  const double share = window.Share();
  EXPECT_TRUE(share >= 0 && share <= 1) << share;
}

// Interleaved: per round each candidate in turn (the r-th first in round r) makes one
// untimed call and then its run of timed calls; each result carries its per-round
// mean call times, their median as its time and their half range as its spread.
TEST(MeasurerTest, InterleavedRoundsRunEachCandidateInTurn) {
  const std::string log = fmt::format("/tmp/cg_calls_{}.txt", ::getpid());
  std::remove(log.c_str());
  g_call_log = log.c_str();
  MeasureOptions o = FastMeasureOptions();
  o.min_time_ms = 0;  // each round: exactly per-round-calls calls of each
  o.interleave_rounds = 5;
  o.min_repeats = 15;  // 3 calls per round
  SandboxMeasurer m(HostCpuDevice(1), o);
  const OpKey key = OpKey::Gemm(8, 16, 8);
  Schedule a, b;
  a.variant = b.variant = &kLogged;
  a.params = b.params = {4, 1};
  b.params[0] = 16;
  auto res = m.MeasureInterleaved(key, std::vector<Schedule>{a, b});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  for (const MeasureResult& r : *res) {
    ASSERT_TRUE(r.ok) << r.error;
    ASSERT_EQ(r.round_us.size(), 5u);
    const auto [lo, hi] = std::minmax_element(r.round_us.begin(), r.round_us.end());
    EXPECT_DOUBLE_EQ(r.spread_us, 0.5 * (*hi - *lo));
    std::vector<double> sorted = r.round_us;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_DOUBLE_EQ(r.median_us, sorted[2]) << "the median of the rounds";
  }
  const std::vector<long> calls = TakeNumbers(log);
  ASSERT_GE(calls.size(), 40u);  // check and warm-up calls, then 5 rounds x 2 x (1 untimed + 3 timed)
  const std::vector<long> rounds(calls.end() - 40, calls.end());
  for (size_t i = 0; i < rounds.size(); ++i) {
    const size_t round = i / 8, first = round % 2, turn = (i % 8) / 4;
    EXPECT_EQ(rounds[i], (first + turn) % 2 ? 16 : 4) << "call " << i % 8 << " of round " << round;
  }
}

// Spawned workers (a new process, the jobs on stdin: safe with a GPU context)
// measure and check like forked ones.
TEST(MeasurerTest, SpawnedWorkersMeasureAndCheckLikeForkedOnes) {
  MeasureOptions o = FastMeasureOptions();
  o.worker_command = {CG_CLI_PATH, "measure-worker"};
  const DeviceInfo device = HostCpuDevice(1);
  SandboxMeasurer m(device, o);
  const OpKey key = OpKey::Gemm(13, 40, 9, false, true);
  std::vector<Schedule> batch;
  for (const auto& v : AllKernelVariants())
    if (VariantSupports(v, key, device).ok()) batch.push_back(VariantDefaultSchedule(v, key, device));
  ASSERT_GE(batch.size(), 2u);
  Schedule bad = batch[0];
  bad.params[0] = 3;  // not an allowed value: an error record, never sent
  batch.push_back(bad);
  auto res = m.Measure(key, batch);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  for (size_t i = 0; i + 1 < batch.size(); ++i) {
    EXPECT_TRUE((*res)[i].ok) << batch[i].ToString() << ": " << (*res)[i].error;
    EXPECT_GT((*res)[i].median_us, 0);
  }
  EXPECT_FALSE(res->back().ok);
  auto re = m.MeasureInterleaved(key, std::span(batch).first(2));
  ASSERT_TRUE(re.ok());
  EXPECT_TRUE((*re)[0].ok && (*re)[1].ok);
  EXPECT_EQ((*re)[0].round_us.size(), size_t(o.interleave_rounds));
  if (ReadCpuCounters().ok)
    for (const MeasureResult& r : {(*res)[0], (*re)[0]}) EXPECT_TRUE(r.cpu_wait >= 0 && r.cpu_wait <= 1) << r.cpu_wait;
}

// One spawned worker serves every batch and key (its start-up, a CUDA context and
// cuBLAS on a GPU, is paid once) until a candidate kills it; the next batch starts a
// new one. The worker here is a script that speaks the protocol: it records its pid
// per job, answers candidate 0 with 5 us, and on its `die_at`-th job kills itself
// after starting the candidate.
TEST(MeasurerTest, ASpawnedWorkerServesManyBatchesAndIsReplacedAfterACrash) {
  const std::string pids = ::testing::TempDir() + "cg_worker_pids.txt";
  std::remove(pids.c_str());
  const std::string script = fmt::format(
      "n=0; while IFS= read -r job; do n=$((n+1)); echo $$ >> '{}'; echo 'S 0';"
      " if [ $n = 2 ]; then kill -9 $$; fi; echo 'R 0 1 5 0 1 5'; echo E; done",
      pids);
  MeasureOptions o = FastMeasureOptions();
  o.worker_command = {"/bin/sh", "-c", script};
  const DeviceInfo device = HostCpuDevice(1);
  SandboxMeasurer m(device, o);
  std::vector<std::string> errors;
  for (const OpKey& key : {OpKey::Gemm(8, 16, 8), OpKey::Gemm(8, 24, 8), OpKey::Gemm(8, 32, 8)}) {
    const std::vector<Schedule> one = {VariantDefaultSchedule(*FindKernelVariant("cpu_f32_gemm_4x4__scalar"), key, device)};
    auto res = m.Measure(key, one);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    errors.push_back((*res)[0].ok ? "" : (*res)[0].error);
    if ((*res)[0].ok) EXPECT_DOUBLE_EQ((*res)[0].median_us, 5.0);
  }
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("crashed: worker killed by signal 9"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[2], "");
  const std::vector<long> seen = TakeNumbers(pids);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], seen[1]) << "the second batch started a new worker";
  EXPECT_NE(seen[2], seen[1]) << "the crashed worker was not replaced";
}

TEST(MeasurerTest, ASpawnedWorkerRefusesAJobItCannotRead) {
  const std::string cmd = fmt::format("echo '{{\"device\": 3}}' | '{}' measure-worker 2>&1", CG_CLI_PATH);
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 5) << out;
  EXPECT_NE(out.find("job.device must be a string"), std::string::npos) << out;
}

// The harnesses' inputs: uniform in [-1, 1) (ten bins within 3% of a tenth each,
// mean near 0), the same for the same stream, different for another stream.
TEST(MeasurerTest, HarnessInputsAreUniformAndDeterministicPerStream) {
  const OpKey key = OpKey::Gemm(64, 64, 64);
  std::vector<float> a(200000), again(a.size()), b(a.size());
  FillUniform(OperandStream(42, key, 0), a);
  FillUniform(OperandStream(42, key, 0), again);
  FillUniform(OperandStream(42, key, 1), b);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, b);
  std::array<int, 10> bins{};
  double sum = 0;
  for (float v : a) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    ++bins[size_t((v + 1.0f) * 5.0f)];
    sum += v;
  }
  for (int c : bins) EXPECT_NEAR(c, a.size() / 10.0, a.size() * 0.003) << "a bin of width 0.2";
  EXPECT_NEAR(sum / double(a.size()), 0.0, 0.01);
  // Not the same sequence, nor one shifted by a few places (correlated operands hide
  // a kernel that reads one where it should read the other).
  for (int shift = -3; shift <= 3; ++shift) {
    size_t same = 0;
    for (size_t i = 3; i + 3 < a.size(); ++i) same += a[i] == b[size_t(int64_t(i) + shift)];
    EXPECT_LT(same, a.size() / 1000) << "operand 1 repeats operand 0 shifted by " << shift;
  }
}

// Constant weights before a timed call: packed once per schedule (never inside the
// timed call), then evicted from the caches, which leaves every byte as it was.
TEST(MeasurerTest, ColdConstantWeightsArePackedOnceAndKeptIntact) {
  OpKey key = OpKey::Gemm(24, 40, 36, false, true);
  key.constant_weights = true;
  const DeviceInfo host = HostCpuDevice(1);
  auto sched = DefaultSchedule(key, host);
  ASSERT_TRUE(sched.ok()) << sched.status().ToString();
  if (!sched->variant->pack_weights) GTEST_SKIP() << sched->variant->name << " reads the weights as stored";
  std::vector<float> b(size_t(key.n() * key.k()));
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 97) - 48.0f;
  const std::vector<float> b0 = b;
  PackedWeightsCache cache;
  ASSERT_TRUE(cache.Cool(*sched, key, b.data(), key.k(), b.size() * sizeof(float)).ok());
  auto first = cache.Call(*sched, key, b.data(), key.k());
  ASSERT_TRUE(first.ok() && first->packed);
  EXPECT_EQ(first->stored, b.data());
  const size_t bytes = sched->variant->packed_weights_bytes(*sched->variant, key, sched->params);
  std::vector<char> fresh(bytes + 64);
  void* aligned = fresh.data() + (64 - reinterpret_cast<uintptr_t>(fresh.data()) % 64) % 64;
  ASSERT_TRUE(sched->variant->pack_weights(*sched->variant, key, sched->params, b.data(), key.k(), aligned).ok());
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(cache.Cool(*sched, key, b.data(), key.k(), b.size() * sizeof(float)).ok());
    auto again = cache.Call(*sched, key, b.data(), key.k());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->packed, first->packed) << "packed again";
    EXPECT_EQ(std::memcmp(again->packed, aligned, bytes), 0) << "the packed weights changed";
  }
  EXPECT_EQ(b, b0);
}

// Schedules timed together get copies of what their calls read, handed out in turn
// (serving's conditions: a call's weights displaced by other weights' reads), each
// schedule's copies covering the cover on their own; each copy holds exactly the
// packed (or stored) weights; outside a rotation a call reads the one copy.
TEST(MeasurerTest, RotatedWeightsAreExactCopiesHandedOutInTurn) {
  OpKey key = OpKey::Gemm(4, 40, 36, false, true);
  key.constant_weights = true;
  const DeviceInfo host = HostCpuDevice(1);
  auto packs = DefaultSchedule(key, host);
  ASSERT_TRUE(packs.ok()) << packs.status().ToString();
  if (!packs->variant->pack_weights) GTEST_SKIP() << packs->variant->name << " reads the weights as stored";
  const KernelVariant* in_place = nullptr;
  for (const KernelVariant& v : AllKernelVariants())
    if (!v.pack_weights && VariantSupports(v, key, host).ok()) in_place = &v;
  ASSERT_NE(in_place, nullptr) << "no variant reads the weights as stored";
  const Schedule stored = VariantDefaultSchedule(*in_place, key, host);
  std::vector<float> b(size_t(key.n() * key.k()));
  FillUniform(7, b);
  const std::vector<float> b0 = b;
  const size_t b_bytes = b.size() * sizeof(float);
  const size_t packed_bytes = packs->variant->packed_weights_bytes(*packs->variant, key, packs->params);
  PackedWeightsCache cache;
  auto first = cache.Call(*packs, key, b.data(), key.k());
  ASSERT_TRUE(first.ok() && first->packed);
  const void* one = first->packed;
  const std::vector<char> packed(static_cast<const char*>(one), static_cast<const char*>(one) + packed_bytes);

  const int64_t cover = int64_t(8 * (packed_bytes + b_bytes));
  const std::vector<Schedule> batch = {*packs, stored};
  ASSERT_TRUE(cache.Rotate(batch, key, b.data(), key.k(), b_bytes, cover).ok());
  for (const auto& [s, want] : {std::pair{*packs, std::span<const char>(packed)},
                                std::pair{stored, std::span<const char>(reinterpret_cast<const char*>(b0.data()), b_bytes)}}) {
    std::vector<const void*> seen;
    for (int call = 0; call < 64; ++call) {
      auto both = cache.Call(s, key, b.data(), key.k());
      ASSERT_TRUE(both.ok());
      const bool packs_them = s.variant->pack_weights != nullptr;
      EXPECT_EQ(both->packed == nullptr, !packs_them) << s.ToString();
      if (packs_them) EXPECT_EQ(both->stored, b.data()) << "a packing variant is given the weights as stored";
      const void* w = packs_them ? both->packed : static_cast<const void*>(both->stored);
      if (call > 0 && w == seen[0]) break;
      ASSERT_EQ(std::find(seen.begin(), seen.end(), w), seen.end()) << "a copy handed out twice in one turn";
      seen.push_back(w);
      EXPECT_EQ(std::memcmp(w, want.data(), want.size()), 0) << s.ToString() << ": copy " << call << " differs";
      EXPECT_NE(w, static_cast<const void*>(b.data())) << "the weights themselves are not a rotated copy";
    }
    EXPECT_GE(seen.size(), 2u) << s.ToString();
    EXPECT_GE(seen.size() * want.size(), size_t(cover)) << s.ToString() << ": its copies cover the cover on their own";
    ASSERT_TRUE(cache.Cool(s, key, b.data(), key.k(), b_bytes).ok());
  }

  // After the rotation: the one copy.
  ASSERT_TRUE(cache.Rotate({}, key, b.data(), key.k(), b_bytes, cover).ok());
  auto after = cache.Call(*packs, key, b.data(), key.k());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->packed, one);
  auto in_place_after = cache.Call(stored, key, b.data(), key.k());
  ASSERT_TRUE(in_place_after.ok());
  EXPECT_EQ(in_place_after->stored, b.data());
  EXPECT_EQ(in_place_after->packed, nullptr);
  // One schedule whose weights fill the cover alone: one copy, flushed before each call.
  ASSERT_TRUE(cache.Rotate(std::span(&*packs, 1), key, b.data(), key.k(), b_bytes, int64_t(packed_bytes)).ok());
  auto alone = cache.Call(*packs, key, b.data(), key.k());
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->packed, one);
  EXPECT_EQ(b, b0);
}

// The operands' copies cover twice the device's caches by default, as bench_serving
// rotates them: a small key's set is not left in L3 by a cap on the count. Bounded by
// max_copies and by 1 GiB.
TEST(MeasurerTest, OperandCopiesCoverTwiceTheCaches) {
  DeviceInfo d = HostCpuDevice(2);
  d.l3_bytes = int64_t{32} << 20;
  d.l2_bytes = int64_t{1} << 20;
  const MeasureOptions o;
  const int64_t cover = CoverBytes(o, d);
  EXPECT_EQ(cover, 2 * ((int64_t{32} << 20) + 2 * (int64_t{1} << 20)));
  for (const int64_t set : {int64_t{460} << 10, int64_t{16} << 10, int64_t{3} << 20, int64_t{100} << 20}) {
    const int64_t copies = RotatedCopies(set, o, d);
    EXPECT_GE(copies * set, std::min(cover, set * o.max_copies)) << set << " bytes";
    EXPECT_LT((copies - 1) * set, cover) << set << " bytes: no more copies than the cover needs";
  }
  MeasureOptions capped;
  capped.max_copies = 16;
  EXPECT_EQ(RotatedCopies(int64_t{460} << 10, capped, d), 16);
  EXPECT_EQ(RotatedCopies(int64_t{1} << 20, o, d), 68);  // 68 MiB of copies
  EXPECT_EQ(RotatedCopies(int64_t{600} << 20, o, d), 1);  // 1 GiB bounds it
}

// Every operand a timed call reads starts on a cache line, as a serving stack's
// tensor allocator places them: from the heap (16 bytes) the tuner measured the
// small-m `nt` kernel 1.20x slower than where serving reads its rows line-aligned.
// Recorded by planted variants over more calls than there are rotated copies.
std::vector<uintptr_t> g_operand_addresses;
Status AddressGemm(const KernelVariant&, const GemmArgs& g, const ParamValues&) {
  for (const void* p : {g.a, g.b, static_cast<const void*>(g.c)}) g_operand_addresses.push_back(uintptr_t(p));
  return Status::Ok();
}
Status AddressConv2d(const KernelVariant&, const Conv2dArgs& g, const ParamValues&) {
  for (const void* p : {g.x, g.weights, static_cast<const void*>(g.y)}) g_operand_addresses.push_back(uintptr_t(p));
  return Status::Ok();
}

TEST(MeasurerTest, EveryCallsOperandsStartOnACacheLine) {
  const KernelVariant gemm = {"test_f32_gemm_address__scalar", Backend::kCpu, OpKind::kGemm, DType::kF32, kIsaScalar, kPlantedParams, nullptr, nullptr, nullptr, {.gemm = AddressGemm}, {.gemm = {1, 1}}};
  const KernelVariant conv = {"test_f32_conv2d_address__scalar", Backend::kCpu, OpKind::kConv2d, DType::kF32, kIsaScalar, kPlantedParams, nullptr, nullptr, nullptr, {.conv2d = AddressConv2d}, {.conv2d = {1, 1}}};
  const DeviceInfo host = HostCpuDevice(1);
  MeasureOptions o = FastMeasureOptions();
  o.rotate_bytes = 64 << 10;  // several copies of each key's set
  // Odd sizes, so that a set's operands would not fall on lines by their sizes alone.
  for (const OpKey& key : {OpKey::Gemm(3, 37, 29), OpKey::Gemm(5, 41, 33, true, true),
                           OpKey::Conv2d(1, 7, 9, 3, 5, 3, 3, 1, 1, 1, 1)}) {
    auto harness = MakeHarness(key, o, host);
    ASSERT_TRUE(harness.ok()) << harness.status().ToString();
    (*harness)->Arm(host);
    Schedule s;
    s.variant = key.op == OpKind::kGemm ? &gemm : &conv;
    s.params[0] = 8;
    s.params[1] = 1;
    g_operand_addresses.clear();
    for (int call = 0; call < 40; ++call) ASSERT_TRUE((*harness)->Run(s).ok()) << key.ToString();
    std::vector<uintptr_t> distinct = g_operand_addresses;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    EXPECT_GT(distinct.size(), 3u) << key.ToString() << ": the calls rotated over copies";
    for (const uintptr_t p : g_operand_addresses) EXPECT_EQ(p % 64, 0u) << key.ToString() << " operand at " << p;
  }
}

}  // namespace
}  // namespace cliffguard::tuner::testing
