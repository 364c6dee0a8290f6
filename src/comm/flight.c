// flight.c: the flight recorder's ring and its watchdog (flight.h). The verdict is in
// flight_verdict.c.
//
// One recorder per process (the comm of a run is one per process too), so the hooks of the
// executor and the trainer need no handle. The main thread alone writes records and the
// context; the watchdog thread writes only the heartbeat, and reads the other rings.
#include "comm/flight.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/stop.h"
#include "comm/flight_internal.h"
#include "comm/mesh.h"

_Static_assert(sizeof(flight_rec) == 96, "flight_rec is 96 bytes in the file");
_Static_assert(sizeof(flight_header) == 2048, "flight_header is 2048 bytes in the file");
// The tests read these two from the files (tests/test_diagnose.sh, test_slurm.sh).
_Static_assert(offsetof(flight_header, pid) == 32, "the ring's pid is at byte 32");
_Static_assert(offsetof(flight_header, links_up) == 1772, "the ring's links_up is at byte 1772");

static struct {
    atomic_int on;
    flight_header *h;
    flight_rec *recs; // (FLIGHT_CAPACITY)
    size_t map_bytes;
    char dir[4096]; // <out_dir>/diagnose
    int rank, world;
    uint64_t coll_seq[COMM_GROUP_COUNT];
    uint64_t *send_seq[COMM_GROUP_COUNT], *recv_seq[COMM_GROUP_COUNT]; // (group size)
    uint64_t pending_first, pending_n; // sends and receives posted in the open group
    int *peers, n_peers;               // world ranks sharing a group with this rank
    char *peer_remote;                 // (n_peers) 1: on another host, read at a stop request
    char *peer_known;                  // (n_peers) 1: its ring of this run was read once
    int n_unknown;                     // peers not known yet: the watchdog polls meanwhile
    int any_remote;                    // a peer is on another host: write the ring back often
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
} g = {.mutex = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};
static uint32_t g_bucket; // flight_set_bucket's, as records store it (1 + bucket; 0 none)

double flight_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int flight_enabled(void) { return atomic_load_explicit(&g.on, memory_order_relaxed); }

const char *flight_op_name(int op) {
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                  "send",       "recv",           "barrier"};
    return op >= 0 && op <= FLIGHT_OP_BARRIER ? names[op] : "?";
}

const char *flight_activity_name(int a) {
    static const char *names[FLIGHT_ACT_COUNT] = {"nothing recorded",
                                                  "forward",
                                                  "backward",
                                                  "pipeline send/recv",
                                                  "gradient reduction and optimizer",
                                                  "evaluation",
                                                  "checkpoint"};
    return a >= 0 && a < FLIGHT_ACT_COUNT ? names[a] : "?";
}

void flight_path(char *out, size_t cap, const char *dir, int rank, const char *ext) {
    snprintf(out, cap, "%s/rank_%05d.%s", dir, rank, ext);
}

// ---- the context and the records ----

void flight_set_step(int step) {
    if (flight_enabled()) g.h->step = step;
}

void flight_set_activity(flight_activity a, int micro, int chunk) {
    if (!flight_enabled()) return;
    g.h->activity = (int32_t)a;
    g.h->micro = micro;
    g.h->chunk = chunk;
}

void flight_set_bucket(int bucket) { g_bucket = bucket >= 0 ? (uint32_t)bucket + 1 : 0; }

static flight_rec *rec_of(uint64_t index) { return &g.recs[(index - 1) % FLIGHT_CAPACITY]; }

uint64_t flight_post(comm_group_id grp, int op, size_t bytes, tri_dtype dt, int peer_group_rank) {
    if (!flight_enabled()) return 0;
    flight_header *h = g.h;
    uint64_t seq;
    int32_t peer = -1;
    if (op == COMM_OP_SEND || op == COMM_OP_RECV) {
        uint64_t *counts = op == COMM_OP_SEND ? g.send_seq[grp] : g.recv_seq[grp];
        seq = counts ? ++counts[peer_group_rank] : 0;
        if (peer_group_rank < h->group_size[grp] && peer_group_rank < FLIGHT_MAX_GROUP)
            peer = h->members[grp][peer_group_rank];
    } else {
        seq = ++g.coll_seq[grp];
    }
    const uint64_t index = h->n_ops + 1;
    flight_rec *r = rec_of(index);
    *r = (flight_rec){.index = 0,
                      .seq = seq,
                      .bytes = bytes,
                      .t_posted = flight_clock(),
                      .step = h->step,
                      .micro = h->micro,
                      .chunk = h->chunk,
                      .peer = peer,
                      .group = (uint8_t)grp,
                      .op = (uint8_t)op,
                      .dtype = (uint8_t)dt,
                      .activity = (uint8_t)h->activity,
                      .bucket = g_bucket};
    // The index last: a reader that sees it sees the record (both on this host's page).
    atomic_thread_fence(memory_order_release);
    r->index = index;
    h->n_ops = index;
    if ((op == COMM_OP_SEND || op == COMM_OP_RECV)) {
        if (!g.pending_n) g.pending_first = index;
        g.pending_n = index - g.pending_first + 1;
    }
    return index;
}

// Records [first, first + n) that are still in the ring.
#define FOR_RECORDS(r, first, n)                                                                   \
    for (uint64_t i_ = (first); i_ < (first) + (n); i_++)                                          \
        for (flight_rec *r = rec_of(i_); r && r->index == i_; r = NULL)

void flight_started(uint64_t first, uint64_t n) {
    if (!flight_enabled() || !first) return;
    const double now = flight_clock();
    FOR_RECORDS(r, first, n) if (r->t_started == 0) r->t_started = now;
}

void flight_completed(uint64_t first, uint64_t n) {
    if (!flight_enabled() || !first) return;
    const double now = flight_clock();
    // A group's range may hold collectives posted inside it: those completed on their own.
    FOR_RECORDS(r, first, n) if (r->t_completed == 0) r->t_completed = now;
}

void flight_waiting(uint64_t first, uint64_t n) {
    if (!flight_enabled()) return;
    g.h->waiting_first = n ? first : 0;
    g.h->waiting_n = n;
}

void flight_p2p_pending(uint64_t *first, uint64_t *n) {
    *first = g.pending_first;
    *n = g.pending_n;
    g.pending_first = g.pending_n = 0;
}

// ---- the watchdog ----

// The header of rank r's ring into h (0), or -1 when it cannot be read whole.
int flight_read_header(const char *dir, int r, flight_header *h) {
    char path[4400];
    flight_path(path, sizeof path, dir, r, "ring");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t got = pread(fd, h, sizeof *h, 0);
    close(fd);
    return got == (ssize_t)sizeof *h && !memcmp(h->magic, FLIGHT_MAGIC, 8) ? 0 : -1;
}

// Whether dir/name exists and was written by this run (not older than this ring: a file an
// earlier run left, before rank 0 removed it, does not count).
int flight_exists(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    const double t = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
    return !g.h || t >= g.h->t_open - 1.0;
}

void flight_touch(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
}

// The lowest rank whose heartbeat is fresh and which has not exited: it prints the verdict.
static int lowest_live_rank(double now) {
    for (int r = 0; r < g.world; r++) {
        if (r == g.rank) return r;
        flight_header h;
        if (flight_read_header(g.dir, r, &h) != 0) continue;
        if (h.state != FLIGHT_STATE_EXITED && now - h.heartbeat < FLIGHT_STALE_S) return r;
    }
    return g.rank;
}

// Marks rank r's ring EXITED with `code` (FLIGHT_EXIT_JUDGED), so that
// the verdict (a function of the files) knows. Only the state fields: the rest is what the
// dead rank left.
static void mark_dead(int r, int32_t code) {
    char path[4400];
    flight_path(path, sizeof path, g.dir, r, "ring");
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    const int32_t st = FLIGHT_STATE_EXITED;
    const double t = flight_clock();
    ssize_t a = pwrite(fd, &st, 4, offsetof(flight_header, state));
    ssize_t b = pwrite(fd, &code, 4, offsetof(flight_header, exit_code));
    ssize_t c = pwrite(fd, &t, 8, offsetof(flight_header, t_state));
    (void)a, (void)b, (void)c;
    close(fd); // on NFS, close sends the writes (close-to-open): the other nodes see them
}

// Whether ring h says its rank ended by an exit of its own (a code it set, not a death another
// rank judged or atexit's unknown one): it said why, so it is nobody's death to report.
static int exited_on_its_own(const flight_header *h) {
    return h->state == FLIGHT_STATE_EXITED && h->exit_code != FLIGHT_EXIT_UNKNOWN &&
           !FLIGHT_EXIT_JUDGED(h->exit_code);
}

// What ring h says of its rank, as the evidence of a death (not an exit of its own).
static const char *ring_says(const flight_header *h) {
    return h->state != FLIGHT_STATE_EXITED ? "its ring says it runs"
           : h->exit_code == FLIGHT_EXIT_UNKNOWN
               ? "its ring says it ended without an exit of its own"
               : "another rank found it dead";
}

// Whether peer ring h is an earlier run's, not yet replaced by this run's peer (a restart in
// the same run.out_dir after a kill leaves rings that say "running" with a dead pid): its
// heartbeat stopped before this rank's recorder opened (every rank opens its ring at the same
// start-up boundary, well within a second of the others).
static int earlier_run(const flight_header *h) { return h->heartbeat < g.h->t_open - 1.0; }

// A peer whose process is gone from this host while its ring says it runs: killed (no exit
// of trident's own marks it). Marked in its ring. Returns the rank or -1.
static int find_vanished_peer(void) {
    for (int i = 0; i < g.n_peers; i++) {
        flight_header h;
        const int r = g.peers[i];
        // Only a peer on this host can be probed (kill(pid, 0)): the others' rings are not read
        // again until a stop request, so that a large group on a shared file system costs
        // nothing per beat.
        if (g.peer_remote[i] || flight_read_header(g.dir, r, &h) != 0) continue;
        if (!g.peer_known[i] && !earlier_run(&h)) {
            g.peer_known[i] = 1;
            g.n_unknown--;
        }
        if (strncmp(h.host, g.h->host, sizeof h.host) != 0) {
            g.peer_remote[i] = 1;
            g.any_remote = 1;
            continue;
        }
        if (h.state == FLIGHT_STATE_EXITED || h.pid <= 0 || earlier_run(&h)) continue;
        if (kill(h.pid, 0) == 0 || errno != ESRCH) continue;
        mark_dead(r, FLIGHT_EXIT_VANISHED);
        return r;
    }
    return -1;
}

// At a stop request: a group peer on another host whose ring shows it dead (flight.h), with
// the evidence into why. Either the ring says it ended without an exit of its own (atexit saw
// no code, or a peer on its host found its pid gone), or it is silent: running, with a
// heartbeat older than FLIGHT_REMOTE_DEAD_S (marked FLIGHT_EXIT_SILENT). A peer that timed
// out is the stall's business. Per call: an open, a 2 KiB pread and a close per remote peer
// (open revalidates a shared file system's cached copy). Returns the rank or -1.
static int find_dead_remote_peer(double now, char *why, size_t cap) {
    for (int i = 0; i < g.n_peers; i++) {
        flight_header h;
        const int r = g.peers[i];
        if (!g.peer_remote[i] || flight_read_header(g.dir, r, &h) != 0 || earlier_run(&h) ||
            exited_on_its_own(&h))
            continue;
        if (h.state == FLIGHT_STATE_EXITED) {
            snprintf(why, cap, "%s; on another host (%.64s)", ring_says(&h), h.host);
            return r;
        }
        // A heartbeat that is not a time (a damaged ring) proves nothing.
        if (h.state != FLIGHT_STATE_RUNNING || !isfinite(h.heartbeat) ||
            now - h.heartbeat <= FLIGHT_REMOTE_DEAD_S)
            continue;
        snprintf(why, cap,
                 "no heartbeat for %.1f s at a stop request; on another host (%.64s), "
                 "so not probed",
                 now - h.heartbeat, h.host);
        mark_dead(r, FLIGHT_EXIT_SILENT);
        return r;
    }
    return -1;
}

// A group peer on another host whose liveness link (flight_link.c) its far end closed while
// its ring says it runs, or says it ended without an exit of its own: dead, with the evidence
// into why (marked FLIGHT_EXIT_UNLINKED in its ring). First asks for links to the first
// FLIGHT_LINKS_OUT remote peers after this rank (cyclic rank order), as their rings appear.
// Returns the rank or -1.
static int find_unlinked_peer(double now, char *why, size_t cap) {
    int first = 0;
    while (first < g.n_peers && g.peers[first] < g.rank) first++;
    for (int k = 0; k < g.n_peers && flight_link_count() < FLIGHT_LINKS_OUT; k++) {
        const int i = (first + k) % g.n_peers;
        if (g.peer_remote[i]) flight_link_want(g.peers[i]);
    }
    const int r = flight_link_poll(now);
    g.h->links_up = (uint32_t)flight_link_up_count();
    flight_header h;
    if (r < 0 || flight_read_header(g.dir, r, &h) != 0 || exited_on_its_own(&h)) return -1;
    snprintf(why, cap,
             "its liveness link closed and %s: its process is gone; on another host (%.64s)",
             ring_says(&h), h.host);
    if (h.state != FLIGHT_STATE_EXITED) mark_dead(r, FLIGHT_EXIT_UNLINKED);
    return r;
}

// Writes the ring back to its file: when another host reads it (flight.h), the header every
// beat and the whole ring every 4th, synchronously (MS_ASYNC is a no-op on Linux); else the
// MS_ASYNC of every 4th beat, for the kernels where it starts a write-back.
static void write_back(int tick) {
    if (g.any_remote) msync(g.h, tick % 4 == 0 ? g.map_bytes : sizeof(flight_header), MS_SYNC);
    else if (tick % 4 == 0) msync(g.h, g.map_bytes, MS_ASYNC);
}

// Prints the verdict of the rings (stderr, unprefixed lines) and keeps it in verdict.txt.
static void publish_verdict(void) {
    static char text[16384];
    msync(g.h, g.map_bytes, MS_SYNC);
    tri_status st = flight_verdict(g.dir, text, sizeof text);
    // Printed first: verdict.txt releases the ranks that wait for it, and they end the job.
    if (st != TRI_OK) fprintf(stderr, "%serror: no verdict: %s\n", log_rank_prefix(), text);
    else fprintf(stderr, "%s", text);
    fflush(stderr);
    char tmp[4400], path[4400];
    snprintf(tmp, sizeof tmp, "%s/verdict.txt.tmp", g.dir);
    snprintf(path, sizeof path, "%s/verdict.txt", g.dir);
    FILE *f = fopen(tmp, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
        rename(tmp, path);
    }
}

// Once a verdict is out the rings are evidence, kept as the verdict saw them: this rank
// records nothing more (a stopped rank that mpirun's SIGCONT wakes must not write over its
// state), so that `trident diagnose` afterwards says what the job said.
static void flight_stdout_flush(void);

static void freeze(void) {
    atomic_store(&g.on, 0);
    msync(g.h, g.map_bytes, MS_SYNC);
}

// When the verdict file was written (CLOCK_REALTIME seconds), 0 if it is not there.
static double verdict_time(void) {
    char path[4400];
    snprintf(path, sizeof path, "%s/verdict.txt", g.dir);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    return (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
}

// A rank is dead (this one found it, or another did): the job cannot go on (the comm would
// wait for it until the timeout, and a preemption checkpoint of the launcher's SIGTERM would
// too). Exit 5, the ring left as the verdict saw it. The ranks end together, at the
// verdict's time + FLIGHT_END_DELAY_S: each sees the verdict within a beat, and mpirun kills
// the others at once (SIGKILL) when one of them ends during its tear-down.
static void end_dead(int dead_rank, const char *evidence) {
    for (int i = 0; i < 100 && !flight_exists(g.dir, "verdict.txt"); i++) usleep(20000);
    if (dead_rank >= 0)
        fprintf(stderr, "%serror: rank %d is dead (%s); ending (exit 5)\n", log_rank_prefix(),
                dead_rank, evidence);
    else
        fprintf(stderr,
                "%serror: a rank of the job is dead (the verdict names it); ending (exit 5)\n",
                log_rank_prefix());
    fflush(stderr);
    flight_stdout_flush();
    const double now = flight_clock(), t_verdict = verdict_time();
    double t_end = t_verdict > 0 ? t_verdict + FLIGHT_END_DELAY_S : now;
    if (t_end > now + FLIGHT_END_DELAY_S) t_end = now + FLIGHT_END_DELAY_S; // clocks apart
    for (double t = now; t < t_end; t = flight_clock()) usleep(5000);
    flight_link_bye();
    _exit(TRI_ERR_COMM);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    int tick = 0, dead_rank = -1, dead_seen = 0;
    double alarm_seen = 0, stop_seen = 0, next_beat = 0;
    char evidence[256] = "its process is gone";
    pthread_mutex_lock(&g.mutex);
    while (flight_enabled()) {
        // A beat, or a poll of the markers when a death is being judged (every rank has to see
        // the verdict within FLIGHT_END_DELAY_S of it).
        // At the start too, until every peer's ring is read and the links are made (a death in
        // the first second is noticed as one later is).
        const int starting = flight_clock() - g.h->t_open < FLIGHT_START_S &&
                             (g.n_unknown > 0 || flight_link_pending());
        const int judging = dead_seen || starting ||
                            (stop_seen && flight_clock() - stop_seen < FLIGHT_STOP_SCAN_S);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)((judging ? FLIGHT_POLL_S : FLIGHT_BEAT_S) * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&g.wake, &g.mutex, &until);
        if (!flight_enabled()) break;
        if (flight_exists(g.dir, "verdict.txt")) {
            dead_seen = dead_seen || flight_exists(g.dir, "dead");
            freeze();
            break;
        }
        const double now = flight_clock();
        const int beat = now >= next_beat, found_before = dead_rank >= 0;
        if (beat) {
            next_beat = now + FLIGHT_BEAT_S - FLIGHT_POLL_S / 2;
            g.h->heartbeat = now;
            write_back(++tick);
        }
        // Who died: a peer on this host whose pid is gone (every beat, and every wake until
        // every ring is read); a remote peer after a stop request (flight.h), unless a stall
        // is judged; a remote peer whose liveness link closed (every wake: a poll without a
        // wait, and a beat while the links are being made).
        if (dead_rank < 0 && (beat || g.n_unknown > 0)) dead_rank = find_vanished_peer();
        if (dead_rank < 0 && beat && g.any_remote && stop_signal()) {
            if (!stop_seen) stop_seen = now;
            if (now - stop_seen < FLIGHT_STOP_SCAN_S && !alarm_seen &&
                !flight_exists(g.dir, "alarm"))
                dead_rank = find_dead_remote_peer(now, evidence, sizeof evidence);
        }
        if (dead_rank < 0 && g.any_remote)
            dead_rank = find_unlinked_peer(now, evidence, sizeof evidence);
        if (!found_before && dead_rank >= 0) flight_touch(g.dir, "dead");
        const int dead = flight_exists(g.dir, "dead");
        dead_seen |= dead;
        if (!alarm_seen && (dead || flight_exists(g.dir, "alarm"))) alarm_seen = now;
        if (!alarm_seen || lowest_live_rank(now) != g.rank) {
            // A rank that found a dead peer waits (bounded) for the lowest live rank's verdict.
            if (dead_rank >= 0 && now - alarm_seen > 3.0) break;
            continue;
        }
        // The lowest live rank: on a stall, a grace for the others' dumps (every live rank of
        // it marks itself TIMED_OUT within about a second of the first), then one verdict. On
        // a death at once: mpirun sends SIGTERM to the others within a second of a rank's
        // death and SIGKILL a second later (odls_base_sigkill_timeout).
        if (!dead && now - alarm_seen < FLIGHT_GRACE_S &&
            !flight_all_live_reported(g.dir, g.world, now))
            continue;
        publish_verdict();
        freeze();
        break;
    }
    pthread_mutex_unlock(&g.mutex);
    if (dead_rank >= 0 || dead_seen) end_dead(dead_rank, evidence);
    return NULL;
}

// ---- open and close ----

void flight_mark_exit(int code) {
    if (!g.h || !flight_enabled()) return; // frozen: the ring is a verdict's evidence
    g.h->exit_code = code;
    g.h->t_state = flight_clock();
    g.h->state = FLIGHT_STATE_EXITED;
    // Before the kernel closes this process's links: the far ends read this state.
    if (g.any_remote) msync(g.h, sizeof(flight_header), MS_SYNC);
}

// stdout's last lines, unless another thread holds its lock (the main thread may be inside
// a printf when the watchdog ends the process).
static void flight_stdout_flush(void) {
    if (ftrylockfile(stdout) != 0) return;
    fflush_unlocked(stdout);
    funlockfile(stdout);
}

static void flight_at_exit(void) {
    if (flight_enabled() && g.h->state != FLIGHT_STATE_EXITED)
        flight_mark_exit(FLIGHT_EXIT_UNKNOWN);
}

// Members of group `grp` of `rank` by the mesh (flight.h: world ranks in group-rank order).
static int group_members(const mesh *m, comm_group_id grp, int rank, int world, int *out, int cap) {
    const int color = mesh_group_color(m, grp, rank);
    if (color < 0) return 0;
    int n = 0;
    for (int r = 0; r < world; r++)
        if (mesh_group_color(m, grp, r) == color) {
            if (n < cap) out[n] = r;
            n++;
        }
    return n;
}

// Removes the files of an earlier run in dir: verdict, alarm, and rings of ranks this world
// does not have (rank 0 only; each rank truncates its own ring).
static void clear_old_files(const char *dir, int world) {
    char path[4400];
    snprintf(path, sizeof path, "%s/verdict.txt", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/alarm", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/dead", dir);
    unlink(path);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int r;
        char ext[8];
        if (sscanf(e->d_name, "rank_%d.%7s", &r, ext) == 2 && r >= world) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

// The host name the ring carries: `host`, or under TRIDENT_TEST_HOSTS (a test hook) item
// rank % count of that comma-separated list, so that ranks of one machine take each other for
// ranks of other nodes (an empty item: the real name).
static void ring_host(char *out, size_t cap, const char *host, int rank) {
    snprintf(out, cap, "%s", host && host[0] ? host : "?");
    const char *list = env_get(ENV_TEST_HOSTS);
    if (!list || !list[0]) return;
    int n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    const char *item = list;
    for (int k = rank % n; k > 0; k--) item = strchr(item, ',') + 1;
    const size_t len = strcspn(item, ",");
    if (len > 0) snprintf(out, cap, "%.*s", (int)(len < cap ? len : cap - 1), item);
}

void flight_open(const char *out_dir, comm *c, const mesh *m, const char *host) {
    if (flight_enabled() || !out_dir || env_int(ENV_FLIGHT_RECORDER, 1) == 0) return;
    snprintf(g.dir, sizeof g.dir, "%s/diagnose", out_dir);
    g.rank = c->world_rank;
    g.world = c->world_size;
    if (make_dirs(g.dir) != 0) {
        LOG_WARN("flight recorder off: cannot create %s: %s", g.dir, strerror(errno));
        return;
    }
    if (g.rank == 0) clear_old_files(g.dir, g.world);
    char path[4400];
    flight_path(path, sizeof path, g.dir, g.rank, "json");
    unlink(path);
    flight_path(path, sizeof path, g.dir, g.rank, "ring");
    g.map_bytes = sizeof(flight_header) + FLIGHT_CAPACITY * sizeof(flight_rec);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)g.map_bytes) != 0) {
        LOG_WARN("flight recorder off: cannot create %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    void *p = mmap(NULL, g.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        LOG_WARN("flight recorder off: cannot map %s: %s", path, strerror(errno));
        return;
    }
    g.h = p;
    g.recs = (flight_rec *)((char *)p + sizeof(flight_header));
    flight_header *h = g.h;
    h->version = FLIGHT_VERSION;
    h->header_size = sizeof(flight_header);
    h->rec_size = sizeof(flight_rec);
    h->capacity = FLIGHT_CAPACITY;
    h->rank = g.rank;
    h->world = g.world;
    h->pid = (int32_t)getpid();
    h->mesh_tp = m->tp, h->mesh_dp = m->dp, h->mesh_pp = m->pp;
    ring_host(h->host, sizeof h->host, host, g.rank);
    h->t_open = h->heartbeat = flight_clock();
    h->step = h->micro = h->chunk = -1;
    int *is_peer = xcalloc((size_t)g.world, sizeof(int));
    int *members = xcalloc((size_t)g.world, sizeof(int));
    for (int grp = 0; grp < COMM_GROUP_COUNT; grp++) {
        int n = group_members(m, (comm_group_id)grp, g.rank, g.world, members, g.world);
        if (n != c->groups[grp].size) n = c->groups[grp].size; // zbv's one-rank embed group
        h->group_size[grp] = n;
        for (int k = 0; k < n && k < FLIGHT_MAX_GROUP; k++) h->members[grp][k] = members[k];
        for (int k = 0; grp != COMM_GROUP_WORLD && k < n && k < g.world; k++)
            is_peer[members[k]] = members[k] != g.rank;
        if (n > 1) {
            g.send_seq[grp] = xcalloc((size_t)n, sizeof(uint64_t));
            g.recv_seq[grp] = xcalloc((size_t)n, sizeof(uint64_t));
        }
    }
    g.peers = members; // reused: the peers, in rank order
    g.n_peers = 0;
    for (int r = 0; r < g.world; r++)
        if (is_peer[r]) g.peers[g.n_peers++] = r;
    free(is_peer);
    g.peer_remote = xcalloc((size_t)g.n_peers + 1, 1);
    g.peer_known = xcalloc((size_t)g.n_peers + 1, 1);
    g.n_unknown = g.n_peers;
    // No links: a death on another host waits for a stop request or the stall timeout.
    if (env_int(ENV_FLIGHT_LINKS, 1) != 0) flight_link_listen(g.dir, h);
    // The magic last: a peer that reads the header whole reads it filled.
    atomic_thread_fence(memory_order_release);
    memcpy(h->magic, FLIGHT_MAGIC, 8);
    atomic_store(&g.on, 1);
    stop_set_exit_hook(flight_mark_exit);
    static int registered;
    if (!registered++) atexit(flight_at_exit);
    if (pthread_create(&g.thread, NULL, watchdog_main, NULL) != 0) {
        LOG_WARN("flight recorder: no watchdog thread: no heartbeat, dead ranks go unnoticed");
    }
}

void flight_close(int code) {
    if (!flight_enabled()) return;
    flight_mark_exit(code);
    pthread_mutex_lock(&g.mutex);
    atomic_store(&g.on, 0);
    pthread_cond_signal(&g.wake);
    pthread_mutex_unlock(&g.mutex);
    pthread_join(g.thread, NULL);
    msync(g.h, g.map_bytes, MS_SYNC);
    flight_link_bye();
    flight_link_close();
    munmap(g.h, g.map_bytes);
    g.h = NULL;
    for (int grp = 0; grp < COMM_GROUP_COUNT; grp++) {
        free(g.send_seq[grp]), free(g.recv_seq[grp]);
        g.send_seq[grp] = g.recv_seq[grp] = NULL;
    }
    free(g.peers);
    free(g.peer_remote);
    free(g.peer_known);
    g.peer_known = NULL;
    g.peers = NULL;
    g.peer_remote = NULL;
    g.any_remote = 0;
    memset(g.coll_seq, 0, sizeof g.coll_seq);
}

// ---- the stall ----

void flight_stall(double waited_s) {
    // Frozen, or the verdict is out already (another rank's stall): nothing to add.
    if (!flight_enabled() || flight_exists(g.dir, "verdict.txt")) return;
    (void)waited_s;
    flight_header *h = g.h;
    h->t_state = flight_clock();
    h->state = FLIGHT_STATE_TIMED_OUT;
    char path[4400], tmp[4500];
    flight_path(path, sizeof path, g.dir, g.rank, "json");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f) {
        flight_write_json(h, g.recs, f);
        if (fclose(f) == 0) rename(tmp, path);
    }
    msync(g.h, g.map_bytes, MS_SYNC);
    flight_touch(g.dir, "alarm");
    // The lowest live rank's watchdog prints the verdict; wait for it (bounded), else print
    // it here: one verdict in the normal case, never none.
    const double t0 = flight_clock();
    while (flight_clock() - t0 < FLIGHT_GRACE_S + 3.0) {
        if (flight_exists(g.dir, "verdict.txt")) return;
        usleep(100000);
    }
    publish_verdict();
}
