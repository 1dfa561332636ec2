// Helpers shared by the subcommands: plain-text tables, device differences. (Shapes: ParseShape, op_key.h.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard::cli {

// Left-aligned text columns, numbers right-aligned; header underlined.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string HumanMicros(double us);  // "12.3 us", "4.56 ms", "7.89 s"

// What a bundle's device and a device here differ in: "name 'A' (here 'B'), threads 4
// (here 2)". The ISA bits are left to `arch`, which names their level.
std::string DeviceDifferences(const DeviceInfo& bundle, const DeviceInfo& here);

}  // namespace cliffguard::cli
