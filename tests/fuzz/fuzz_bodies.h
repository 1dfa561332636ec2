// The bodies of the runtime fuzz targets, shared with the regression replay test
// (tests/runtime/bad_input_test.cc), so every saved crash input is replayed through
// exactly the entry points the fuzzer drove. Each body takes untrusted bytes and
// must return with a Status for any input: no crash, no sanitizer report, and the
// CG_FUZZ_CHECK properties hold.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cliffguard/bundle.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/runtime.h"
#include "fuzz_common.h"

namespace cliffguard::fuzz {

// One runtime for the process: it accepts bundles of the same backend and arch
// (allow_same_arch_bundles), so inputs need not carry this host's exact fingerprint
// for their entries to load; each input ends with UnloadAll.
inline Runtime& FuzzRuntime() {
  static Runtime* rt = [] {
    RuntimeOptions o;
    o.threads = 2;
    o.warn_on_miss = false;
    o.allow_same_arch_bundles = true;
    o.miss_report_path = "/dev/null";  // never the CLIFFGUARD_MISS_REPORT of the environment
    auto r = Runtime::Create(o);
    if (!r.ok()) __builtin_trap();
    return std::move(r).value().release();  // lives for the process
  }();
  return *rt;
}

// Dispatches one small gemm through the per-call path, a plan and a constant-weight
// plan (whichever of the key's two forms the bundle holds), on operands of exactly
// the minimum size (no slack for an overrun to hide in), and checks the results: a
// bundle chooses among valid schedules, every one of which is correct.
inline void FuzzDispatch(Runtime& rt, const OpKey& bundle_key) {
  if (bundle_key.op != OpKind::kGemm || bundle_key.dtype != DType::kF32) return;
  OpKey key = bundle_key;
  key.constant_weights = false;  // the per-call form
  const int64_t m = key.m(), n = key.n(), k = key.k();
  if (m < 1 || n < 1 || k < 1 || m > 48 || n > 48 || k > 48) return;
  std::vector<float> a(size_t(m * k), 0.5f), b(size_t(k * n), 0.25f), c(size_t(m * n), 0.0f);
  const GemmArgs g = DenseGemmArgs(key, a.data(), b.data(), c.data());
  Status st = rt.Gemm(g);
  CG_FUZZ_CHECK(st.ok());
  const float want = float(k) * 0.125f;
  for (float x : c) CG_FUZZ_CHECK(x > want * 0.999f && x < want * 1.001f);
  auto plan = rt.PlanGemm(key);
  CG_FUZZ_CHECK(plan.ok());
  if (plan.ok()) {
    st = plan->Run(a.data(), g.lda, b.data(), g.ldb, c.data(), g.ldc, 1.0f, 1.0f);
    CG_FUZZ_CHECK(st.ok());
  }
  auto packed = rt.PlanGemm(key, b.data(), g.ldb);
  CG_FUZZ_CHECK(packed.ok());
  if (packed.ok()) {
    std::fill(c.begin(), c.end(), 0.0f);
    st = packed->Run(a.data(), g.lda, c.data(), g.ldc);
    CG_FUZZ_CHECK(st.ok());
    for (float x : c) CG_FUZZ_CHECK(x > want * 0.999f && x < want * 1.001f);
  }
}

// fuzz_bundle_load: bundle bytes -> ParseBundle, ResolveBundle, re-serialization,
// Runtime::LoadBundleBuffer and dispatches of the loaded keys (tuned schedules and
// bundle defaults chosen by the input).
inline void FuzzBundleLoad(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  Runtime& rt = FuzzRuntime();
  auto spec = ParseBundle(bytes, "fuzz");
  if (spec.ok()) {
    (void)ResolveBundle(*spec, rt.device());
    // What parses must serialize and parse again (the tuner rewrites bundles).
    auto again = ParseBundle(SerializeBundle(*spec), "fuzz-reserialized");
    CG_FUZZ_CHECK(again.ok());
    (void)BundleToJson(*spec);
  }
  auto report = rt.LoadBundleBuffer(bytes, "fuzz");
  // Both verify the same way and both skip only the entries they cannot decode: what
  // parses must load, and every entry is either read or listed as unreadable.
  if (spec.ok()) CG_FUZZ_CHECK(report.ok());
  if (spec.ok() && report.ok()) {
    size_t unreadable_entries = 0;
    for (const UnreadableEntry& u : spec->unreadable) unreadable_entries += u.where.rfind("entry ", 0) == 0;
    CG_FUZZ_CHECK(report->entries_total == spec->entries.size() + unreadable_entries);
  }
  if (report.ok() && spec.ok()) {
    size_t n = 0;
    for (const BundleEntry& e : spec->entries) {
      if (++n > 6) break;
      FuzzDispatch(rt, e.key);
    }
    FuzzDispatch(rt, OpKey::Gemm(3, 5, 7));  // most likely a miss: the fallback path
    (void)rt.Stats();
    (void)rt.GetMissReport();
  }
  rt.UnloadAll();
}

// fuzz_bundle_json: `cliffguard pack` input -> BundleFromJson; what parses must
// round-trip through BundleToJson and serialize to a flatbuffer.
inline void FuzzBundleJson(const uint8_t* data, size_t size) {
  auto spec = BundleFromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!spec.ok()) return;
  const std::string json = BundleToJson(*spec);
  auto back = BundleFromJson(json);
  CG_FUZZ_CHECK(back.ok());
  if (back.ok()) CG_FUZZ_CHECK(BundleToJson(*back) == json);
  const std::vector<uint8_t> bytes = SerializeBundle(*spec);
  auto parsed = ParseBundle(bytes, "fuzz");
  if (parsed.ok()) CG_FUZZ_CHECK(parsed->entries.size() == spec->entries.size());
  (void)ResolveBundle(*spec, FuzzRuntime().device());
}

// fuzz_miss_report: `cliffguard misses` / `tune --from-report` input ->
// MissReportFromJson; what parses must round-trip.
inline void FuzzMissReport(const uint8_t* data, size_t size) {
  auto report = MissReportFromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!report.ok()) return;
  RankMissRecords(*report);
  for (const auto& b : RecommendBuckets(report->records))
    CG_FUZZ_CHECK(b.lo >= 1 && b.lo <= b.key.dims[kVaryingDim] && b.key.dims[kVaryingDim] <= b.hi);
  auto back = MissReportFromJson(MissReportToJson(*report));
  CG_FUZZ_CHECK(back.ok());
  if (back.ok()) CG_FUZZ_CHECK(back->records.size() == report->records.size());
  // `misses merge`: the report with a replica of another process; what merges must
  // read back, and sum its counts.
  MissReport replica = *report;
  replica.sources.clear();
  replica.host = "fuzz-replica";
  replica.pid = 1;
  auto merged = MergeMissReports({*report, replica});
  if (!merged.ok()) return;
  auto merged_back = MissReportFromJson(MissReportToJson(*merged));
  CG_FUZZ_CHECK(merged_back.ok());
  CG_FUZZ_CHECK(merged->calls == 2 * report->calls && merged->records.size() <= report->records.size());
}

}  // namespace cliffguard::fuzz
