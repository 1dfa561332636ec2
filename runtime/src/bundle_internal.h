// Internal: verified access to bundle flatbuffers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "cliffguard/bundle.h"
#include "cliffguard/bundle_generated.h"

namespace cliffguard {

// Flatbuffers reads 8-byte fields in place, and its Verifier checks their alignment
// relative to the start of the buffer only. A buffer at an address that is not
// 8-aligned (a blob embedded in a binary, an offset into a mapping) is copied into
// aligned storage before it is verified and read.
class AlignedBytes {
 public:
  explicit AlignedBytes(std::span<const uint8_t> bytes);
  std::span<const uint8_t> span() const { return view_; }

 private:
  std::vector<uint64_t> copy_;
  std::span<const uint8_t> view_;
};

// Identifier, flatbuffers Verifier, schema version (older accepted, newer refused).
// The returned root points into `bytes`, which must be 8-aligned (see AlignedBytes).
StatusOr<const fb::Bundle*> VerifyBundle(std::span<const uint8_t> bytes, std::string_view source);

DeviceInfo DeviceFromFlatbuffer(const fb::Device* d);

// Resolves the entries of a verified bundle against this build for `device`.
ResolvedBundle ResolveVerifiedBundle(const fb::Bundle& b, const DeviceInfo& device);

}  // namespace cliffguard
