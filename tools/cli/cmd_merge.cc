// `cliffguard merge`: combine bundles of one device. See docs/tuning.md.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cliffguard/bundle.h"
#include "cliffguard/tuner/bundle_writer.h"
#include "cliffguard/tuner/tuning_log.h"
#include "commands.h"

namespace cliffguard::cli {

void AddMergeCommand(CLI::App& app) {
  struct Opts {
    std::vector<std::string> inputs;
    std::string out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "merge", "Merge bundles of one device: for a key in several, keep the faster verified entry (lower tuned_us)");
  cmd->add_option("BUNDLES", o->inputs, "Bundles to merge (.cgb), all of the same device")->required();
  cmd->add_option("-o,--out", o->out, "Merged bundle to write (atomically)")->required();
  cmd->callback([o] {
    std::vector<BundleSpec> specs;
    for (const auto& path : o->inputs) {
      auto s = ReadBundleFile(path);
      ExitIfError(s.status(), "merge", kExitFailure);
      if (!s->unreadable.empty())
        Fail("merge", fmt::format("bundle '{}': {} entries this build cannot read ({}: {}); merging would drop them: "
                                  "merge with a cliffguard that reads them",
                                  path, s->unreadable.size(), s->unreadable[0].where, s->unreadable[0].reason),
             1);
      specs.push_back(std::move(*s));
    }
    auto merged = tuner::MergeBundles(specs, o->inputs, static_cast<uint64_t>(tuner::UnixNow()));
    ExitIfError(merged.status(), "merge", kExitFailure);
    size_t total = 0;
    for (const auto& s : specs) total += s.entries.size();
    ExitIfError(WriteBundleFile(o->out, *merged), "merge", kExitFailure);
    fmt::print("wrote {}: {} entries from {} bundles ({} entries in, {} duplicates resolved by lower tuned_us); device {}\n",
               o->out, merged->entries.size(), specs.size(), total, total - merged->entries.size(),
               merged->device.fingerprint);
  });
}

}  // namespace cliffguard::cli
