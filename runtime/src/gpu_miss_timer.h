// Internal (builds with CUDA): missed calls on a GPU timed by CUDA events on the
// call's stream, read on a later miss of the same record with cudaEventQuery, so
// the miss path never waits for the GPU. Each thread keeps one measurement in flight
// per record (16 slots); the calls counted between two completed measurements are
// priced at the later one's time. Calls whose measurement has not completed when a
// report is taken are counted without time until it does.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_probe.h"
#include "runtime_impl.h"

namespace cliffguard {

struct GpuMissSlot {
  MissEntry* entry = nullptr;
  void* events = nullptr;  // cuda::NewEventPair(), kept for the thread's life
  bool pending = false;
  uint64_t weight = 0;        // calls the pending measurement stands for
  uint64_t unattributed = 0;  // calls counted since the pending measurement started
  uint64_t t0 = 0;            // host ticks when the pending call was launched
};
inline thread_local GpuMissSlot t_gpu_miss_slots[16];

template <typename RunFn>
Status RunGpuMissed(Runtime::Impl& r, uint32_t stripe, MissEntry* e, ServedBy by, void* stream, RunFn&& run) {
  GpuMissSlot& slot = t_gpu_miss_slots[(reinterpret_cast<uintptr_t>(e) >> 6) % 16];
  if (slot.entry != e) {  // another record's measurement in flight is dropped (its calls stay counted)
    slot.entry = e;
    slot.pending = false;
    slot.unattributed = 0;
  }
  e->Count(stripe, by);
  ++slot.unattributed;
  const uint64_t now = TickClock::Now();
  if (slot.pending) {
    double us = 0;
    const int done = cuda::PollElapsedMicroseconds(slot.events, &us);
    if (done == 1) {
      const uint64_t ticks = static_cast<uint64_t>(us * r.clock.TicksPerMicrosecond());
      e->Record(stripe, by, 0, ticks * slot.weight, slot.t0, slot.t0 + ticks);
    }
    slot.pending = done == 0;
  }
  if (!slot.events) slot.events = cuda::NewEventPair();
  if (slot.pending || !slot.events || !cuda::RecordEventOf(slot.events, 0, stream)) return run();
  Status st = run();
  if (st.ok() && cuda::RecordEventOf(slot.events, 1, stream)) {
    slot.pending = true;
    slot.weight = slot.unattributed;
    slot.unattributed = 0;
    slot.t0 = now;
  }
  return st;
}

}  // namespace cliffguard
