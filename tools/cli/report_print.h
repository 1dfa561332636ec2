#pragma once

#include <string>
#include <vector>

#include "cliffguard/miss_report.h"

namespace cliffguard::cli {

// The ranked, readable table of a miss report (used by `run` and `misses`).
std::string RenderMissReport(const MissReport& report, size_t max_rows = 0);

// One report as read, or several merged (MergeMissReports).
StatusOr<MissReport> ReadMergedMissReport(const std::vector<std::string>& paths);

}  // namespace cliffguard::cli
