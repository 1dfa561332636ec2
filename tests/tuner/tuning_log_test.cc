// Tuning log: round trip, durability rules (partial last line dropped, corrupt
// middle line refused), resume truncation, workload parsing.
#include "cliffguard/tuner/tuning_log.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include "cliffguard/log.h"

#include "cliffguard/tuner/workload.h"

namespace cliffguard::tuner {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / fmt::format("cg_{}_{}", ::getpid(), name)).string();
}

LogRecord Rec(int trial, bool ok = true) {
  LogRecord r;
  r.kind = RecordKind::kTrial;
  r.key = OpKey::Gemm(16, 3072, 768, false, true);
  r.device = "cpu-avx512-0123456789abcdef";
  r.schedule.variant = "cpu_f32_gemm_14x32__avx512";
  r.schedule.params = {{"mc", 112}, {"kc", 256}, {"nc", 2048}, {"threads", 1}};
  r.strategy = "xgb";
  r.seed = 7;
  r.trial = trial;
  r.ok = ok;
  r.median_us = ok ? 123.5 + trial : 0;
  if (ok) r.round_us = {125.0 + trial, 123.5 + trial, 122.25 + trial, 130.0 + trial};
  if (ok) r.cpu_wait = 0.0125;
  r.error = ok ? "" : "wrong result: max rel error 3.0e-01 > tol 1.0e-05";
  r.timestamp = 1764489600.25 + trial;
  return r;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(TuningLogTest, RoundTripKeepsEveryFieldAndParamOrder) {
  for (bool ok : {true, false}) {
    LogRecord r = Rec(3, ok);
    auto back = RecordFromJson(RecordToJson(r));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->key, r.key);
    EXPECT_EQ(back->schedule, r.schedule);  // params in declaration order, not sorted
    EXPECT_EQ(back->device, r.device);
    EXPECT_EQ(back->strategy, r.strategy);
    EXPECT_EQ(back->seed, r.seed);
    EXPECT_EQ(back->trial, r.trial);
    EXPECT_EQ(back->ok, r.ok);
    EXPECT_DOUBLE_EQ(back->median_us, r.median_us);
    EXPECT_EQ(back->round_us, r.round_us);
    EXPECT_DOUBLE_EQ(back->cpu_wait, r.cpu_wait);
    EXPECT_EQ(back->error, r.error);
    EXPECT_DOUBLE_EQ(back->timestamp, r.timestamp);
  }
}

TEST(TuningLogTest, EveryRecordKindRoundTrips) {
  for (RecordKind k : {RecordKind::kTrial, RecordKind::kDefault, RecordKind::kRemeasure, RecordKind::kCross,
                       RecordKind::kConfirm, RecordKind::kBucket}) {
    LogRecord r = Rec(k == RecordKind::kTrial ? 0 : -1);
    r.kind = k;
    const std::string line = RecordToJson(r);
    EXPECT_NE(line.find(fmt::format("\"kind\":\"{}\"", RecordKindName(k))), std::string::npos) << line;
    auto back = RecordFromJson(line);
    ASSERT_TRUE(back.ok()) << line << ": " << back.status().ToString();
    EXPECT_EQ(back->kind, k);
  }
  EXPECT_STREQ(RecordKindName(RecordKind::kBucket), "bucket");
  auto bad = ParseRecordKind("buckets");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("confirm, bucket"), std::string::npos) << bad.status().message();
}

TEST(TuningLogTest, WriterAppendsWholeLinesAndReaderReadsThem) {
  const std::string path = TempPath("log1.jsonl");
  {
    auto w = TuningLogWriter::Open(path, TuningLogWriter::Mode::kTruncate);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*w)->Append(Rec(i, i != 2)).ok());
  }
  auto log = ReadTuningLog(path);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_EQ(log->records.size(), 5u);
  EXPECT_FALSE(log->records[2].ok);
  EXPECT_FALSE(log->dropped_last_line);
  EXPECT_EQ(log->valid_bytes, static_cast<int64_t>(std::filesystem::file_size(path)));
  std::remove(path.c_str());
}

TEST(TuningLogTest, PartialLastLineIsDroppedWithWarningAndTruncatedOnResume) {
  const std::string path = TempPath("log2.jsonl");
  const std::string good = RecordToJson(Rec(0)) + "\n" + RecordToJson(Rec(1)) + "\n";
  const std::string partial = RecordToJson(Rec(2)).substr(0, 40);
  WriteText(path, good + partial);

  std::ostringstream captured;
  SetLogSink([&](LogLevel, std::string_view m) { captured << m << "\n"; });
  auto log = ReadTuningLog(path);
  SetLogSink(nullptr);

  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log->records.size(), 2u);
  EXPECT_TRUE(log->dropped_last_line);
  EXPECT_EQ(log->valid_bytes, static_cast<int64_t>(good.size()));
  EXPECT_NE(captured.str().find(path + ":3"), std::string::npos) << captured.str();
  EXPECT_NE(captured.str().find("partial"), std::string::npos) << captured.str();

  // Resuming truncates the partial line away before appending.
  {
    auto w = TuningLogWriter::Open(path, TuningLogWriter::Mode::kAppend, log->valid_bytes);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(Rec(2)).ok());
  }
  auto again = ReadTuningLog(path);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->records.size(), 3u);
  EXPECT_FALSE(again->dropped_last_line);
  std::remove(path.c_str());
}

TEST(TuningLogTest, CorruptMiddleLineIsAnErrorNamingTheLine) {
  const std::string path = TempPath("log3.jsonl");
  WriteText(path, RecordToJson(Rec(0)) + "\n{\"v\":1,\"kind\":\"trial\"}\n" + RecordToJson(Rec(2)) + "\n");
  auto log = ReadTuningLog(path);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(log.status().message().find(path + ":2"), std::string::npos) << log.status().message();
  EXPECT_NE(log.status().message().find("'key' is required"), std::string::npos) << log.status().message();
  std::remove(path.c_str());
}

TEST(TuningLogTest, RecordRulesAreEnforced) {
  std::string j = RecordToJson(Rec(0));
  auto both = j.substr(0, j.size() - 1) + ",\"error\":\"x\"}";
  EXPECT_FALSE(RecordFromJson(both).ok());
  EXPECT_FALSE(RecordFromJson("[1,2]").ok());
  auto bad_kind = RecordFromJson(std::string(j).replace(j.find("\"trial\""), 7, "\"bogus\""));
  ASSERT_FALSE(bad_kind.ok());
  EXPECT_NE(bad_kind.status().message().find("bogus"), std::string::npos);
  EXPECT_EQ(ReadTuningLog(TempPath("missing.jsonl")).status().code(), StatusCode::kNotFound);
  // round_us: optional, positive finite numbers, only beside median_us.
  LogRecord plain = Rec(0);
  plain.round_us.clear();
  const std::string no_rounds = RecordToJson(plain);
  EXPECT_EQ(no_rounds.find("round_us"), std::string::npos) << no_rounds;
  ASSERT_TRUE(RecordFromJson(no_rounds).ok());
  EXPECT_TRUE(RecordFromJson(no_rounds)->round_us.empty());
  const auto with_rounds = [&](const std::string& rounds) {
    return RecordFromJson(no_rounds.substr(0, no_rounds.size() - 1) + ",\"round_us\":" + rounds + "}");
  };
  for (const char* bad : {"[1,0]", "[1,-2]", "[1,\"x\"]", "3", "{}"}) {
    auto r = with_rounds(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("round_us"), std::string::npos) << r.status().message();
  }
  ASSERT_TRUE(with_rounds("[]").ok());
  const std::string failed = RecordToJson(Rec(0, false));
  EXPECT_FALSE(RecordFromJson(failed.substr(0, failed.size() - 1) + ",\"round_us\":[1]}").ok());
  // cpu_wait: optional (absent: -1, not measured), in [0, 1], only beside median_us.
  plain.cpu_wait = -1;
  const std::string no_wait = RecordToJson(plain);
  EXPECT_EQ(no_wait.find("cpu_wait"), std::string::npos) << no_wait;
  EXPECT_DOUBLE_EQ(RecordFromJson(no_wait)->cpu_wait, -1);
  const auto with_wait = [&](const std::string& w) {
    return RecordFromJson(no_wait.substr(0, no_wait.size() - 1) + ",\"cpu_wait\":" + w + "}");
  };
  for (const char* good : {"0", "0.5", "1"}) EXPECT_TRUE(with_wait(good).ok()) << good;
  for (const char* bad : {"-0.1", "1.5", "\"x\""}) {
    auto r = with_wait(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("cpu_wait"), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(RecordFromJson(failed.substr(0, failed.size() - 1) + ",\"cpu_wait\":0.5}").ok());
}

TEST(WorkloadTest, PlainLinesJsonAndErrorsNameTheLine) {
  auto plain = ParseWorkload("# bert\n gemm f32 nn m=128 n=3072 k=768  # ffn\n\ngemm f32 nt m=16 n=768 k=768\n"
                             "gemm f32 nn m=128 n=3072 k=768\n");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_EQ(plain->size(), 2u);  // duplicate dropped
  EXPECT_EQ((*plain)[1], OpKey::Gemm(16, 768, 768, false, true));

  auto js = ParseWorkload("[\n \"gemm f32 nn m=1 n=768 k=768\",\n \"gemm f32 tn m=64 n=768 k=3072\"\n]");
  ASSERT_TRUE(js.ok()) << js.status().ToString();
  EXPECT_EQ(js->size(), 2u);

  auto bad = ParseWorkload("gemm f32 nn m=1 n=768 k=768\ngemm f32 nn m=0 n=768 k=768\n", "w.txt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("w.txt:2"), std::string::npos) << bad.status().message();

  auto bad_js = ParseWorkload("[\"gemm f32 nn m=1 n=768 k=768\",\n \"gemm f32 xx m=1 n=2 k=3\"]", "w.json");
  ASSERT_FALSE(bad_js.ok());
  EXPECT_NE(bad_js.status().message().find("w.json:2"), std::string::npos) << bad_js.status().message();
  EXPECT_FALSE(ParseWorkload("[1]").ok());
  EXPECT_FALSE(ParseWorkload("# nothing\n").ok());
}

TEST(WorkloadTest, ShapeArguments) {
  auto k = ParseShape("128,768,3072");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, OpKey::Gemm(128, 768, 3072));
  auto t = ParseShape("16,3072,768,nt");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, OpKey::Gemm(16, 3072, 768, false, true));
  for (const char* bad : {"1,2", "1,2,x", "0,2,3", "1,2,3,nx", "1,2,3,4,5", "-1,2,3"}) {
    auto r = ParseShape(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace cliffguard::tuner
