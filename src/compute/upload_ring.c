// upload_ring.c: see upload_ring.h.
#include "compute/upload_ring.h"

#include <string.h>

#include "base/common.h"

void upload_ring_init(upload_ring *r, void *base, size_t slot_bytes, int n_slots,
                      const upload_events *ev) {
    TRI_ASSERT(n_slots >= 1 && ev && ev->done && ev->wait);
    memset(r, 0, sizeof *r);
    r->base = base;
    r->slot_bytes = slot_bytes;
    r->n_slots = n_slots;
    r->busy = xcalloc((size_t)n_slots, 1);
    r->ev = *ev;
}

void upload_ring_free(upload_ring *r) {
    free(r->busy);
    memset(r, 0, sizeof *r);
}

void *upload_ring_take(upload_ring *r, size_t bytes, int *slot) {
    *slot = -1;
    if (!r->base || bytes > r->slot_bytes) return NULL;
    const int k = r->next;
    if (r->busy[k] && !r->ev.done(r->ev.ctx, k)) {
        r->ev.wait(r->ev.ctx, k); // the host is n_slots copies ahead of the device
        r->waits++;
    }
    r->busy[k] = 0;
    r->next = (k + 1) % r->n_slots;
    r->copies++;
    *slot = k;
    return r->base + (size_t)k * r->slot_bytes;
}

void upload_ring_issued(upload_ring *r, int slot) {
    TRI_ASSERT(slot >= 0 && slot < r->n_slots);
    r->busy[slot] = 1;
}
