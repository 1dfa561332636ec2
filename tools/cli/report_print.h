#pragma once

#include <string>

#include "cliffguard/miss_report.h"

namespace cliffguard::cli {

// The ranked, readable table of a miss report (used by `run` and `misses`).
std::string RenderMissReport(const MissReport& report, size_t max_rows = 0);

}  // namespace cliffguard::cli
