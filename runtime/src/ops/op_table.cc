#include "ops/op_table.h"

namespace cliffguard {

const OpRuntime& OpRuntimeOf(OpKind op) {
  static constexpr OpRuntime kOps[kNumOpKinds] = {
#define CG_OP_KIND(e, name, ...) {&ops::name::KeyArgBounds},
#include "cliffguard/defs/op_kinds.inc"
  };
  return kOps[static_cast<int>(op)];
}

}  // namespace cliffguard
