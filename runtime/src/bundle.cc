#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "bundle_internal.h"
#include "dispatch_table.h"
#include "cliffguard/bundle.h"

#ifndef CLIFFGUARD_VERSION
#define CLIFFGUARD_VERSION "0.0.0"
#endif

namespace cliffguard {
namespace {

// The schema's enums mirror the tables (defs/*.inc), value for value.
#define CG_OP_KIND(e, name, ...) static_assert(int(fb::OpKind::name) == int(OpKind::e));
#include "cliffguard/defs/op_kinds.inc"
#define CG_DTYPE(e, name, ...) static_assert(int(fb::DType::name) == int(DType::e));
#include "cliffguard/defs/dtypes.inc"
#define CG_BACKEND(e, name) static_assert(int(fb::Backend::name) == int(Backend::e));
#include "cliffguard/defs/backends.inc"
static_assert(int(fb::OpKind::MAX) + 1 == kNumOpKinds && int(fb::DType::MAX) + 1 == kNumDTypes);

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }
std::string_view View(const flatbuffers::String* s) { return s ? s->string_view() : std::string_view(); }

flatbuffers::Offset<fb::Schedule> WriteSchedule(flatbuffers::FlatBufferBuilder& fbb, const NamedSchedule& s) {
  std::vector<flatbuffers::Offset<fb::Param>> params;
  params.reserve(s.params.size());
  // Names repeat across entries: shared strings keep a large bundle small.
  for (const auto& [name, value] : s.params) params.push_back(fb::CreateParam(fbb, fbb.CreateSharedString(name), value));
  return fb::CreateSchedule(fbb, fbb.CreateSharedString(s.variant), fbb.CreateVector(params));
}

NamedSchedule ReadSchedule(const fb::Schedule* s) {
  NamedSchedule out;
  if (!s) return out;
  out.variant = Str(s->variant());
  if (s->params())
    for (const fb::Param* p : *s->params()) out.params.emplace_back(Str(p->name()), p->value());
  return out;
}

// The Verifier checks a vector's length field (4-byte aligned) but not the alignment
// of its 8-byte elements, so they are read by copy, never through an int64_t pointer.
int64_t LongAt(const flatbuffers::Vector<int64_t>& v, flatbuffers::uoffset_t i) {
  int64_t x;
  std::memcpy(&x, v.Data() + size_t(i) * sizeof(x), sizeof(x));
  return flatbuffers::EndianScalar(x);
}

// Decodes a key, checking enum ranges and dimension counts; Validate() last.
StatusOr<OpKey> ReadKey(const fb::OpKey* k) {
  if (!k) return InvalidArgument("entry has no key");
  const auto op = static_cast<uint8_t>(k->op()), dt = static_cast<uint8_t>(k->dtype());
  if (op >= kNumOpKinds) return InvalidArgument(fmt::format("op kind {} is unknown", op));
  if (dt >= kNumDTypes) return InvalidArgument(fmt::format("dtype {} is unknown", dt));
  OpKey key;
  key.op = static_cast<OpKind>(op);
  key.dtype = static_cast<DType>(dt);
  key.trans_a = k->trans_a();
  key.trans_b = k->trans_b();
  key.constant_weights = k->constant_weights();
  const int nshape = InfoOf(key.op).shape_dims, nattrs = InfoOf(key.op).dims - nshape;
  const size_t got_shape = k->shape() ? k->shape()->size() : 0, got_attrs = k->attrs() ? k->attrs()->size() : 0;
  if (got_shape != size_t(nshape) || got_attrs != size_t(nattrs))
    return InvalidArgument(fmt::format("{} key needs {} shape and {} attribute values, has {} and {}",
                                       OpKindName(key.op), nshape, nattrs, got_shape, got_attrs));
  for (int i = 0; i < nshape; ++i) key.dims[i] = LongAt(*k->shape(), i);
  for (int i = 0; i < nattrs; ++i) key.dims[nshape + i] = LongAt(*k->attrs(), i);
  CG_RETURN_IF_ERROR(key.Validate());
  return key;
}

flatbuffers::Offset<fb::OpKey> WriteKey(flatbuffers::FlatBufferBuilder& fbb, const OpKey& key) {
  const int nshape = InfoOf(key.op).shape_dims, nattrs = InfoOf(key.op).dims - nshape;
  std::vector<int64_t> shape(key.dims.begin(), key.dims.begin() + nshape);
  std::vector<int64_t> attrs(key.dims.begin() + nshape, key.dims.begin() + nshape + nattrs);
  return fb::CreateOpKeyDirect(fbb, static_cast<fb::OpKind>(key.op), static_cast<fb::DType>(key.dtype), key.trans_a,
                               key.trans_b, &shape, &attrs, key.constant_weights);
}

// Resolves a stored schedule by name (Schedule::SetParam's checks); cached variant
// lookup for the common case of many entries naming the same variant.
struct ScheduleResolver {
  const KernelVariant* last = nullptr;

  Status Resolve(const fb::Schedule* s, Schedule& out, EntryRejection& why) {
    why = EntryRejection::kUnknownVariant;
    if (!s || !s->variant()) return NotFound("schedule names no kernel variant");
    const std::string_view name = s->variant()->string_view();
    if (!last || name != last->name) last = FindKernelVariant(name);
    if (!last) return NotFound(fmt::format("kernel variant '{}' is not in this build", name));
    out = Schedule::Defaults(*last);
    why = EntryRejection::kBadParameter;
    uint32_t seen = 0;
    if (s->params())
      for (const fb::Param* p : *s->params()) CG_RETURN_IF_ERROR(out.SetParam(View(p->name()), p->value(), seen));
    return Status::Ok();
  }
};

}  // namespace

const char* CliffguardVersion() { return CLIFFGUARD_VERSION; }

const char* EntryRejectionName(EntryRejection r) {
  switch (r) {
    case EntryRejection::kUnknownVariant: return "unknown_variant";
    case EntryRejection::kBadParameter: return "bad_parameter";
    case EntryRejection::kUnsupported: return "unsupported";
    case EntryRejection::kBadKey: return "bad_key";
    case EntryRejection::kDuplicateKey: return "duplicate_key";
  }
  return "?";
}

NamedSchedule ToNamed(const Schedule& s) {
  NamedSchedule n;
  if (s.variant) n.variant = s.variant->name;
  n.params = s.Named();
  return n;
}

std::vector<uint8_t> SerializeBundle(const BundleSpec& spec) {
  flatbuffers::FlatBufferBuilder fbb(1024 + spec.entries.size() * 256 + spec.cost_model.size());
  std::vector<flatbuffers::Offset<fb::DeviceProperty>> props;
  for (const auto& [name, value] : spec.device.properties)
    props.push_back(fb::CreateDevicePropertyDirect(fbb, name.c_str(), value));
  auto device = fb::CreateDeviceDirect(fbb, static_cast<fb::Backend>(spec.device.backend), spec.device.name.c_str(),
                                       spec.device.vendor.c_str(), spec.device.arch.c_str(), &props,
                                       spec.device.fingerprint.c_str());
  std::vector<flatbuffers::Offset<fb::Entry>> entries;
  entries.reserve(spec.entries.size());
  for (const BundleEntry& e : spec.entries) {
    auto key = WriteKey(fbb, e.key);
    auto sched = WriteSchedule(fbb, e.schedule);
    entries.push_back(fb::CreateEntry(fbb, key, sched, e.tuned_us, e.default_us, e.trials, e.tuned_at,
                                      fbb.CreateSharedString(e.provenance), e.tuned_spread_us, e.default_spread_us,
                                      e.bucket_lo, e.bucket_hi));
  }
  std::vector<flatbuffers::Offset<fb::OpDefault>> defaults;
  for (const BundleOpDefault& d : spec.defaults)
    defaults.push_back(fb::CreateOpDefault(fbb, static_cast<fb::OpKind>(d.op), static_cast<fb::DType>(d.dtype),
                                           WriteSchedule(fbb, d.schedule),
                                           static_cast<fb::ShapeClass>(d.shape_class)));
  const std::string version = spec.producer_version.empty() ? CliffguardVersion() : spec.producer_version;
  auto root = fb::CreateBundleDirect(fbb, spec.schema_version, spec.producer.c_str(), version.c_str(),
                                     spec.created_at, device, &entries, &defaults, spec.cost_model_format.c_str(),
                                     spec.cost_model.empty() ? nullptr : &spec.cost_model);
  fb::FinishBundleBuffer(fbb, root);
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

AlignedBytes::AlignedBytes(std::span<const uint8_t> bytes) : view_(bytes) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint64_t) == 0) return;
  copy_.resize((bytes.size() + sizeof(uint64_t) - 1) / sizeof(uint64_t));
  if (!bytes.empty()) std::memcpy(copy_.data(), bytes.data(), bytes.size());
  view_ = {reinterpret_cast<const uint8_t*>(copy_.data()), bytes.size()};
}

StatusOr<const fb::Bundle*> VerifyBundle(std::span<const uint8_t> bytes, std::string_view source) {
  if (bytes.size() < 8)
    return DataLoss(fmt::format("bundle '{}': {} bytes is too short to be a bundle (at least 8)", source, bytes.size()));
  if (bytes.size() > static_cast<size_t>(kMaxBundleBytes))
    return DataLoss(fmt::format("bundle '{}': {} bytes exceeds the limit of {}", source, bytes.size(), kMaxBundleBytes));
  if (!fb::BundleBufferHasIdentifier(bytes.data())) {
    std::string got;
    for (int i = 4; i < 8; ++i) got += std::isprint(bytes[i]) ? char(bytes[i]) : '?';
    return DataLoss(fmt::format("bundle '{}': file identifier '{}' is not '{}' (not a cliffguard bundle)", source, got,
                                kBundleFileIdentifier));
  }
  // Depth 64; tables bounded by size (a table needs at least 4 bytes).
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), 64, static_cast<flatbuffers::uoffset_t>(bytes.size() / 4 + 16));
  if (!fb::VerifyBundleBuffer(verifier))
    return DataLoss(fmt::format("bundle '{}': flatbuffer verification failed (truncated or corrupt file)", source));
  const fb::Bundle* b = fb::GetBundle(bytes.data());
  if (b->schema_version() > kBundleSchemaVersion)
    return FailedPrecondition(fmt::format("bundle '{}': schema_version {} is newer than this build reads ({}); "
                                          "upgrade cliffguard or re-tune",
                                          source, b->schema_version(), kBundleSchemaVersion));
  if (b->schema_version() == 0) return DataLoss(fmt::format("bundle '{}': schema_version 0 is invalid", source));
  if (!b->device()) return DataLoss(fmt::format("bundle '{}': has no device", source));
  const auto backend = static_cast<uint8_t>(b->device()->backend());
  if (backend > static_cast<uint8_t>(fb::Backend::MAX))
    return DataLoss(fmt::format("bundle '{}': device backend {} is unknown", source, backend));
  return b;
}

DeviceInfo DeviceFromFlatbuffer(const fb::Device* d) {
  DeviceInfo out;
  out.backend = static_cast<Backend>(d->backend());
  out.name = Str(d->name());
  out.vendor = Str(d->vendor());
  out.arch = Str(d->arch());
  out.fingerprint = Str(d->fingerprint());
  if (d->properties()) {
    for (const fb::DeviceProperty* p : *d->properties()) {
      const std::string name = Str(p->name());
      const int64_t v = p->value();
      out.properties.emplace_back(name, v);
      if (name == "family") out.family = static_cast<int>(v);
      else if (name == "model") out.model = static_cast<int>(v);
      else if (name == "isa") out.isa = static_cast<uint32_t>(v);
      else if (name == "threads") out.threads = static_cast<int>(v);
      else if (name == "l1d_bytes") out.l1d_bytes = v;
      else if (name == "l2_bytes") out.l2_bytes = v;
      else if (name == "l3_bytes") out.l3_bytes = v;
    }
  }
  return out;
}

StatusOr<BundleSpec> ParseBundle(std::span<const uint8_t> bytes, std::string_view source) {
  const AlignedBytes aligned(bytes);
  CG_ASSIGN_OR_RETURN(const fb::Bundle* b, VerifyBundle(aligned.span(), source));
  BundleSpec spec;
  spec.schema_version = b->schema_version();
  spec.producer = Str(b->producer());
  spec.producer_version = Str(b->producer_version());
  spec.created_at = b->created_at();
  spec.device = DeviceFromFlatbuffer(b->device());
  if (b->entries()) {
    spec.entries.reserve(b->entries()->size());
    for (flatbuffers::uoffset_t i = 0; i < b->entries()->size(); ++i) {
      const fb::Entry* e = b->entries()->Get(i);
      auto key = ReadKey(e->key());
      if (!key.ok()) {
        spec.unreadable.push_back({fmt::format("entry {}", i), std::string(key.status().message())});
        continue;
      }
      BundleEntry out;
      out.key = *key;
      out.schedule = ReadSchedule(e->schedule());
      out.tuned_us = e->tuned_us();
      out.default_us = e->default_us();
      out.tuned_spread_us = e->tuned_spread_us();
      out.default_spread_us = e->default_spread_us();
      out.bucket_lo = e->bucket_lo();
      out.bucket_hi = e->bucket_hi();
      out.trials = e->trials();
      out.tuned_at = e->tuned_at();
      out.provenance = Str(e->provenance());
      spec.entries.push_back(std::move(out));
    }
  }
  if (b->defaults()) {
    for (flatbuffers::uoffset_t i = 0; i < b->defaults()->size(); ++i) {
      const fb::OpDefault* d = b->defaults()->Get(i);
      const auto op = static_cast<uint8_t>(d->op()), dt = static_cast<uint8_t>(d->dtype()),
                 sc = static_cast<uint8_t>(d->shape_class());
      if (op >= kNumOpKinds || dt >= kNumDTypes || sc >= kNumShapeClasses) {
        spec.unreadable.push_back({fmt::format("op default {}", i), op >= kNumOpKinds ? fmt::format("op kind {} is unknown", op)
                                                                   : dt >= kNumDTypes ? fmt::format("dtype {} is unknown", dt)
                                                                                      : fmt::format("shape class {} is unknown", sc)});
        continue;
      }
      spec.defaults.push_back(
          {static_cast<OpKind>(op), static_cast<DType>(dt), ReadSchedule(d->schedule()), static_cast<ShapeClass>(sc)});
    }
  }
  spec.cost_model_format = Str(b->cost_model_format());
  if (b->cost_model()) spec.cost_model.assign(b->cost_model()->begin(), b->cost_model()->end());
  return spec;
}

ResolvedBundle ResolveVerifiedBundle(const fb::Bundle& b, const DeviceInfo& device) {
  ResolvedBundle out;
  ScheduleResolver resolver;
  KeyIndex seen(b.entries() ? b.entries()->size() : 0);
  auto key_at = [&](uint32_t j) -> const OpKey& { return out.entries[j].key; };
  if (b.entries()) {
    out.entries.reserve(b.entries()->size());
    for (const fb::Entry* e : *b.entries()) {
      auto key = ReadKey(e->key());
      if (!key.ok()) {
        out.rejected.push_back({OpKey{}, EntryRejection::kBadKey, key.status().message()});
        continue;
      }
      ResolvedEntry r;
      r.key = *key;
      r.tuned_us = e->tuned_us();
      r.default_us = e->default_us();
      r.bucket_lo = e->bucket_lo();
      r.bucket_hi = e->bucket_hi();
      EntryRejection why;
      Status st = resolver.Resolve(e->schedule(), r.schedule, why);
      if (Status b = CheckBucket(r.key, r.bucket_lo, r.bucket_hi); !b.ok()) {
        st = b;
        why = EntryRejection::kBadParameter;
      }
      if (st.ok()) {
        why = EntryRejection::kUnsupported;
        st = CheckSchedule(r.schedule, r.key, device);
      }
      if (!st.ok()) {
        out.rejected.push_back({r.key, why, fmt::format("{}: {}", r.key.ToString(), st.message())});
        continue;
      }
      if (seen.InsertOrFind(r.key, static_cast<uint32_t>(out.entries.size()), key_at) >= 0) {
        out.rejected.push_back({r.key, EntryRejection::kDuplicateKey,
                                fmt::format("{}: appears more than once; the first entry is kept", r.key.ToString())});
        continue;
      }
      out.entries.push_back(r);
    }
  }
  if (b.defaults()) {
    for (const fb::OpDefault* d : *b.defaults()) {
      OpKey key;
      key.op = static_cast<OpKind>(d->op());
      key.dtype = static_cast<DType>(d->dtype());
      Schedule s;
      EntryRejection why;
      Status st = resolver.Resolve(d->schedule(), s, why);
      if (st.ok()) {
        st = VariantRunsOn(*s.variant, key.op, key.dtype, device);
        if (!st.ok()) why = EntryRejection::kUnsupported;
      }
      const auto sc = static_cast<uint8_t>(d->shape_class());
      if (st.ok() && sc >= kNumShapeClasses) {
        why = EntryRejection::kUnsupported;
        st = Unimplemented(fmt::format("shape class {} is unknown to this build", sc));
      }
      if (!st.ok()) {
        out.rejected_defaults.push_back({key, why, fmt::format("default for {} {}: {}", OpKindName(key.op),
                                                               DTypeName(key.dtype), st.message())});
        continue;
      }
      ResolvedDefault rd{key.op, key.dtype, static_cast<uint8_t>(1u << sc), s};
      if (sc == static_cast<uint8_t>(ShapeClass::kUnspecified)) {
        rd.classes = 0;  // the classes of this bundle's own entries of the op
        for (const ResolvedEntry& e : out.entries)
          if (e.key.op == rd.op && e.key.dtype == rd.dtype) rd.classes |= uint8_t(1u << static_cast<int>(ShapeClassOf(e.key)));
      }
      out.defaults.push_back(rd);
    }
  }
  return out;
}

Status CheckBucket(const OpKey& key, int64_t lo, int64_t hi) {
  if (lo == 0 && hi == 0) return Status::Ok();
  const int64_t v = key.dims[kVaryingDim];
  constexpr int64_t kMax = int64_t{1} << 31;
  if (!(lo >= 1 && lo <= v && v <= hi && hi <= kMax))
    return InvalidArgument(fmt::format("bucket [{}, {}] of {} must satisfy 1 <= lo <= {}={} <= hi <= 2^31",
                                       lo, hi, key.ToString(), VaryingDimName(key.op), v));
  return Status::Ok();
}

ResolvedBundle ResolveBundle(const BundleSpec& spec, const DeviceInfo& device) {
  const std::vector<uint8_t> bytes = SerializeBundle(spec);
  return ResolveVerifiedBundle(*fb::GetBundle(bytes.data()), device);
}

namespace {

Status CheckBundleHead(const std::string& path, std::span<const uint8_t> head) {
  if (head.size() < 8) return Status::Ok();  // too short: VerifyBundle names it
  if (fb::BundleBufferHasIdentifier(head.data())) return Status::Ok();
  return VerifyBundle(head, path).status();   // the identifier message, without reading the rest
}

}  // namespace

StatusOr<std::vector<uint8_t>> ReadBundleFileBytes(const std::string& path) {
  return ReadFileBytesChecked(path, kMaxBundleBytes, 8, CheckBundleHead);
}

StatusOr<BundleSpec> ReadBundleFile(const std::string& path) {
  CG_ASSIGN_OR_RETURN(auto bytes, ReadBundleFileBytes(path));
  return ParseBundle(bytes, path);
}


Status WriteBundleFile(const std::string& path, const BundleSpec& spec) {
  const std::vector<uint8_t> bytes = SerializeBundle(spec);
  return WriteFileAtomic(path, bytes);
}

}  // namespace cliffguard
