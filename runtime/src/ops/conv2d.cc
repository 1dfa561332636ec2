// conv2d's part of the dispatch core. Keys, bundles and reports know conv2d; no
// conv2d entry point or kernel ships yet, so a call's arguments have no bounds here.
#include "ops/op_table.h"

namespace cliffguard::ops::conv2d {

ArgBounds KeyArgBounds(const OpKey&) { return {}; }

}  // namespace cliffguard::ops::conv2d
