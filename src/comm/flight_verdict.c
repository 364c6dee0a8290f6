// flight_verdict.c: the verdict of a stalled or broken job from the flight recorder's rings
// (flight.h), a pure function of the files in <out_dir>/diagnose/, and the JSON dump.
//
// The rings are outside input (`trident diagnose` reads whatever a dead job left): every
// field is checked before it is used, and a file that fails a check is named with what is
// wrong (TRI_ERR_CKPT).
//
// How the verdict is found:
//  1. Each rank's state: exited (with its code), dead (vanished: a peer found its pid gone; or
//     silent: a peer on another host found its heartbeat stale at a stop request),
//     timed out, running, stopped (running, but its heartbeat is older than FLIGHT_STALE_S
//     against the newest heartbeat of all: SIGSTOP, a hung node) or no ring at all.
//  2. The operations the ranks wait for: each rank's oldest incomplete record of its wait in
//     progress. For each, the members of its group that never posted it: a collective is
//     posted by member m when m's ring has the group's collective #seq (or a later one: the
//     ring wrapped); a receive #k from P when P's ring has its send #k to this rank, and back.
//  3. The stalled operation: one whose missing ranks include a broken one (stopped, dead,
//     exited, no ring), with the fewest missing ranks that are not broken (a rank that waits
//     on the broken one misses the collectives after that wait), then the earliest posted;
//     else one whose missing ranks wait for nothing (hung in compute); else the earliest
//     posted. Its missing ranks are blamed, and where
//     every member posted it, the broken members that never completed it.
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "comm/flight_internal.h"

typedef enum { RS_NONE, RS_EXITED, RS_DEAD, RS_TIMED_OUT, RS_RUNNING, RS_STOPPED } rank_status;

typedef struct {
    int present;
    flight_header h;
    flight_rec *recs; // (n) valid records, by index ascending
    int n;
    rank_status st;
    const flight_rec *stuck; // the oldest incomplete record of its wait; NULL
} ring_view;

typedef struct {
    char *out;
    size_t cap, len;
} text_buf;

static void put(text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_buf *t, const char *fmt, ...) {
    if (t->len + 1 >= t->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->out + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n > 0) t->len = t->len + (size_t)n < t->cap ? t->len + (size_t)n : t->cap - 1;
}

// ---- reading and checking ----

static int finite_time(double t) { return isfinite(t) && t >= 0 && t < 1e11; }

// Checks one ring already read into (h, recs); "" when sound, else what is wrong into why.
static void check_ring(const flight_header *h, const flight_rec *recs, int file_rank, char *why,
                       size_t cap) {
    why[0] = '\0';
#define BAD(...) return (void)snprintf(why, cap, __VA_ARGS__)
    if (memcmp(h->magic, FLIGHT_MAGIC, 8)) BAD("not a flight recorder ring (bad magic)");
    if (h->version != FLIGHT_VERSION)
        BAD("format version %u, this trident reads version %d", h->version, FLIGHT_VERSION);
    if (h->header_size != sizeof(flight_header) || h->rec_size != sizeof(flight_rec) ||
        h->capacity != FLIGHT_CAPACITY)
        BAD("header says %u-byte header, %u-byte records, %u of them; expected %zu, %zu, %d",
            h->header_size, h->rec_size, h->capacity, sizeof(flight_header), sizeof(flight_rec),
            FLIGHT_CAPACITY);
    if (h->world < 1 || h->world > (1 << 24) || h->rank != file_rank || h->rank >= h->world)
        BAD("rank %d of world %d, but the file name says rank %d", h->rank, h->world, file_rank);
    if (h->mesh_tp < 1 || h->mesh_dp < 1 || h->mesh_pp < 1 ||
        (long long)h->mesh_tp * h->mesh_dp * h->mesh_pp != h->world)
        BAD("mesh tp %d x dp %d x pp %d does not make the world of %d", h->mesh_tp, h->mesh_dp,
            h->mesh_pp, h->world);
    if (h->state < 0 || h->state >= FLIGHT_STATE_COUNT) BAD("unknown state %d", h->state);
    if (!memchr(h->host, '\0', sizeof h->host)) BAD("host name not terminated");
    if (!finite_time(h->t_open) || !finite_time(h->heartbeat) || !finite_time(h->t_state))
        BAD("a time that is not a time (t_open %g, heartbeat %g, t_state %g)", h->t_open,
            h->heartbeat, h->t_state);
    if (h->activity < 0 || h->activity >= FLIGHT_ACT_COUNT) BAD("unknown activity %d", h->activity);
    if (h->n_ops > (1ull << 62) || h->waiting_n > FLIGHT_CAPACITY ||
        (h->waiting_n && (h->waiting_first < 1 || h->waiting_first > h->n_ops)))
        BAD("operation counts out of range (n_ops %llu, waiting %llu+%llu)",
            (unsigned long long)h->n_ops, (unsigned long long)h->waiting_first,
            (unsigned long long)h->waiting_n);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        if (h->group_size[g] < 0 || h->group_size[g] > h->world)
            BAD("group %s of size %d in a world of %d", comm_group_name(g), h->group_size[g],
                h->world);
        for (int k = 0; k < h->group_size[g] && k < FLIGHT_MAX_GROUP; k++)
            if (h->members[g][k] < 0 || h->members[g][k] >= h->world)
                BAD("group %s lists rank %d in a world of %d", comm_group_name(g), h->members[g][k],
                    h->world);
    }
    for (int i = 0; i < FLIGHT_CAPACITY; i++) {
        const flight_rec *r = &recs[i];
        if (!r->index) continue;
        if (r->index > h->n_ops || (r->index - 1) % FLIGHT_CAPACITY != (uint64_t)i ||
            r->index + FLIGHT_CAPACITY <= h->n_ops)
            BAD("record %d holds operation %llu, not one of the last %d of %llu", i,
                (unsigned long long)r->index, FLIGHT_CAPACITY, (unsigned long long)h->n_ops);
        if (r->group >= COMM_GROUP_COUNT || r->op > FLIGHT_OP_BARRIER ||
            r->activity >= FLIGHT_ACT_COUNT || dtype_size((tri_dtype)r->dtype) == 0 ||
            r->peer < -1 || r->peer >= h->world || r->seq < 1 || r->seq > (1ull << 62) ||
            r->bytes > (1ull << 50))
            BAD("record %d (operation %llu) has a field out of range", i,
                (unsigned long long)r->index);
        if ((r->op == COMM_OP_SEND || r->op == COMM_OP_RECV) != (r->peer >= 0))
            BAD("record %d (operation %llu): a peer only on a send or receive", i,
                (unsigned long long)r->index);
        if (!finite_time(r->t_posted) || !finite_time(r->t_started) || !finite_time(r->t_completed))
            BAD("record %d (operation %llu) has a time that is not a time", i,
                (unsigned long long)r->index);
    }
#undef BAD
}

static int by_index(const void *a, const void *b) {
    const flight_rec *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

// Reads and checks <dir>/rank_XXXXX.ring into v.
static tri_status load_ring(const char *path, int rank, ring_view *v, char *err, size_t cap) {
    const size_t want = sizeof(flight_header) + FLIGHT_CAPACITY * sizeof(flight_rec);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "%s: cannot open: %s", path, strerror(errno));
        return TRI_ERR_CKPT;
    }
    char *buf = xmalloc(want + 1);
    size_t got = fread(buf, 1, want + 1, f);
    fclose(f);
    if (got != want) {
        snprintf(err, cap, "%s: %zu bytes, a ring is %zu (truncated or not a ring)", path, got,
                 want);
        free(buf);
        return TRI_ERR_CKPT;
    }
    memcpy(&v->h, buf, sizeof v->h);
    flight_rec *recs = xmalloc(FLIGHT_CAPACITY * sizeof *recs);
    memcpy(recs, buf + sizeof v->h, FLIGHT_CAPACITY * sizeof *recs);
    free(buf);
    char why[512];
    check_ring(&v->h, recs, rank, why, sizeof why);
    if (why[0]) {
        snprintf(err, cap, "%s: %s", path, why);
        free(recs);
        return TRI_ERR_CKPT;
    }
    v->n = 0;
    for (int i = 0; i < FLIGHT_CAPACITY; i++)
        if (recs[i].index) recs[v->n++] = recs[i];
    qsort(recs, (size_t)v->n, sizeof *recs, by_index);
    v->recs = recs;
    v->present = 1;
    return TRI_OK;
}

// ---- the analysis ----

typedef struct {
    ring_view *v;
    int world;
    double t_ref;    // the newest heartbeat of all: "now" for the stale test
    double t_stall;  // the first timeout, else t_ref: what times are told against
    const char *ref; // what t_stall is: "the deadline" or "the last heartbeat"
} job_view;

static int broken(rank_status s) {
    return s == RS_NONE || s == RS_EXITED || s == RS_DEAD || s == RS_STOPPED;
}

static const flight_rec *find_rec(const ring_view *v, int g, int p2p_op, int peer, uint64_t seq,
                                  uint64_t *max_seq) {
    *max_seq = 0;
    const flight_rec *hit = NULL;
    for (int i = 0; i < v->n; i++) {
        const flight_rec *r = &v->recs[i];
        const int is_p2p = r->op == COMM_OP_SEND || r->op == COMM_OP_RECV;
        if (r->group != g) continue;
        if (p2p_op >= 0 ? (r->op != p2p_op || r->peer != peer) : is_p2p) continue;
        if (r->seq > *max_seq) *max_seq = r->seq;
        if (r->seq == seq) hit = r;
    }
    return hit;
}

// The members of stuck op `r` of rank `me` that never posted its counterpart: into miss (world
// ranks), their count returned. For a collective every other member; for a send or receive the
// peer. posted_incomplete gets the members that posted it and never completed it.
static int missing_of(const job_view *j, int me, const flight_rec *r, int *miss, int *incomplete,
                      int *n_incomplete) {
    const flight_header *h = &j->v[me].h;
    int n = 0;
    *n_incomplete = 0;
    const int p2p = r->op == COMM_OP_SEND || r->op == COMM_OP_RECV;
    const int size = h->group_size[r->group] < FLIGHT_MAX_GROUP ? h->group_size[r->group]
                                                                : FLIGHT_MAX_GROUP;
    for (int k = 0; k < size; k++) {
        const int m = h->members[r->group][k];
        if (m == me || (p2p && m != r->peer)) continue;
        const ring_view *o = &j->v[m];
        uint64_t max_seq = 0;
        const flight_rec *hit = NULL;
        if (o->present)
            hit = find_rec(o, r->group,
                           p2p ? (r->op == COMM_OP_SEND ? COMM_OP_RECV : COMM_OP_SEND) : -1, me,
                           r->seq, &max_seq);
        if (!hit && max_seq < r->seq) miss[n++] = m;
        else if (hit && hit->t_completed == 0) incomplete[(*n_incomplete)++] = m;
    }
    return n;
}

static void fmt_bytes(char *out, size_t cap, uint64_t b) {
    if (b >= 1000000) snprintf(out, cap, "%.1f MB", (double)b / 1e6);
    else if (b >= 1000) snprintf(out, cap, "%.1f KB", (double)b / 1e3);
    else snprintf(out, cap, "%llu B", (unsigned long long)b);
}

// "dp all_reduce #17" / "pp recv #4 from rank 1"
// "dp all_reduce #517 of bucket 3", "pp send #912 to rank 1".
static void fmt_op(char *out, size_t cap, const flight_rec *r) {
    char peer[48] = "";
    if (r->peer >= 0)
        snprintf(peer, sizeof peer, " %s rank %d", r->op == COMM_OP_SEND ? "to" : "from", r->peer);
    else if (r->bucket) snprintf(peer, sizeof peer, " of bucket %u", r->bucket - 1);
    snprintf(out, cap, "%s %s #%llu%s", comm_group_name(r->group), flight_op_name(r->op),
             (unsigned long long)r->seq, peer);
}

static void fmt_doing(char *out, size_t cap, int act, int step, int micro, int chunk) {
    char where[96] = "";
    if (act == FLIGHT_ACT_FORWARD || act == FLIGHT_ACT_BACKWARD || act == FLIGHT_ACT_P2P)
        snprintf(where, sizeof where, " (micro-batch %d, chunk %d)", micro, chunk);
    snprintf(out, cap, "%s%s at step %d", flight_activity_name(act), where, step);
}

static void fmt_group(char *out, size_t cap, const flight_header *h, int g) {
    size_t len = (size_t)snprintf(out, cap, "%s group {", comm_group_name(g));
    for (int k = 0; k < h->group_size[g] && k < FLIGHT_MAX_GROUP && len + 16 < cap; k++)
        len += (size_t)snprintf(out + len, cap - len, "%s%d", k ? "," : "", h->members[g][k]);
    if (h->group_size[g] > FLIGHT_MAX_GROUP && len + 8 < cap)
        len += (size_t)snprintf(out + len, cap - len, ",...");
    snprintf(out + len, cap - len, "}");
}

// One line on rank m: host, state, last completed operation, what it was doing.
static void describe_rank(text_buf *t, const job_view *j, int m) {
    const ring_view *o = &j->v[m];
    if (!o->present) {
        put(t,
            "diagnose: rank %d: no ring (diagnose/rank_%05d.ring missing: the rank never "
            "opened its recorder, or its node's files are elsewhere)\n",
            m, m);
        return;
    }
    const flight_header *h = &o->h;
    char state[256];
    switch (o->st) {
    case RS_DEAD:
        if (h->exit_code == FLIGHT_EXIT_SILENT) // a peer on another host judged it (flight.h)
            snprintf(state, sizeof state,
                     "dead: no heartbeat for %.1f s at a stop request (the launcher ending the "
                     "job: killed, or its node lost?); on another host, so not probed",
                     h->t_state - h->heartbeat);
        else
            snprintf(state, sizeof state,
                     "dead: its process is gone with no exit of its own (killed "
                     "by a signal?)%s, noticed %.1f s %s %s",
                     h->exit_code == FLIGHT_EXIT_UNLINKED
                         ? "; its liveness link to a rank on another host closed"
                         : "",
                     fabs(j->t_stall - h->t_state), h->t_state <= j->t_stall ? "before" : "after",
                     j->ref);
        break;
    case RS_EXITED:
        if (h->exit_code == FLIGHT_EXIT_UNKNOWN) snprintf(state, sizeof state, "exited");
        else snprintf(state, sizeof state, "exited with code %d", h->exit_code);
        break;
    case RS_STOPPED:
        snprintf(state, sizeof state,
                 "stopped: no heartbeat for %.1f s before %s (SIGSTOP, a hung node or a "
                 "blocked process)",
                 j->t_stall - h->heartbeat, j->ref);
        break;
    case RS_TIMED_OUT: snprintf(state, sizeof state, "timed out waiting"); break;
    default: snprintf(state, sizeof state, "running"); break;
    }
    char last[160] = "no operation completed";
    for (int i = o->n - 1; i >= 0; i--) {
        const flight_rec *r = &o->recs[i];
        if (r->t_completed == 0) continue;
        char op[96];
        fmt_op(op, sizeof op, r);
        snprintf(last, sizeof last, "last completed %s at %.1f s before %s", op,
                 j->t_stall - r->t_completed, j->ref);
        break;
    }
    char doing[160];
    fmt_doing(doing, sizeof doing, h->activity, h->step, h->micro, h->chunk);
    put(t, "diagnose: rank %d (host %s, pid %d): %s; %s; doing %s\n", m, h->host, h->pid, state,
        last, doing);
}

static void analyse(job_view *j) {
    double t_ref = 0, t_stall = 0;
    for (int r = 0; r < j->world; r++) {
        const ring_view *v = &j->v[r];
        if (!v->present) continue;
        if (v->h.heartbeat > t_ref) t_ref = v->h.heartbeat;
        if (v->h.state == FLIGHT_STATE_TIMED_OUT && (!t_stall || v->h.t_state < t_stall))
            t_stall = v->h.t_state;
    }
    j->t_ref = t_ref;
    j->t_stall = t_stall ? t_stall : t_ref;
    j->ref = t_stall ? "the deadline" : "the last heartbeat";
    for (int r = 0; r < j->world; r++) {
        ring_view *v = &j->v[r];
        if (!v->present) {
            v->st = RS_NONE;
            continue;
        }
        const flight_header *h = &v->h;
        if (h->state == FLIGHT_STATE_EXITED)
            v->st = FLIGHT_EXIT_JUDGED(h->exit_code) ? RS_DEAD : RS_EXITED;
        else if (t_ref - h->heartbeat > FLIGHT_STALE_S) v->st = RS_STOPPED;
        else v->st = h->state == FLIGHT_STATE_TIMED_OUT ? RS_TIMED_OUT : RS_RUNNING;
        for (int i = 0; i < v->n && h->waiting_n; i++) {
            const flight_rec *rec = &v->recs[i];
            if (rec->index >= h->waiting_first && rec->index < h->waiting_first + h->waiting_n &&
                rec->t_completed == 0) {
                v->stuck = rec;
                break;
            }
        }
    }
}

tri_status flight_verdict(const char *dir, char *out, size_t cap) {
    text_buf t = {out, cap, 0};
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(out, cap, "%s: %s (no flight recorder rings: is this a run's out_dir/diagnose?)",
                 dir, strerror(errno));
        return TRI_ERR_CONFIG;
    }
    // The rings by rank: first the world (from any ring), then every file checked.
    int world = 0, first_rank = -1;
    struct dirent *e;
    char path[4400];
    tri_status st = TRI_OK;
    ring_view *v = NULL;
    while ((e = readdir(d))) {
        int r, len = 0;
        if (sscanf(e->d_name, "rank_%5d.ring%n", &r, &len) != 1 || e->d_name[len] != '\0' ||
            strlen(e->d_name) != 15 || r < 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ring_view one = {0};
        st = load_ring(path, r, &one, out, cap);
        if (st != TRI_OK) break;
        if (!world) {
            world = one.h.world;
            first_rank = r;
            v = xcalloc((size_t)world, sizeof *v);
        } else if (one.h.world != world) {
            snprintf(out, cap, "%s: world %d, but rank %d's ring says %d (rings of two runs?)",
                     path, one.h.world, first_rank, world);
            free(one.recs);
            st = TRI_ERR_CKPT;
            break;
        }
        v[r] = one;
    }
    closedir(d);
    if (st == TRI_OK && !world) {
        snprintf(out, cap, "%s: no flight recorder ring (rank_XXXXX.ring) in it", dir);
        st = TRI_ERR_CONFIG;
    }
    if (st != TRI_OK) {
        for (int r = 0; v && r < world; r++) free(v[r].recs);
        free(v);
        return st;
    }
    job_view j = {v, world, 0, 0, ""};
    analyse(&j);

    // The stalled operation (see the top of the file).
    int *miss = xcalloc((size_t)world, sizeof(int)), *inc = xcalloc((size_t)world, sizeof(int));
    int best = -1, best_score = -1, best_extra = 0;
    for (int r = 0; r < world; r++) {
        if (!v[r].stuck) continue;
        int n_inc, n = missing_of(&j, r, v[r].stuck, miss, inc, &n_inc);
        // 3: a broken rank holds it up; 2: a rank that waits for nothing (hung in compute);
        // 1: ranks that wait elsewhere (a chain or a cycle); 0: nobody missing.
        int score = n ? 1 : 0, extra = 0;
        for (int k = 0; k < n; k++) {
            if (broken(v[miss[k]].st)) score = 3;
            else if (!v[miss[k]].stuck && score < 2) score = 2;
            extra += !broken(v[miss[k]].st);
        }
        for (int k = 0; !n && k < n_inc; k++)
            if (broken(v[inc[k]].st)) score = 3;
        // Of two operations a broken rank holds up, the one fewer other ranks are missing
        // from: a collective that a rank waiting on the broken one never reached names that
        // rank too; the wait behind it names the broken rank alone (then the earliest).
        if (score > best_score || (score == best_score && score == 3 && extra < best_extra) ||
            (score == best_score && (score != 3 || extra == best_extra) &&
             v[r].stuck->t_posted < v[best].stuck->t_posted)) {
            best = r;
            best_score = score;
            best_extra = extra;
        }
    }
    int *blamed = xcalloc((size_t)world, sizeof(int)), n_blamed = 0;
    if (best >= 0) {
        const flight_rec *r = v[best].stuck;
        int n_inc, n = missing_of(&j, best, r, miss, inc, &n_inc);
        char grp[512], op[96], size[32], doing[160];
        fmt_group(grp, sizeof grp, &v[best].h, r->group);
        fmt_op(op, sizeof op, r);
        fmt_bytes(size, sizeof size, r->bytes);
        fmt_doing(doing, sizeof doing, r->activity, r->step, r->micro, r->chunk);
        put(&t, "diagnose: step %d, %s: %s (%s %s; %s) stalled; posted by rank", r->step, grp, op,
            size, dtype_name((tri_dtype)r->dtype), doing);
        // The posters: the members not missing (rank `best` and its peer or the others).
        const flight_header *bh = &v[best].h;
        const int p2p = r->op == COMM_OP_SEND || r->op == COMM_OP_RECV;
        int n_posters = 0;
        for (int k = 0; k < bh->group_size[r->group] && k < FLIGHT_MAX_GROUP; k++) {
            const int m = bh->members[r->group][k];
            int missing = p2p && m != best && m != r->peer;
            for (int q = 0; q < n; q++) missing |= miss[q] == m;
            if (!missing) put(&t, "%s %d", n_posters++ ? "," : "", m);
        }
        for (int k = 0; k < n; k++) {
            put(&t, "%s rank %d", k ? "," : ";", miss[k]);
            if (broken(v[miss[k]].st) || !v[miss[k]].stuck) blamed[n_blamed++] = miss[k];
        }
        if (n) put(&t, " never posted it\n");
        else {
            put(&t, "; every member posted it");
            for (int k = 0; k < n_inc; k++)
                if (broken(v[inc[k]].st)) {
                    put(&t, "%s rank %d", n_blamed ? "," : ";", inc[k]);
                    blamed[n_blamed++] = inc[k];
                }
            put(&t, n_blamed ? " never completed it\n" : "\n");
        }
        if (!n_blamed)
            for (int k = 0; k < n; k++) blamed[n_blamed++] = miss[k];
    }
    // A broken rank is always named, also when no wait points at it (a dead rank while the
    // others compute).
    for (int r = 0; r < world; r++) {
        if (!broken(v[r].st) || (v[r].st == RS_EXITED && v[r].h.exit_code == 0)) continue;
        int seen = 0;
        for (int k = 0; k < n_blamed; k++) seen |= blamed[k] == r;
        if (!seen) blamed[n_blamed++] = r;
    }
    for (int k = 0; k < n_blamed; k++) describe_rank(&t, &j, blamed[k]);
    // The other ranks' waits, one line.
    int listed = 0;
    for (int r = 0; r < world; r++) {
        if (!v[r].stuck || r == best) continue;
        char op[96];
        fmt_op(op, sizeof op, v[r].stuck);
        put(&t, "%s rank %d on %s", listed++ ? "," : "diagnose: also waiting:", r, op);
    }
    if (listed) put(&t, "\n");
    if (n_blamed) {
        put(&t, "diagnose: blamed rank%s", n_blamed > 1 ? "s" : "");
        for (int k = 0; k < n_blamed; k++)
            put(&t, "%s %d (host %s)", k ? "," : "", blamed[k],
                v[blamed[k]].present ? v[blamed[k]].h.host : "unknown");
        put(&t, "\n");
    } else {
        put(&t, "diagnose: no rank to blame: every ring shows its rank running or done, with no "
                "operation waited for\n");
    }
    free(miss), free(inc), free(blamed);
    for (int r = 0; r < world; r++) free(v[r].recs);
    free(v);
    return TRI_OK;
}

// ---- the JSON dump ----

static void json_rec(const flight_rec *r, FILE *f) {
    fprintf(f,
            "{\"index\":%llu,\"group\":\"%s\",\"op\":\"%s\",\"seq\":%llu,\"peer\":%d,"
            "\"bytes\":%llu,\"dtype\":\"%s\",\"step\":%d,\"activity\":\"%s\",\"micro\":%d,"
            "\"chunk\":%d,\"bucket\":%d,\"posted\":%.6f,\"started\":%.6f,\"completed\":%.6f}",
            (unsigned long long)r->index, comm_group_name(r->group), flight_op_name(r->op),
            (unsigned long long)r->seq, r->peer, (unsigned long long)r->bytes,
            dtype_name((tri_dtype)r->dtype), r->step, flight_activity_name(r->activity), r->micro,
            r->chunk, (int)r->bucket - 1, r->t_posted, r->t_started, r->t_completed);
}

void flight_write_json(const flight_header *h, const flight_rec *recs, FILE *f) {
    static const char *states[FLIGHT_STATE_COUNT] = {"running", "timed_out", "exited"};
    fprintf(f,
            "{\"rank\":%d,\"world\":%d,\"host\":\"%s\",\"pid\":%d,\"state\":\"%s\","
            "\"mesh\":{\"tp\":%d,\"dp\":%d,\"pp\":%d},\"heartbeat\":%.6f,\"t_state\":%.6f,"
            "\"step\":%d,\"activity\":\"%s\",\"micro\":%d,\"chunk\":%d,\"n_ops\":%llu,"
            "\"waiting\":[%llu,%llu],\"ops\":[\n",
            h->rank, h->world, h->host, h->pid,
            h->state >= 0 && h->state < FLIGHT_STATE_COUNT ? states[h->state] : "?", h->mesh_tp,
            h->mesh_dp, h->mesh_pp, h->heartbeat, h->t_state, h->step,
            flight_activity_name(h->activity), h->micro, h->chunk, (unsigned long long)h->n_ops,
            (unsigned long long)h->waiting_first, (unsigned long long)h->waiting_n);
    // Oldest first: the slot after the newest is the oldest once the ring wrapped.
    int first = 1;
    for (int i = 0; i < FLIGHT_CAPACITY; i++) {
        const flight_rec *r = &recs[(h->n_ops + (uint64_t)i) % FLIGHT_CAPACITY];
        if (!r->index) continue;
        fputs(first ? "  " : ",\n  ", f);
        first = 0;
        json_rec(r, f);
    }
    fputs("\n]}\n", f);
}

int flight_all_live_reported(const char *dir, int world, double now) {
    for (int r = 0; r < world; r++) {
        flight_header h;
        if (flight_read_header(dir, r, &h) != 0) continue;
        if (h.state == FLIGHT_STATE_RUNNING && now - h.heartbeat < FLIGHT_STALE_S) return 0;
    }
    return 1;
}
