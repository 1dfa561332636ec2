// The loaded bundle set: verification and device rule, the dispatch table built
// from it and swapped in atomically, reclamation of retired tables, load logs.
#include <algorithm>

#include <fmt/format.h>

#include "bundle_internal.h"
#include "cliffguard/detail/logging.h"
#include "cliffguard/file_io.h"
#include "runtime_impl.h"

namespace cliffguard {

namespace {

// The properties of a bundle's device that differ from this one, for people.
std::string DeviceDifference(const DeviceInfo& b, const DeviceInfo& here) {
  std::vector<std::string> d;
  if (b.backend != here.backend) d.push_back(fmt::format("backend {}, here {}", BackendName(b.backend), BackendName(here.backend)));
  if (b.vendor != here.vendor) d.push_back(fmt::format("vendor '{}', here '{}'", b.vendor, here.vendor));
  if (b.name != here.name) d.push_back(fmt::format("model '{}', here '{}'", b.name, here.name));
  if (b.family != here.family || b.model != here.model)
    d.push_back(fmt::format("family/model {}/{}, here {}/{}", b.family, b.model, here.family, here.model));
  if (b.arch != here.arch) d.push_back(fmt::format("ISA {}, here {}", b.arch, here.arch));
  if (b.l1d_bytes != here.l1d_bytes || b.l2_bytes != here.l2_bytes || b.l3_bytes != here.l3_bytes)
    d.push_back(fmt::format("caches L1d/L2/L3 {}/{}/{} KiB, here {}/{}/{} KiB", b.l1d_bytes >> 10, b.l2_bytes >> 10,
                            b.l3_bytes >> 10, here.l1d_bytes >> 10, here.l2_bytes >> 10, here.l3_bytes >> 10));
  if (b.threads != here.threads) d.push_back(fmt::format("thread budget {}, here {}", b.threads, here.threads));
  std::string out;
  for (const std::string& x : d) out += (out.empty() ? "" : "; ") + x;
  return out.empty() ? "the fingerprints differ" : out;
}

}  // namespace

StatusOr<LoadedBundle> Runtime::Impl::Prepare(std::span<const uint8_t> bytes, const std::string& source) const {
  const AlignedBytes aligned(bytes);
  CG_ASSIGN_OR_RETURN(const fb::Bundle* b, VerifyBundle(aligned.span(), source));
  LoadedBundle lb;
  LoadReport& r = lb.report;
  r.source = source;
  r.producer = b->producer() ? b->producer()->str() : "";
  r.producer_version = b->producer_version() ? b->producer_version()->str() : "";
  r.schema_version = b->schema_version();
  r.device_fingerprint = b->device()->fingerprint() ? b->device()->fingerprint()->str() : "";
  r.entries_total = b->entries() ? b->entries()->size() : 0;
  const DeviceInfo bd = DeviceFromFlatbuffer(b->device());
  if (FingerprintMatches(device, r.device_fingerprint)) {
    r.device_match = true;
    r.device_rule = "exact";
  } else if (options.allow_same_arch_bundles && bd.backend == device.backend && bd.arch == device.arch) {
    r.device_match = true;
    r.device_rule = "same-arch";
  } else {
    r.device_rule = fmt::format("device '{}' is not this device '{}': {}", r.device_fingerprint, device.fingerprint,
                                DeviceDifference(bd, device));
  }
  if (r.device_match) {
    lb.resolved = ResolveVerifiedBundle(*b, device);
    r.entries_loaded = lb.resolved.entries.size();
    r.rejected = lb.resolved.rejected;
    r.rejected.insert(r.rejected.end(), lb.resolved.rejected_defaults.begin(), lb.resolved.rejected_defaults.end());
    r.defaults_loaded = lb.resolved.defaults.size();
  }
  return lb;
}


// Warnings about a bundle are given once per (source, device, outcome); reloading
// the same file logs them again at info level only.
void Runtime::Impl::LogLoad(const LoadReport& r) {
  const std::string id = fmt::format("{}|{}|{}|{}", r.source, r.device_fingerprint, r.device_rule, r.rejected.size());
  bool first;
  {
    std::lock_guard<std::mutex> lock(warned_mu);
    first = warned_bundles.insert(id).second;
  }
  const LogLevel warn = first ? LogLevel::kWarn : LogLevel::kInfo;
  if (!r.device_match) {
    // Only the thread budget differs: the advice is to tune for this budget or relax the rule.
    const bool budget_only = r.device_rule.find("; ") == std::string::npos &&
                             r.device_rule.find(": thread budget ") != std::string::npos;
    logging::Log(warn, "bundle '{}' ({} {}) is for another device and is not applied: {}{}", r.source, r.producer,
                 r.producer_version, r.device_rule,
                 budget_only ? fmt::format(". Tune for this budget (tune --threads {}), or accept bundles of the same "
                                           "ISA (CLIFFGUARD_SAME_ARCH=1, RuntimeOptions::allow_same_arch_bundles)",
                                           device.threads)
                             : "");
    return;
  }
  logging::Info("bundle '{}' ({} {}, schema {}): {} of {} entries loaded ({} rejected), device rule {}", r.source,
                r.producer, r.producer_version, r.schema_version, r.entries_loaded, r.entries_total, r.rejected.size(),
                r.device_rule);
  for (const RejectedEntry& e : r.rejected)
    logging::Log(warn, "bundle '{}': entry rejected ({}): {}", r.source, EntryRejectionName(e.reason), e.message);
}

void Runtime::Impl::RebuildLocked() {
  std::vector<DispatchTable::Input> in;
  std::vector<ResolvedDefault> defaults;
  bool has_device_bundle = false;
  size_t expected = 0;
  for (const LoadedBundle& b : bundles) expected += b.resolved.entries.size() + b.resolved.rejected.size();
  in.reserve(expected);
  KeyIndex index(expected);
  auto key_at = [&](uint32_t j) -> const OpKey& { return in[j].key; };
  for (const LoadedBundle& b : bundles) {
    if (!b.report.device_match) continue;
    has_device_bundle = true;
    if (options.disable) continue;  // loaded and reported, never used
    for (const ResolvedEntry& e : b.resolved.entries) {
      const int64_t at = index.InsertOrFind(e.key, static_cast<uint32_t>(in.size()), key_at);
      if (at < 0) {
        in.push_back({e.key, e.schedule, false, e.tuned_us, e.default_us, e.bucket_lo, e.bucket_hi});
        continue;
      }
      DispatchTable::Input& cur = in[size_t(at)];  // the faster verified entry wins
      if (cur.rejected || (e.tuned_us > 0 && (cur.tuned_us <= 0 || e.tuned_us < cur.tuned_us)))
        cur = {e.key, e.schedule, false, e.tuned_us, e.default_us, e.bucket_lo, e.bucket_hi};
    }
    for (const RejectedEntry& r : b.resolved.rejected) {
      if (r.reason == EntryRejection::kBadKey || r.reason == EntryRejection::kDuplicateKey) continue;
      if (index.InsertOrFind(r.key, static_cast<uint32_t>(in.size()), key_at) < 0) {
        DispatchTable::Input x;
        x.key = r.key;
        x.rejected = true;
        in.push_back(x);
      }
    }
    for (ResolvedDefault d : b.resolved.defaults) {  // per (op, dtype, class): the first bundle's wins
      for (const ResolvedDefault& x : defaults)
        if (x.op == d.op && x.dtype == d.dtype) d.classes &= uint8_t(~x.classes);
      if (d.classes) defaults.push_back(d);
    }
  }
  auto t = std::make_unique<DispatchTable>(std::move(in), has_device_bundle, std::move(defaults), ++generation);
  table.store(t.get(), std::memory_order_seq_cst);
  tables.push_back(std::move(t));
  ReclaimLocked();
}

// Frees retired tables no slot still points at. Caller holds load_mu.
void Runtime::Impl::ReclaimLocked() {
  std::unordered_set<const DispatchTable*> live;
  live.insert(table.load(std::memory_order_seq_cst));
  slots.AddLiveTables(live);
  std::erase_if(tables, [&](const std::unique_ptr<const DispatchTable>& t) { return !live.count(t.get()); });
}

StatusOr<LoadReport> Runtime::LoadBundleBuffer(std::span<const uint8_t> bytes, const std::string& source) {
  CG_ASSIGN_OR_RETURN(LoadedBundle lb, impl_->Prepare(bytes, source));
  impl_->LogLoad(lb.report);
  LoadReport report = lb.report;
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  impl_->bundles.push_back(std::move(lb));
  ++impl_->bundle_loads_total;
  impl_->entries_rejected_total += report.rejected.size();
  impl_->RebuildLocked();
  return report;
}

StatusOr<LoadReport> Runtime::LoadBundleFile(const std::string& path) {
  CG_ASSIGN_OR_RETURN(auto bytes, ReadBundleFileBytes(path));
  return LoadBundleBuffer(bytes, path);
}

StatusOr<std::vector<LoadReport>> Runtime::ReplaceBundles(const std::vector<std::string>& paths) {
  std::vector<LoadedBundle> fresh;
  for (const std::string& p : paths) {
    CG_ASSIGN_OR_RETURN(auto bytes, ReadBundleFileBytes(p));
    CG_ASSIGN_OR_RETURN(LoadedBundle lb, impl_->Prepare(bytes, p));
    fresh.push_back(std::move(lb));
  }
  std::vector<LoadReport> reports;
  for (const auto& lb : fresh) {
    impl_->LogLoad(lb.report);
    reports.push_back(lb.report);
  }
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  impl_->bundles = std::move(fresh);
  ++impl_->reloads_total;
  impl_->bundle_loads_total += reports.size();
  for (const LoadReport& r : reports) impl_->entries_rejected_total += r.rejected.size();
  impl_->RebuildLocked();
  return reports;
}

void Runtime::UnloadAll() {
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  impl_->bundles.clear();
  ++impl_->reloads_total;
  impl_->RebuildLocked();
}

std::vector<LoadReport> Runtime::LoadReports() const {
  std::lock_guard<std::mutex> lock(impl_->load_mu);
  std::vector<LoadReport> out;
  for (const auto& b : impl_->bundles) out.push_back(b.report);
  return out;
}

}  // namespace cliffguard
