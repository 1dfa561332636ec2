#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bundle_internal.h"
#include "cliffguard/bundle.h"
#include "cliffguard/runtime.h"
#include "test_bundles.h"

namespace cliffguard {
namespace {

using testing::HostBundle;
using testing::TempFile;

std::string RunCli(const std::string& args, int* rc) {
  const std::string cmd = std::string(CG_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  auto b = ReadFileBytes(path);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : std::vector<uint8_t>{};
}

OpKey ConstantWeights(OpKey k) {
  k.constant_weights = true;
  return k;
}

BundleSpec SampleSpec() {
  BundleSpec spec = HostBundle(HostCpuDevice(), {OpKey::Gemm(128, 768, 768), OpKey::Gemm(16, 3072, 768, false, true),
                                                 ConstantWeights(OpKey::Gemm(16, 3072, 768, false, true))});
  spec.defaults.push_back({OpKind::kGemm, DType::kF32, spec.entries[0].schedule});
  spec.cost_model_format = "xgboost-json";
  spec.cost_model = {0, 1, 2, 250, 251, 255, 7};
  return spec;
}

TEST(Bundle, SerializeParseRoundTrip) {
  const BundleSpec spec = SampleSpec();
  const auto bytes = SerializeBundle(spec);
  auto back = ParseBundle(bytes, "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device.fingerprint, spec.device.fingerprint);
  ASSERT_EQ(back->entries.size(), 3u);
  EXPECT_EQ(back->entries[1].key, spec.entries[1].key);
  EXPECT_FALSE(back->entries[1].key.constant_weights);
  EXPECT_TRUE(back->entries[2].key.constant_weights);
  EXPECT_EQ(back->entries[1].schedule, spec.entries[1].schedule);
  EXPECT_EQ(back->cost_model, spec.cost_model);
  EXPECT_EQ(SerializeBundle(*back), bytes);  // deterministic
}

TEST(Bundle, JsonRoundTripIsExact) {
  const BundleSpec spec = SampleSpec();
  const std::string json = BundleToJson(spec);
  auto back = BundleFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(BundleToJson(*back), json);
  EXPECT_EQ(SerializeBundle(*back), SerializeBundle(spec));
}

TEST(Bundle, PackInspectPackThroughTheCliIsIdentical) {
  TempFile json("spec.json"), b1("b1.cgb"), json2("spec2.json"), b2("b2.cgb");
  std::ofstream(json.path) << BundleToJson(SampleSpec());
  int rc = 0;
  std::string out = RunCli("pack " + json.path + " -o " + b1.path, &rc);
  ASSERT_EQ(rc, 0) << out;
  out = RunCli("inspect --json " + b1.path + " > " + json2.path, &rc);
  ASSERT_EQ(rc, 0) << out;
  out = RunCli("pack " + json2.path + " -o " + b2.path, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(ReadAll(b1.path), ReadAll(b2.path));
  out = RunCli("inspect " + b1.path, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("gemm f32 nn m=128 n=768 k=768"), std::string::npos) << out;
  EXPECT_NE(out.find("2.00x"), std::string::npos) << out;
}

// A cut that removes only the alignment padding the builder left at the end of the
// buffer loses nothing: such a file reads back to the very same bundle. Every other
// cut is refused.
TEST(Bundle, RefusesTruncatedFilesAtEveryLength) {
  const auto bytes = SerializeBundle(SampleSpec());
  int refused = 0;
  for (size_t len = 0; len < bytes.size(); len += 1 + len / 16) {
    auto r = ParseBundle(std::span<const uint8_t>(bytes.data(), len), "cut");
    if (r.ok()) {
      EXPECT_GE(len + 8, bytes.size()) << "length " << len << " of " << bytes.size() << " parsed";
      EXPECT_EQ(SerializeBundle(*r), bytes) << "length " << len << " parsed to another bundle";
      continue;
    }
    ++refused;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  }
  EXPECT_GT(refused, 40);
}

TEST(Bundle, BitFlipsNeverCrashAndAreRefusedOrRejectedCleanly) {
  const auto good = SerializeBundle(SampleSpec());
  auto rt = Runtime::Create({.threads = 0, .miss_report_path = "", .warn_on_miss = false});
  ASSERT_TRUE(rt.ok());
  int refused = 0, loaded = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit : {0, 3, 7}) {
      auto bytes = good;
      bytes[i] ^= uint8_t(1u << bit);
      auto r = (*rt)->LoadBundleBuffer(bytes, "flipped");
      r.ok() ? ++loaded : ++refused;
      if (!r.ok()) EXPECT_NE(r.status().message().find("flipped"), std::string::npos) << r.status().ToString();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);  // flips inside numbers or strings still verify; entries are then re-checked
}

TEST(Bundle, RefusesWrongIdentifierAndNewerSchema) {
  auto bytes = SerializeBundle(SampleSpec());
  auto wrong = bytes;
  wrong[4] = 'X';
  auto r = ParseBundle(wrong, "wrong.cgb");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("identifier"), std::string::npos) << r.status().message();

  BundleSpec newer = SampleSpec();
  newer.schema_version = kBundleSchemaVersion + 1;
  r = ParseBundle(SerializeBundle(newer), "newer.cgb");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("newer"), std::string::npos) << r.status().message();

  const char text[] = "this is not a bundle at all, just some text";
  r = ParseBundle(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text), sizeof text), "text");
  EXPECT_FALSE(r.ok());
}

TEST(Bundle, RejectsBadEntriesAndKeepsTheGoodOnes) {
  const DeviceInfo host = HostCpuDevice();
  BundleSpec spec = HostBundle(host, {OpKey::Gemm(8, 8, 8), OpKey::Gemm(9, 9, 9), OpKey::Gemm(10, 10, 10),
                                      OpKey::Gemm(11, 11, 11), OpKey::Gemm(12, 12, 12)});
  spec.entries[1].schedule.variant = "cpu_f32_gemm_99x99__imaginary";
  spec.entries[2].schedule.params[0].second = 123457;  // not an allowed value
  spec.entries[3].schedule.params.push_back({"no_such_param", 1});
  spec.entries.push_back(spec.entries[0]);  // duplicate key
  auto rt = Runtime::Create({.threads = 0, .miss_report_path = "", .warn_on_miss = false});
  ASSERT_TRUE(rt.ok());
  auto rep = (*rt)->LoadBundleBuffer(SerializeBundle(spec), "mixed");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->entries_total, 6u);
  EXPECT_EQ(rep->entries_loaded, 2u);
  ASSERT_EQ(rep->rejected.size(), 4u);
  EXPECT_EQ(rep->rejected[0].reason, EntryRejection::kUnknownVariant);
  EXPECT_EQ(rep->rejected[1].reason, EntryRejection::kBadParameter);
  EXPECT_NE(rep->rejected[1].message.find("123457"), std::string::npos) << rep->rejected[1].message;
  EXPECT_EQ(rep->rejected[2].reason, EntryRejection::kBadParameter);
  EXPECT_EQ(rep->rejected[3].reason, EntryRejection::kDuplicateKey);
  EXPECT_TRUE((*rt)->Resolve(OpKey::Gemm(8, 8, 8))->hit);
  EXPECT_TRUE((*rt)->Resolve(OpKey::Gemm(12, 12, 12))->hit);
  auto r9 = (*rt)->Resolve(OpKey::Gemm(9, 9, 9));
  ASSERT_TRUE(r9.ok());
  EXPECT_FALSE(r9->hit);
  EXPECT_EQ(r9->miss_kind, MissKind::kRejectedEntry);
  EXPECT_EQ((*rt)->Resolve(OpKey::Gemm(13, 13, 13))->miss_kind, MissKind::kShapeMiss);
}

// A bundle tuned where a library variant was built (cpu_f32_gemm_onednn, ...) and
// loaded where it was not: that entry is rejected as an unknown variant, named in the
// message; the file and its other entries load.
TEST(Bundle, RejectsAnEntryNamingALibraryVariantThisBuildLacks) {
  const DeviceInfo host = HostCpuDevice();
  BundleSpec spec = HostBundle(host, {OpKey::Gemm(8, 8, 8), OpKey::Gemm(9, 9, 9), OpKey::Gemm(10, 10, 10)});
  spec.entries[1].schedule = {"cpu_f32_gemm_mkl", {{"threads", 1}}};  // a library no build has
  spec.entries[2].schedule = {"cpu_f32_gemm_onednn", {{"threads", 1}, {"reorder_b", 1}}};
  const bool have_onednn = FindKernelVariant("cpu_f32_gemm_onednn") != nullptr &&
                           VariantSupports(*FindKernelVariant("cpu_f32_gemm_onednn"), OpKey::Gemm(10, 10, 10), host).ok();
  auto rt = Runtime::Create({.threads = 0, .miss_report_path = "", .warn_on_miss = false});
  ASSERT_TRUE(rt.ok());
  auto rep = (*rt)->LoadBundleBuffer(SerializeBundle(spec), "library");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->entries_total, 3u);
  EXPECT_EQ(rep->entries_loaded, have_onednn ? 2u : 1u);
  ASSERT_EQ(rep->rejected.size(), have_onednn ? 1u : 2u);
  EXPECT_EQ(rep->rejected[0].reason, EntryRejection::kUnknownVariant);
  EXPECT_NE(rep->rejected[0].message.find("'cpu_f32_gemm_mkl'"), std::string::npos) << rep->rejected[0].message;
  EXPECT_EQ((*rt)->Resolve(OpKey::Gemm(9, 9, 9))->miss_kind, MissKind::kRejectedEntry);
  if (have_onednn) {
    EXPECT_TRUE((*rt)->Resolve(OpKey::Gemm(10, 10, 10))->hit);
  } else {
    EXPECT_NE(rep->rejected[1].message.find("cpu_f32_gemm_onednn"), std::string::npos) << rep->rejected[1].message;
    EXPECT_EQ((*rt)->Resolve(OpKey::Gemm(10, 10, 10))->miss_kind, MissKind::kRejectedEntry);
  }
}

// A fresh runtime loads `bytes`: `loaded` entries load and `key` is a hit.
void ExpectRuntimeLoads(std::span<const uint8_t> bytes, size_t loaded, const OpKey& key) {
  auto rt = Runtime::Create({.threads = 0, .miss_report_path = "", .warn_on_miss = false});
  ASSERT_TRUE(rt.ok());
  auto rep = (*rt)->LoadBundleBuffer(bytes, "test");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->entries_loaded, loaded);
  EXPECT_TRUE((*rt)->Resolve(key)->hit) << key.ToString();
}

// Pieces of hand-built bundles, for files SerializeBundle never writes.
flatbuffers::Offset<fb::Schedule> RawSchedule(flatbuffers::FlatBufferBuilder& fbb, const NamedSchedule& s) {
  std::vector<flatbuffers::Offset<fb::Param>> params;
  for (const auto& [name, value] : s.params) params.push_back(fb::CreateParam(fbb, fbb.CreateString(name), value));
  return fb::CreateSchedule(fbb, fbb.CreateString(s.variant), fbb.CreateVector(params));
}
flatbuffers::Offset<fb::Device> RawDevice(flatbuffers::FlatBufferBuilder& fbb, const DeviceInfo& d) {
  return fb::CreateDevice(fbb, fb::Backend::cpu, 0, 0, fbb.CreateString(d.arch), 0, fbb.CreateString(d.fingerprint));
}

// A bundle for the host with one entry whose [long] shape vector is 4- but not
// 8-aligned. flatc never writes one; another writer (or a fuzzer) can, and the
// flatbuffers Verifier only checks the vector's 4-byte length field.
std::vector<uint8_t> BundleWithMisalignedShape(const DeviceInfo& host, const OpKey& key) {
  const NamedSchedule sched = ToNamed(*DefaultSchedule(key, host));
  for (int pad = 0; pad < 2; ++pad) {
    flatbuffers::FlatBufferBuilder fbb;
    auto schedule = RawSchedule(fbb, sched);
    if (pad) fbb.CreateVector(std::vector<int32_t>{7, 7});  // 12 bytes: shifts what follows by 4 mod 8
    // Three int64 values written as six int32 words; the length is patched to 3 below.
    std::vector<int32_t> words;
    for (int i = 0; i < 3; ++i) words.insert(words.end(), {int32_t(key.dims[i]), int32_t(key.dims[i] >> 32)});
    const flatbuffers::Offset<flatbuffers::Vector<int64_t>> shape(fbb.CreateVector(words).o);
    auto k = fb::CreateOpKey(fbb, fb::OpKind::gemm, fb::DType::f32, false, false, shape);
    auto entry = fb::CreateEntry(fbb, k, schedule, 10.0, 20.0, 3, 1764460800);
    auto device = RawDevice(fbb, host);
    std::vector<flatbuffers::Offset<fb::Entry>> entries{entry};
    fb::FinishBundleBuffer(fbb, fb::CreateBundle(fbb, kBundleSchemaVersion, 0, 0, 0, device, fbb.CreateVector(entries)));
    std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    const auto* vec = fb::GetBundle(bytes.data())->entries()->Get(0)->key()->shape();
    const size_t len_at = reinterpret_cast<const uint8_t*>(vec) - bytes.data();
    if ((len_at + 4) % 8 == 0) continue;
    const uint32_t three = 3;
    std::memcpy(bytes.data() + len_at, &three, sizeof three);
    return bytes;
  }
  ADD_FAILURE() << "could not place the shape vector off 8-byte alignment";
  return {};
}

TEST(Bundle, ReadsEightByteVectorElementsThatAreNotEightAligned) {
  const DeviceInfo host = HostCpuDevice();
  const OpKey key = OpKey::Gemm(33, 17, 5);
  const auto bytes = BundleWithMisalignedShape(host, key);
  auto spec = ParseBundle(bytes, "misaligned");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->entries.size(), 1u);
  EXPECT_EQ(spec->entries[0].key, key);
  ExpectRuntimeLoads(bytes, 1, key);
}

TEST(Bundle, LoadsFromABufferThatIsNotEightAligned) {
  const BundleSpec spec = SampleSpec();
  const auto bytes = SerializeBundle(spec);
  std::vector<uint8_t> storage(bytes.size() + 1);
  std::memcpy(storage.data() + 1, bytes.data(), bytes.size());
  const std::span<const uint8_t> odd(storage.data() + 1, bytes.size());
  auto back = ParseBundle(odd, "odd address");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->entries[1].key, spec.entries[1].key);
  EXPECT_EQ(back->entries[0].tuned_us, spec.entries[0].tuned_us);
  ExpectRuntimeLoads(odd, 3, spec.entries[0].key);
}

// A bundle written by a newer producer: entry 1 has a dtype this build does not know,
// op default 0 an op kind it does not know. Entry 0 and op default 1 are fine.
std::vector<uint8_t> BundleFromANewerProducer(const DeviceInfo& host, const OpKey& good) {
  const NamedSchedule sched = ToNamed(*DefaultSchedule(good, host));
  flatbuffers::FlatBufferBuilder fbb;
  auto schedule = [&] { return RawSchedule(fbb, sched); };
  auto key = [&](uint8_t dtype) {
    std::vector<int64_t> shape(good.dims.begin(), good.dims.begin() + 3);
    return fb::CreateOpKey(fbb, fb::OpKind::gemm, static_cast<fb::DType>(dtype), false, false, fbb.CreateVector(shape));
  };
  std::vector<flatbuffers::Offset<fb::Entry>> entries{fb::CreateEntry(fbb, key(0), schedule(), 10.0, 20.0, 3),
                                                      fb::CreateEntry(fbb, key(7), schedule(), 10.0, 20.0, 3)};
  std::vector<flatbuffers::Offset<fb::OpDefault>> defaults{
      fb::CreateOpDefault(fbb, static_cast<fb::OpKind>(9), fb::DType::f32, schedule()),
      fb::CreateOpDefault(fbb, fb::OpKind::gemm, fb::DType::f32, schedule())};
  fb::FinishBundleBuffer(fbb, fb::CreateBundle(fbb, kBundleSchemaVersion, 0, 0, 0, RawDevice(fbb, host),
                                               fbb.CreateVector(entries), fbb.CreateVector(defaults)));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

TEST(Bundle, EntriesFromANewerProducerAreListedAndTheRestIsRead) {
  const DeviceInfo host = HostCpuDevice();
  const OpKey good = OpKey::Gemm(40, 24, 8);
  const auto bytes = BundleFromANewerProducer(host, good);
  auto spec = ParseBundle(bytes, "newer-producer");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->entries.size(), 1u);
  EXPECT_EQ(spec->entries[0].key, good);
  ASSERT_EQ(spec->defaults.size(), 1u);
  ASSERT_EQ(spec->unreadable.size(), 2u);
  EXPECT_EQ(spec->unreadable[0].where, "entry 1");
  EXPECT_NE(spec->unreadable[0].reason.find("dtype 7 is unknown"), std::string::npos) << spec->unreadable[0].reason;
  EXPECT_EQ(spec->unreadable[1].where, "op default 0");
  EXPECT_EQ(spec->unreadable[1].reason, "op kind 9 is unknown");
  // Never written back.
  auto again = ParseBundle(SerializeBundle(*spec), "again");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->unreadable.empty());

  // The runtime loads the readable entry and rejects the other.
  ExpectRuntimeLoads(bytes, 1, good);

  // The CLI shows what it cannot read, and never drops it silently.
  TempFile f("newer.cgb"), merged("newer_merged.cgb");
  ASSERT_TRUE(WriteFileAtomic(f.path, bytes).ok());
  int rc = -1;
  std::string out = RunCli("inspect " + f.path, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("unreadable   2"), std::string::npos) << out;
  EXPECT_NE(out.find("entry 1: dtype 7 is unknown"), std::string::npos) << out;
  EXPECT_NE(out.find("op default 0: op kind 9 is unknown"), std::string::npos) << out;
  out = RunCli("inspect --json " + f.path, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("entry 1 is not in the JSON form"), std::string::npos) << out;
  out = RunCli("inspect --validate " + f.path, &rc);
  EXPECT_EQ(rc, 1) << out;
  if (RunCli("merge --help", &rc); rc == 0) {  // merge is part of the tuner build
    out = RunCli("merge " + f.path + " -o " + merged.path, &rc);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("2 entries this build cannot read"), std::string::npos) << out;
    EXPECT_FALSE(std::filesystem::exists(merged.path));
  }
}

TEST(Bundle, AnotherDevicesBundleIsNotApplied) {
  DeviceInfo other = HostCpuDevice();
  other.threads += 7;
  FinalizeDeviceInfo(other);
  auto rt = Runtime::Create({.threads = 0, .miss_report_path = "", .warn_on_miss = false});
  ASSERT_TRUE(rt.ok());
  auto rep = (*rt)->LoadBundleBuffer(SerializeBundle(HostBundle(HostCpuDevice(), {OpKey::Gemm(4, 4, 4)})), "other");
  ASSERT_TRUE(rep.ok());
  // The bundle was built for HostCpuDevice() with the default budget, as is the runtime.
  EXPECT_TRUE(rep->device_match);
  auto rt2 = Runtime::Create({.threads = other.threads, .miss_report_path = "", .warn_on_miss = false});
  ASSERT_TRUE(rt2.ok());
  rep = (*rt2)->LoadBundleBuffer(SerializeBundle(HostBundle(HostCpuDevice(), {OpKey::Gemm(4, 4, 4)})), "other");
  ASSERT_TRUE(rep.ok());
  EXPECT_FALSE(rep->device_match);
  EXPECT_EQ((*rt2)->Resolve(OpKey::Gemm(4, 4, 4))->miss_kind, MissKind::kDeviceMiss);
}

TEST(Bundle, AtomicWriteLeavesTheOldFileOnFailure) {
  TempFile f("atomic.cgb");
  ASSERT_TRUE(WriteBundleFile(f.path, SampleSpec()).ok());
  const auto before = ReadAll(f.path);
  Status st = WriteBundleFile("/nonexistent-dir/x.cgb", SampleSpec());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  st = WriteBundleFile("/dev/full", SampleSpec());
  EXPECT_FALSE(st.ok());
  struct stat sb {};
  ASSERT_EQ(::stat("/dev/full", &sb), 0);
  EXPECT_TRUE(S_ISCHR(sb.st_mode));
  EXPECT_EQ(ReadAll(f.path), before);
}

TEST(Bundle, LoadsAHundredThousandEntries) {
  const DeviceInfo host = HostCpuDevice();
  auto base = DefaultSchedule(OpKey::Gemm(64, 64, 64), host);
  ASSERT_TRUE(base.ok());
  BundleSpec spec;
  spec.device = host;
  for (int i = 0; i < 100000; ++i) {
    BundleEntry e;
    e.key = OpKey::Gemm(1 + i % 500, 64 + i / 500, 64);
    e.schedule = ToNamed(*base);
    e.tuned_us = 1;
    e.default_us = 2;
    spec.entries.push_back(e);
  }
  auto rt = Runtime::Create({.threads = 0, .miss_report_path = "", .warn_on_miss = false});
  ASSERT_TRUE(rt.ok());
  auto rep = (*rt)->LoadBundleBuffer(SerializeBundle(spec), "big");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->entries_loaded, 100000u);
  EXPECT_TRUE((*rt)->Resolve(OpKey::Gemm(500, 263, 64))->hit);
}

}  // namespace
}  // namespace cliffguard
