// Internal: what the dispatch core needs from each op, one row per op kind
// (cliffguard/defs/op_kinds.inc). An op provides these in its own file,
// runtime/src/ops/<name>.cc, as functions in namespace cliffguard::ops::<name>; the
// core reaches them only through OpRuntimeOf.
#pragma once

#include "cliffguard/op_key.h"
#include "dispatch_table.h"

namespace cliffguard {

struct OpRuntime {
  // The bounds a call with this (valid) key must meet, checked on every hit.
  ArgBounds (*arg_bounds)(const OpKey& key);
};

namespace ops {
#define CG_OP_KIND(e, name, ...) \
  namespace name {               \
  ArgBounds KeyArgBounds(const OpKey& key); \
  }
#include "cliffguard/defs/op_kinds.inc"
}  // namespace ops

// Precondition: op is a valid OpKind.
const OpRuntime& OpRuntimeOf(OpKind op);

}  // namespace cliffguard
