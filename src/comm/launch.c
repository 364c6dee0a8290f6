// launch.c: process bootstrap through PMIx (DESIGN.md "Launch").
//
// PMIx_Init connects to the PMIx server of the launcher (OpenMPI's mpirun, Slurm's
// `srun --mpi=pmix`). Without a server it answers PMIX_ERR_UNREACH and the process is a
// singleton: rank 0 of a world of one. Under a launcher, the job-level keys (job size,
// local size) are read from the wildcard rank of our namespace, the process-level key
// (local rank) from our own proc.
//
// OpenMPI links the same libpmix and calls PMIx_Init again inside MPI_Init; PMIx counts
// initialisations, so launch_init may run before MPI_Init, and launch_finalize must run
// after MPI_Finalize.
//
// The start-up watchdog (base/stop.h) learns from here which ranks a stalled phase waits
// for: each rank announces every start-up phase it enters as a PMIx key of its own
// ("trident.reached.<phase>", put and committed: no fence, nothing waits); when the
// deadline passes, the watchdog thread asks for every other rank's key of the phase it is
// stuck in (PMIx_Get_nb with a timeout, all at once). A rank whose key does not come is one
// that never reached the phase: stopped, dead or slow before it. PMIx's client is thread
// safe, so this works while the main thread is blocked inside MPI_Init or a fence.
#include "comm/launch.h"

#include <pmix.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/stop.h"

// Every PMIx call goes through this: on failure it prints the statement, file:line, rank
// and PMIx's error string, and returns TRI_ERR_COMM from the calling function.
#define PMIX_CHECK(li, call)                                                                       \
    do {                                                                                           \
        pmix_status_t pmix_check_rc_ = (call);                                                     \
        if (pmix_check_rc_ != PMIX_SUCCESS) {                                                      \
            LOG_ERROR("PMIx call '%s' failed at %s:%d on rank %d: %s (%d)", #call, __FILE__,       \
                      __LINE__, (li)->rank, PMIx_Error_string(pmix_check_rc_),                     \
                      (int)pmix_check_rc_);                                                        \
            return TRI_ERR_COMM;                                                                   \
        }                                                                                          \
    } while (0)

// Any integer-typed PMIx value as a long (PMIx answers sizes and ranks with several
// widths: local rank is a uint16, job size a uint32, depending on the server).
static int pmix_value_to_long(const pmix_value_t *v, long *out) {
    switch (v->type) {
    case PMIX_UINT8: *out = v->data.uint8; return 0;
    case PMIX_UINT16: *out = v->data.uint16; return 0;
    case PMIX_UINT32: *out = (long)v->data.uint32; return 0;
    case PMIX_UINT64: *out = (long)v->data.uint64; return 0;
    case PMIX_INT8: *out = v->data.int8; return 0;
    case PMIX_INT16: *out = v->data.int16; return 0;
    case PMIX_INT32: *out = v->data.int32; return 0;
    case PMIX_INT64: *out = (long)v->data.int64; return 0;
    case PMIX_INT: *out = v->data.integer; return 0;
    case PMIX_UINT: *out = (long)v->data.uint; return 0;
    case PMIX_SIZE: *out = (long)v->data.size; return 0;
    case PMIX_PROC_RANK: *out = (long)v->data.rank; return 0;
    default: return 1;
    }
}

// Reads integer key `key` of `proc` into *out.
static tri_status launch_get_int(launch_info *li, const pmix_proc_t *proc, const char *key,
                                 long *out) {
    pmix_value_t *val = NULL;
    PMIX_CHECK(li, PMIx_Get(proc, key, NULL, 0, &val));
    int bad = pmix_value_to_long(val, out);
    int type = (int)val->type;
    PMIX_VALUE_RELEASE(val);
    if (bad) {
        LOG_ERROR("PMIx key %s on rank %d has type %d, not an integer", key, li->rank, type);
        return TRI_ERR_COMM;
    }
    return TRI_OK;
}

// ---- start-up phases announced to the other ranks (see the top of the file) ----

// This process's PMIx identity and the world, for the hooks (one PMIx client per process).
static pmix_proc_t g_self;
static int g_world;

// "trident.reached.<phase>", the phase's characters other than letters and digits as '_'.
static void phase_key(char *key, size_t n, const char *phase) {
    int len = snprintf(key, n, "trident.reached.");
    for (const char *p = phase; *p && (size_t)len + 1 < n; p++, len++) {
        const char c = *p;
        key[len] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ? c
                                                                                              : '_';
    }
    key[len] = '\0';
}

static void announce_phase(const char *phase) {
    char key[PMIX_MAX_KEYLEN + 1];
    phase_key(key, sizeof key, phase);
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BOOL;
    v.data.flag = true;
    if (PMIx_Put(PMIX_GLOBAL, key, &v) == PMIX_SUCCESS) PMIx_Commit();
}

// One rank's answer. Never freed: a late callback may still write it while the process ends.
typedef struct {
    atomic_int done;
    pmix_status_t status;
} phase_probe;

static void probe_done(pmix_status_t status, pmix_value_t *kv, void *cbdata) {
    (void)kv; // released by PMIx after the callback
    phase_probe *p = cbdata;
    p->status = status;
    atomic_store(&p->done, 1);
}

// The watchdog's question: which ranks never announced `phase`? Asks all at once, waits up
// to 1.5 s, and writes "ranks not heard from in this phase: 1,5" (or why it cannot tell).
static void report_phase(const char *phase, char *out, size_t n) {
    enum { MAX_PROBES = 4096 };
    const int asked = g_world < MAX_PROBES ? g_world : MAX_PROBES;
    char key[PMIX_MAX_KEYLEN + 1];
    phase_key(key, sizeof key, phase);
    phase_probe *probes = calloc((size_t)asked, sizeof *probes);
    pmix_info_t *info = calloc(1, sizeof *info);
    if (!probes || !info) {
        snprintf(out, n, "(the other ranks could not be asked)");
        return;
    }
    int timeout_s = 1;
    PMIX_INFO_LOAD(info, PMIX_TIMEOUT, &timeout_s, PMIX_INT);
    for (int r = 0; r < asked; r++) {
        if (r == (int)g_self.rank) {
            probes[r].status = PMIX_SUCCESS;
            atomic_store(&probes[r].done, 1);
            continue;
        }
        pmix_proc_t peer;
        PMIX_PROC_CONSTRUCT(&peer);
        PMIX_LOAD_PROCID(&peer, g_self.nspace, (pmix_rank_t)r);
        pmix_status_t rc = PMIx_Get_nb(&peer, key, info, 1, probe_done, &probes[r]);
        if (rc != PMIX_SUCCESS) {
            probes[r].status = rc;
            atomic_store(&probes[r].done, 1);
        }
    }
    const double until = time_now_s() + timeout_s + 0.5;
    int pending = asked;
    while (pending > 0 && time_now_s() < until) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        pending = 0;
        for (int r = 0; r < asked; r++) pending += !atomic_load(&probes[r].done);
    }
    size_t len = (size_t)snprintf(out, n, "ranks not heard from in this phase: ");
    int missing = 0, unknown = 0;
    for (int r = 0; r < asked; r++) {
        if (!atomic_load(&probes[r].done)) {
            unknown++;
            continue;
        }
        if (probes[r].status == PMIX_SUCCESS) continue;
        if (len + 48 < n) // room for the notes below
            len += (size_t)snprintf(out + len, n - len, "%s%d", missing ? "," : "", r);
        else if (len + 4 < n && out[len - 1] != '.')
            len += (size_t)snprintf(out + len, n - len, "...");
        missing++;
    }
    if (!missing && !unknown)
        snprintf(out, n,
                 "every rank reached this phase (one of them may be stopped or slow "
                 "inside it)");
    else if (!missing) snprintf(out, n, "the other ranks did not answer");
    else if (unknown && len + 40 < n)
        snprintf(out + len, n - len, " (%d more did not answer)", unknown);
    if (asked < g_world && strlen(out) + 40 < n)
        snprintf(out + strlen(out), n - strlen(out), " (ranks from %d on not asked)", asked);
}

// base/common.h's abort hook for a job of several processes: PMIx_Abort asks the launcher
// (mpirun, srun --mpi=pmix) to end every process of the job with `code`, so that a rank that
// cannot go on (out of memory) does not leave the others waiting in a collective.
static void launch_abort_job(int code) {
    PMIx_Abort(code, "trident: a rank ended the job (see its error above)", NULL, 0);
    _exit(code); // PMIx_Abort returned (no server): this process at least
}

static void launch_set_singleton(launch_info *li) {
    li->rank = 0;
    li->world = 1;
    li->local_rank = 0;
    li->local_size = 1;
    li->singleton = 1;
    snprintf(li->launcher, sizeof li->launcher, "singleton");
    li->impl = NULL;
}

tri_status launch_init(launch_info *li) {
    memset(li, 0, sizeof *li);
    if (gethostname(li->host, sizeof li->host) != 0) snprintf(li->host, sizeof li->host, "?");
    li->host[sizeof li->host - 1] = '\0';

    stop_phase("PMIx init");
    pmix_proc_t *me = xcalloc(1, sizeof *me);
    pmix_status_t rc = PMIx_Init(me, NULL, 0);
    // A launcher that speaks PMIx sets these; without them any failure means "started alone".
    int launched = env_get(ENV_PMIX_NAMESPACE) != NULL || env_get(ENV_PMIX_RANK) != NULL;
    if (rc == PMIX_ERR_UNREACH || (rc != PMIX_SUCCESS && !launched)) {
        // PMIx keeps a singleton namespace initialised even when unreachable; release it.
        if (rc == PMIX_ERR_UNREACH) PMIx_Finalize(NULL, 0);
        free(me);
        launch_set_singleton(li);
        LOG_DEBUG("launch: singleton (PMIx_Init: %s), rank 0 of 1 on %s", PMIx_Error_string(rc),
                  li->host);
        return TRI_OK;
    }
    if (rc != PMIX_SUCCESS) {
        LOG_ERROR("PMIx call 'PMIx_Init(me, NULL, 0)' failed at %s:%d: %s (%d)", __FILE__, __LINE__,
                  PMIx_Error_string(rc), (int)rc);
        LOG_HINT("the PMIx environment (PMIX_NAMESPACE=%s) is set, but its server did "
                 "not answer; under Slurm use `srun --mpi=pmix`",
                 env_get(ENV_PMIX_NAMESPACE) ? env_get(ENV_PMIX_NAMESPACE) : "");
        free(me);
        return TRI_ERR_COMM;
    }
    li->impl = me;
    li->rank = (int)me->rank;
    snprintf(li->launcher, sizeof li->launcher, "pmix");

    // Job-level keys live on the wildcard rank of our namespace.
    pmix_proc_t job;
    PMIX_PROC_CONSTRUCT(&job);
    PMIX_LOAD_PROCID(&job, me->nspace, PMIX_RANK_WILDCARD);
    long world = 0, local_rank = 0, local_size = 0;
    TRI_CHECK(launch_get_int(li, &job, PMIX_JOB_SIZE, &world));
    TRI_CHECK(launch_get_int(li, me, PMIX_LOCAL_RANK, &local_rank));
    TRI_CHECK(launch_get_int(li, &job, PMIX_LOCAL_SIZE, &local_size));
    if (world < 1 || li->rank < 0 || li->rank >= world || local_rank < 0 || local_size < 1 ||
        local_rank >= local_size) {
        LOG_ERROR("PMIx gave an inconsistent layout: rank %d, job size %ld, local rank %ld, "
                  "local size %ld",
                  li->rank, world, local_rank, local_size);
        return TRI_ERR_COMM;
    }
    li->world = (int)world;
    li->local_rank = (int)local_rank;
    li->local_size = (int)local_size;
    g_self = *me;
    g_world = li->world;
    const stop_peer_hooks hooks = {announce_phase, report_phase};
    stop_set_peer_hooks(&hooks);
    if (li->world > 1) tri_set_abort_hook(launch_abort_job);
    LOG_DEBUG("launch: pmix namespace %s rank %d of %d, local %d of %d on %s", me->nspace, li->rank,
              li->world, li->local_rank, li->local_size, li->host);
    return TRI_OK;
}

// Fence over every process of our namespace; `collect` makes it also exchange the data put
// and committed before it (PMIX_COLLECT_DATA), so a PMIx_Get after it is local.
static tri_status launch_fence_impl(launch_info *li, int collect) {
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    bool flag = collect != 0;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    PMIX_CHECK(li, rc);
    return TRI_OK;
}

static tri_status launch_exchange_impl(launch_info *li, const char *key, int root, void *value,
                                       size_t bytes) {
    const pmix_proc_t *me = li->impl;
    if (li->rank == root) {
        pmix_value_t val;
        PMIX_VALUE_CONSTRUCT(&val);
        val.type = PMIX_BYTE_OBJECT;
        val.data.bo.bytes = value; // PMIx_Put copies the value
        val.data.bo.size = bytes;
        PMIX_CHECK(li, PMIx_Put(PMIX_GLOBAL, key, &val));
        PMIX_CHECK(li, PMIx_Commit());
    }
    TRI_CHECK(launch_fence_impl(li, 1));
    if (li->rank == root) return TRI_OK;

    pmix_proc_t from;
    PMIX_PROC_CONSTRUCT(&from);
    PMIX_LOAD_PROCID(&from, me->nspace, (pmix_rank_t)root);
    pmix_value_t *got = NULL;
    PMIX_CHECK(li, PMIx_Get(&from, key, NULL, 0, &got));
    tri_status st = TRI_OK;
    if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != bytes) {
        LOG_ERROR("PMIx key %s from rank %d: expected %zu bytes, got type %d of %zu bytes", key,
                  root, bytes, (int)got->type,
                  got->type == PMIX_BYTE_OBJECT ? got->data.bo.size : (size_t)0);
        st = TRI_ERR_COMM;
    } else {
        memcpy(value, got->data.bo.bytes, bytes);
    }
    PMIX_VALUE_RELEASE(got);
    return st;
}

// The exchange (its fence waits for every rank) is a start-up phase of its own (the NCCL
// unique id travels this way); the caller's phase goes on after it.
tri_status launch_exchange(launch_info *li, const char *key, int root, void *value, size_t bytes) {
    TRI_ASSERT(root >= 0 && root < li->world);
    if (li->singleton || li->world == 1) return TRI_OK; // the root already holds the value
    const char *phase = stop_phase_name();
    stop_phase("PMIx key exchange");
    tri_status st = launch_exchange_impl(li, key, root, value, bytes);
    stop_phase(phase);
    return st;
}

static tri_status launch_all_gather_impl(launch_info *li, const char *key, const void *mine,
                                         size_t bytes, void *all) {
    const pmix_proc_t *me = li->impl;
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)mine; // PMIx_Put copies the value
    val.data.bo.size = bytes;
    PMIX_CHECK(li, PMIx_Put(PMIX_GLOBAL, key, &val));
    PMIX_CHECK(li, PMIx_Commit());
    TRI_CHECK(launch_fence_impl(li, 1));
    for (int r = 0; r < li->world; r++) {
        char *dst = (char *)all + (size_t)r * bytes;
        if (r == li->rank) {
            memcpy(dst, mine, bytes);
            continue;
        }
        pmix_proc_t from;
        PMIX_PROC_CONSTRUCT(&from);
        PMIX_LOAD_PROCID(&from, me->nspace, (pmix_rank_t)r);
        pmix_value_t *got = NULL;
        PMIX_CHECK(li, PMIx_Get(&from, key, NULL, 0, &got));
        const int ok = got->type == PMIX_BYTE_OBJECT && got->data.bo.size == bytes;
        if (!ok)
            LOG_ERROR("PMIx key %s from rank %d: expected %zu bytes, got type %d of %zu bytes", key,
                      r, bytes, (int)got->type,
                      got->type == PMIX_BYTE_OBJECT ? got->data.bo.size : (size_t)0);
        else memcpy(dst, got->data.bo.bytes, bytes);
        PMIX_VALUE_RELEASE(got);
        if (!ok) return TRI_ERR_COMM;
    }
    return TRI_OK;
}

tri_status launch_all_gather(launch_info *li, const char *key, const void *mine, size_t bytes,
                             void *all) {
    if (li->singleton || li->world == 1) {
        memcpy(all, mine, bytes);
        return TRI_OK;
    }
    const char *phase = stop_phase_name();
    stop_phase("PMIx key exchange");
    tri_status st = launch_all_gather_impl(li, key, mine, bytes, all);
    stop_phase(phase);
    return st;
}

tri_status launch_fence(launch_info *li) {
    if (li->singleton || li->world == 1) return TRI_OK;
    const char *phase = stop_phase_name();
    stop_phase("PMIx fence");
    tri_status st = launch_fence_impl(li, 0);
    stop_phase(phase);
    return st;
}

void launch_finalize(launch_info *li) {
    if (li->impl) {
        tri_set_abort_hook(NULL);
        pmix_status_t rc = PMIx_Finalize(NULL, 0);
        if (rc != PMIX_SUCCESS)
            LOG_WARN("PMIx_Finalize on rank %d: %s", li->rank, PMIx_Error_string(rc));
        free(li->impl);
        li->impl = NULL;
    }
}
