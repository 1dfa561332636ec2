// The bodies of the tuner fuzz targets, shared with the regression replay test
// (tests/tuner/crash_safety_test.cc: the runtime test binary does not link the
// tuner). See fuzz_bodies.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cliffguard/tuner/tuning_log.h"
#include "cliffguard/tuner/workload.h"
#include "fuzz_common.h"

namespace cliffguard::fuzz {

// fuzz_workload: workload text -> ParseWorkload, ReadWorkloadFile (same bytes as a
// file) and ParseGemmShape (--shape).
inline void FuzzWorkload(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto keys = tuner::ParseWorkload(text, "fuzz");
  if (keys.ok()) {
    for (const OpKey& k : *keys) {
      CG_FUZZ_CHECK(k.Validate().ok());
      auto again = OpKey::Parse(k.ToString());
      CG_FUZZ_CHECK(again.ok() && *again == k);
    }
  }
  MemFile f(data, size);
  auto from_file = tuner::ReadWorkloadFile(f.path());
  CG_FUZZ_CHECK(from_file.ok() == keys.ok());
  if (size < 256) {
    auto shape = ParseShape(text);
    if (shape.ok()) CG_FUZZ_CHECK(shape->Validate().ok());
  }
}

// fuzz_tuning_log: log bytes -> RecordFromJson (first line) with a round trip, and
// ReadTuningLog of the whole input as a file.
inline void FuzzTuningLog(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto rec = tuner::RecordFromJson(text.substr(0, text.find('\n')));
  if (rec.ok()) {
    auto back = tuner::RecordFromJson(tuner::RecordToJson(*rec));
    CG_FUZZ_CHECK(back.ok());
    if (back.ok()) CG_FUZZ_CHECK(back->key == rec->key && back->schedule == rec->schedule);
    (void)tuner::ToMeasureResult(*rec);
  }
  MemFile f(data, size);
  auto log = tuner::ReadTuningLog(f.path());
  if (log.ok()) {
    CG_FUZZ_CHECK(log->valid_bytes >= 0 && static_cast<size_t>(log->valid_bytes) <= size);
    for (const auto& r : log->records) (void)tuner::ToMeasureResult(r);
  }
}

}  // namespace cliffguard::fuzz
