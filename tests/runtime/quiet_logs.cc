// Test binaries log warnings and errors only; load details (info) would drown the output.
#include <spdlog/spdlog.h>

namespace {
const bool kQuiet = [] {
  spdlog::set_level(spdlog::level::warn);
  return true;
}();
}  // namespace
