// Bundles: flatbuffer files (formats/bundle.fbs) of tuned schedules for one device.
// BundleSpec is their in-memory form, used to write bundles (tuner, `cliffguard pack`)
// and to inspect them. Loading into a Runtime goes through Runtime::LoadBundle*.
//
// Bundles are untrusted input: ParseBundle verifies the buffer (flatbuffers
// Verifier), the file identifier and the schema version (older accepted, newer
// refused) before reading a field. Entry-level validation against this build's
// kernel variants is ValidateBundleEntries.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/file_io.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard {

inline constexpr uint32_t kBundleSchemaVersion = 1;
inline constexpr const char* kBundleFileIdentifier = "CGB1";
// Loading refuses files larger than this (bytes) before reading them.
inline constexpr int64_t kMaxBundleBytes = int64_t{1} << 31;

// A schedule by name, as stored in a bundle (not yet resolved against this build).
struct NamedSchedule {
  std::string variant;
  std::vector<std::pair<std::string, int64_t>> params;
  friend bool operator==(const NamedSchedule&, const NamedSchedule&) = default;
};
NamedSchedule ToNamed(const Schedule& s);

struct BundleEntry {
  OpKey key;
  NamedSchedule schedule;
  double tuned_us = 0;    // median time of the tuned schedule, microseconds
  double default_us = 0;  // median time of the default schedule, microseconds
  uint32_t trials = 0;
  uint64_t tuned_at = 0;  // unix seconds
  std::string provenance;
  // How far tuned_us and default_us moved within the tuner's confirmation
  // measurement: half the range of their per-round medians; 0: not recorded.
  double tuned_spread_us = 0;
  double default_spread_us = 0;
  // Bucket: the range [bucket_lo, bucket_hi] of the varying dimension (kVaryingDim:
  // m for gemm) whose missed keys of this entry's family (KeyFamily) run this
  // schedule; it holds the key's own value. 0, 0: no bucket (the key only).
  int64_t bucket_lo = 0;
  int64_t bucket_hi = 0;
  bool has_bucket() const { return bucket_hi > 0; }
};

// The schedule a runtime uses for a missed key of this op, dtype and shape class
// (op_key.h) before the built-in default. kUnspecified (bundles written before
// classes): the classes of this bundle's own entries of the op and dtype.
struct BundleOpDefault {
  OpKind op = OpKind::kGemm;
  DType dtype = DType::kF32;
  NamedSchedule schedule;
  ShapeClass shape_class = ShapeClass::kUnspecified;
};

// An entry or op default that ParseBundle could not decode: an op kind or dtype
// this build does not know (written by a newer producer), or a malformed key. The
// runtime rejects the same entries one by one when it loads the file.
struct UnreadableEntry {
  std::string where;   // "entry 5", "op default 1"
  std::string reason;  // names the value and the rule
};

struct BundleSpec {
  uint32_t schema_version = kBundleSchemaVersion;
  std::string producer = "cliffguard";
  std::string producer_version;  // defaults to this build's version when written
  uint64_t created_at = 0;       // unix seconds
  DeviceInfo device;             // backend, name, vendor, arch, properties, fingerprint
  std::vector<BundleEntry> entries;
  std::vector<BundleOpDefault> defaults;
  std::string cost_model_format;  // "" when there is no cost model
  std::vector<uint8_t> cost_model;
  std::vector<UnreadableEntry> unreadable;  // filled by ParseBundle; never written
};

const char* CliffguardVersion();  // "0.1.0"

// Serializes to flatbuffer bytes. Deterministic: equal specs give equal bytes.
std::vector<uint8_t> SerializeBundle(const BundleSpec& spec);

// Verifies and decodes a buffer. Errors (kDataLoss for corrupt or truncated data,
// kFailedPrecondition for a newer schema) name the source and the rule. Entries and
// op defaults it cannot decode are listed in `unreadable`, the rest are returned.
StatusOr<BundleSpec> ParseBundle(std::span<const uint8_t> bytes, std::string_view source = "buffer");

// Reads a bundle file: a file over kMaxBundleBytes is refused before any read, and
// one whose first 8 bytes lack the bundle file identifier before the rest is read.
StatusOr<std::vector<uint8_t>> ReadBundleFileBytes(const std::string& path);
StatusOr<BundleSpec> ReadBundleFile(const std::string& path);

Status WriteBundleFile(const std::string& path, const BundleSpec& spec);

// The JSON form read by `cliffguard pack` and printed by `cliffguard inspect --json`.
// BundleFromJson(BundleToJson(s)) reproduces s exactly (round-trip).
std::string BundleToJson(const BundleSpec& spec, int indent = 2);
StatusOr<BundleSpec> BundleFromJson(std::string_view json);

// Why one entry of a bundle cannot be used by this build on this device.
enum class EntryRejection : uint8_t {
  kUnknownVariant,   // the variant is not compiled into this build
  kBadParameter,     // unknown parameter name, or a value outside its range
  kUnsupported,      // the variant declines this key or this host
  kBadKey,           // a dimension breaks OpKey::Validate
  kDuplicateKey,     // the key appears twice; the first entry is kept
};
const char* EntryRejectionName(EntryRejection r);

struct RejectedEntry {
  OpKey key;
  EntryRejection reason;
  std::string message;  // names the value and the rule
};

// A bundle entry resolved against this build.
struct ResolvedEntry {
  OpKey key;
  Schedule schedule;
  double tuned_us = 0, default_us = 0;
  int64_t bucket_lo = 0, bucket_hi = 0;  // BundleEntry's; 0, 0: no bucket
};

// Why a bucket [lo, hi] cannot serve with `key` (the rule named), or Ok. lo = hi = 0
// (no bucket) is Ok.
Status CheckBucket(const OpKey& key, int64_t lo, int64_t hi);

// An op default resolved against this build: it serves missed keys of its op and
// dtype whose ShapeClassOf is in `classes` (a bit per ShapeClass value).
struct ResolvedDefault {
  OpKind op = OpKind::kGemm;
  DType dtype = DType::kF32;
  uint8_t classes = 0;
  Schedule schedule;
  bool Serves(const OpKey& key) const {
    return key.op == op && key.dtype == dtype && (classes >> static_cast<int>(ShapeClassOf(key)) & 1);
  }
};

struct ResolvedBundle {
  std::vector<ResolvedEntry> entries;
  std::vector<RejectedEntry> rejected;
  std::vector<ResolvedDefault> defaults;
  std::vector<RejectedEntry> rejected_defaults;
};

// Resolves every entry and op default against AllKernelVariants() for `device`.
// Bad entries are rejected with a reason; good ones are kept.
ResolvedBundle ResolveBundle(const BundleSpec& spec, const DeviceInfo& device);

}  // namespace cliffguard
