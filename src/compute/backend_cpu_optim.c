// backend_cpu_optim.c: the CPU backend's multi-tensor optimizer ops (backend.h mt_sumsq_add,
// mt_adamw): the table's tensors in order, each through the per-piece op, exactly as the
// optimizer called them piece by piece (bf16 gradients widened first into the table's
// grad_wide, as zero_piece_grad did), so the CPU's results keep their bits.
#include "compute/backend_cpu_internal.h"

// Tensor i's gradients as fp32: in place, or widened into t->grad_wide.
static const float *tensor_grad(backend *b, const mt_table *t, int i) {
    const mt_tensor *e = &t->tensors[i];
    if (t->grad_dtype != DTYPE_BF16) return e->grad;
    TRI_ASSERT(t->grad_wide);
    b->from_bf16(b, t->grad_wide, e->grad, e->n);
    return t->grad_wide;
}

void cpu_mt_sumsq_add(backend *b, double *acc, const mt_table *t) {
    for (int i = 0; i < t->n_tensors; i++)
        if (t->tensors[i].in_norm) b->sumsq_add(b, acc, tensor_grad(b, t, i), t->tensors[i].n);
}

void cpu_mt_adamw(backend *b, const mt_table *t, const adamw_step *s) {
    adamw_step step = *s;
    for (int i = 0; i < t->n_tensors; i++) {
        const mt_tensor *e = &t->tensors[i];
        step.weight_decay = e->decay ? s->weight_decay : 0.0f;
        b->adamw(b, e->param, tensor_grad(b, t, i), e->m, e->v, e->n, &step, e->param16);
    }
}
