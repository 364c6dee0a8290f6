// upload_ring.h: the bookkeeping of a ring of pinned host slots through which a device
// backend sends small host buffers (a micro-batch's token ids) to the device without
// stalling: the host copies the buffer into the next slot and queues the device copy from
// there on the compute stream (a copy from pageable memory would wait for the stream to
// drain first); an event recorded after that copy guards the slot, and the host waits for
// it only when it comes round to the slot again while the copy is still queued, that is
// when it runs CUDA_UPLOAD_SLOTS copies ahead of the device.
//
// The events are a small table of callbacks (cudaEventQuery / cudaEventSynchronize on the
// CUDA backend), so that the bookkeeping is plain C, tested on the CPU with fake events
// (tests/test_workspace.c).
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    void *ctx;
    // Has the copy last issued from `slot` completed? (non-blocking)
    int (*done)(void *ctx, int slot);
    // Blocks until it has.
    void (*wait)(void *ctx, int slot);
} upload_events;

typedef struct {
    char *base;        // n_slots * slot_bytes of pinned host memory (the caller's)
    size_t slot_bytes; // the largest buffer a slot takes
    int n_slots;
    int next;            // the slot the next copy takes
    unsigned char *busy; // (n_slots): a copy issued from the slot may still be reading it
    upload_events ev;    // (copied)
    uint64_t copies;     // copies through the ring
    uint64_t waits;      // of those, how many waited for their slot's previous copy
} upload_ring;

// A ring over `base` (n_slots >= 1 slots of slot_bytes each), every slot free.
void upload_ring_init(upload_ring *r, void *base, size_t slot_bytes, int n_slots,
                      const upload_events *ev);
void upload_ring_free(upload_ring *r);

// The host memory for the next copy of `bytes`, and its slot in *slot: the next slot in
// turn, once the copy issued from it before has completed (waited for if it has not). NULL
// (no slot taken, *slot = -1) when bytes > slot_bytes or the ring has no memory: the caller
// copies another way.
void *upload_ring_take(upload_ring *r, size_t bytes, int *slot);
// The caller has queued the copy from `slot` and recorded its event: the slot stays busy
// until that event completes.
void upload_ring_issued(upload_ring *r, int slot);
