// Internal: verified access to bundle flatbuffers.
#pragma once

#include <span>
#include <string_view>

#include "cliffguard/bundle.h"
#include "cliffguard/bundle_generated.h"

namespace cliffguard {

// Identifier, flatbuffers Verifier, schema version (older accepted, newer refused).
// The returned root points into `bytes`.
StatusOr<const fb::Bundle*> VerifyBundle(std::span<const uint8_t> bytes, std::string_view source);

DeviceInfo DeviceFromFlatbuffer(const fb::Device* d);

// Resolves the entries of a verified bundle against this build for `device`.
ResolvedBundle ResolveVerifiedBundle(const fb::Bundle& b, const DeviceInfo& device);

}  // namespace cliffguard
