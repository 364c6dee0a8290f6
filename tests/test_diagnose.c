// test_diagnose.c: the flight recorder's verdict (comm/flight.h) on hand-made rings, and the
// seeded fuzzer of its reader.
//
//   build/tests/test_diagnose [--cases N] [--seed S]
//
// The verdict cases build each rank's ring from the file format alone (flight.h's structs,
// the groups from the rank layout of DESIGN.md), not with the recorder that writes them in a
// run: a missing poster, a pipeline pair where one side is behind, an operation every member
// posted and one never completed, a job where every rank dumped (a collective mismatch), and a
// rank with no ring at all. The fuzzer mutates a valid set of rings (families below, N cases
// each, 60 by default) and asserts what flight_verdict must do: a verdict, or TRI_ERR_CKPT
// naming the mutated file; never a crash or a run past the bound. Each case runs in a worker
// process, so that a crash or a hang is counted, not fatal.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "comm/flight.h"
#include "comm/flight_internal.h"
#include "comm/mesh.h"
#include "fuzzlib.h"
#include "testlib.h"

static char g_dir[256];
static uint64_t g_seed = 19, g_state; // the fuzzers' (rnd)
static uint64_t rnd(void);

typedef struct {
    flight_header h;
    flight_rec r[FLIGHT_CAPACITY];
    uint64_t coll[COMM_GROUP_COUNT];
    uint64_t p2p[2][COMM_GROUP_COUNT][64]; // [recv?][group][peer world rank]
    int present;
} ring;

static ring g_rings[8];
static int g_world;
static double g_now = 1.8e9; // a fixed wall clock: the verdict is a function of the files

// A job of tp x dp x pp ranks, every one running with a fresh heartbeat.
static void job_new(int tp, int dp, int pp) {
    memset(g_rings, 0, sizeof g_rings);
    g_world = tp * dp * pp;
    const mesh m = {tp, dp, pp};
    for (int r = 0; r < g_world; r++) {
        flight_header *h = &g_rings[r].h;
        memcpy(h->magic, FLIGHT_MAGIC, 8);
        h->version = FLIGHT_VERSION;
        h->header_size = sizeof *h;
        h->rec_size = sizeof(flight_rec);
        h->capacity = FLIGHT_CAPACITY;
        h->rank = r, h->world = g_world, h->pid = 1000 + r;
        h->mesh_tp = tp, h->mesh_dp = dp, h->mesh_pp = pp;
        snprintf(h->host, sizeof h->host, "n%02d", r);
        h->t_open = g_now - 100;
        h->heartbeat = g_now;
        h->step = 7;
        h->activity = FLIGHT_ACT_FORWARD;
        for (int g = 0; g < COMM_GROUP_COUNT; g++) {
            const int color = mesh_group_color(&m, (comm_group_id)g, r);
            if (color < 0) continue;
            for (int o = 0; o < g_world; o++)
                if (mesh_group_color(&m, (comm_group_id)g, o) == color)
                    h->members[g][h->group_size[g]++] = o;
        }
        g_rings[r].present = 1;
    }
}

// Appends an operation to rank r's ring (completed at t_done, 0: not). Returns the record.
static flight_rec *op(int r, comm_group_id g, int kind, int peer, uint64_t bytes, double t_post,
                      double t_done) {
    ring *R = &g_rings[r];
    flight_header *h = &R->h;
    uint64_t seq;
    if (kind == COMM_OP_SEND || kind == COMM_OP_RECV) seq = ++R->p2p[kind == COMM_OP_RECV][g][peer];
    else seq = ++R->coll[g];
    const uint64_t index = ++h->n_ops;
    flight_rec *rec = &R->r[(index - 1) % FLIGHT_CAPACITY];
    *rec = (flight_rec){.index = index,
                        .seq = seq,
                        .bytes = bytes,
                        .t_posted = t_post,
                        .t_started = t_post,
                        .t_completed = t_done,
                        .step = h->step,
                        .micro = 1,
                        .chunk = 0,
                        .peer = peer,
                        .group = (uint8_t)g,
                        .op = (uint8_t)kind,
                        .dtype = DTYPE_FP32,
                        .activity = (uint8_t)h->activity};
    return rec;
}

// Rank r waits for its newest operation, and timed out at the deadline (g_now - 0.5).
static void waits(int r, int timed_out) {
    flight_header *h = &g_rings[r].h;
    h->waiting_first = h->n_ops;
    h->waiting_n = 1;
    if (timed_out) h->state = FLIGHT_STATE_TIMED_OUT, h->t_state = g_now - 0.5;
}

static void stopped(int r, double silent_s) { g_rings[r].h.heartbeat = g_now - silent_s; }

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void job_write(const char *dir) {
    mkdir(dir, 0755);
    for (int r = 0; r < g_world; r++) {
        char path[700];
        snprintf(path, sizeof path, "%s/rank_%05d.ring", dir, r);
        unlink(path);
        if (!g_rings[r].present) continue;
        char buf[sizeof(flight_header) + sizeof g_rings[r].r];
        memcpy(buf, &g_rings[r].h, sizeof(flight_header));
        memcpy(buf + sizeof(flight_header), g_rings[r].r, sizeof g_rings[r].r);
        write_file(path, buf, sizeof buf);
    }
}

static char g_text[16384];

static tri_status verdict_of(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    job_write(dir);
    tri_status st = flight_verdict(dir, g_text, sizeof g_text);
    printf("# %s:\n%s", name, g_text);
    return st;
}

static void expect(const char *name, tri_status st, const char *const *want, int n) {
    int ok = st == TRI_OK;
    const char *missing = "";
    for (int i = 0; ok && i < n; i++)
        if (!strstr(g_text, want[i])) ok = 0, missing = want[i];
    TEST_CHECK(ok, name, "status %d, '%s' not in the verdict", (int)st, missing);
}

// ---- the verdict cases ----

static void case_missing_poster(void) {
    // dp4: ranks 0-2 posted dp all_reduce #3 and wait; rank 3, stopped 4 s before, did #1-2.
    job_new(1, 4, 1);
    for (int r = 0; r < 4; r++) {
        op(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 4096, g_now - 20, g_now - 19);
        op(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 4096, g_now - 10, g_now - 9.5);
        if (r < 3) { // the reduction of ZeRO bucket 3 (flight_set_bucket)
            op(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 12600000, g_now - 8, 0)->bucket = 3 + 1;
            waits(r, 1);
        }
    }
    g_rings[3].h.activity = FLIGHT_ACT_BACKWARD;
    stopped(3, 4.5);
    const char *want[] = {"dp group {0,1,2,3}: dp all_reduce #3 of bucket 3 (12.6 MB fp32",
                          "posted by rank 0, 1, 2; rank 3 never posted it",
                          "rank 3 (host n03, pid 1003): stopped",
                          "last completed dp all_reduce #2 at 9.0 s before the deadline",
                          "doing backward (micro-batch",
                          "blamed rank 3 (host n03)"};
    expect("verdict_missing_poster", verdict_of("missing_poster"), want, 6);
}

static void case_p2p_behind(void) {
    // pp2: rank 0 waits for pp recv #3 from rank 1; rank 1 (running, in a forward) sent #1-2.
    job_new(1, 1, 2);
    for (int k = 0; k < 2; k++) {
        op(1, COMM_GROUP_PP, COMM_OP_SEND, 0, 4096, g_now - 30 + k, g_now - 29.9 + k);
        op(0, COMM_GROUP_PP, COMM_OP_RECV, 1, 4096, g_now - 30 + k, g_now - 29.9 + k);
    }
    op(0, COMM_GROUP_PP, COMM_OP_RECV, 1, 4096, g_now - 6, 0);
    waits(0, 1);
    const char *want[] = {"pp group {0,1}: pp recv #3 from rank 1", "rank 1 never posted it",
                          "rank 1 (host n01, pid 1001): running",
                          "last completed pp send #2 to rank 0", "blamed rank 1 (host n01)"};
    expect("verdict_p2p_one_side_behind", verdict_of("p2p_behind"), want, 5);
}

static void case_never_completed(void) {
    // dp2: both posted dp all_gather #1; rank 1 then stopped inside it.
    job_new(1, 2, 1);
    op(0, COMM_GROUP_DP, COMM_OP_ALL_GATHER, -1, 2048, g_now - 5, 0);
    waits(0, 1);
    op(1, COMM_GROUP_DP, COMM_OP_ALL_GATHER, -1, 2048, g_now - 5, 0);
    waits(1, 0);
    stopped(1, 3.0);
    const char *want[] = {"dp all_gather #1", "every member posted it; rank 1 never completed it",
                          "rank 1 (host n01, pid 1001): stopped", "no operation completed",
                          "blamed rank 1 (host n01)"};
    expect("verdict_all_posted_one_never_completed", verdict_of("never_completed"), want, 5);
}

static void case_every_rank_dumped(void) {
    // tp2 x dp2, every rank timed out and dumped, in a cycle: rank 0 waits in dp all_reduce
    // #2 with rank 2, which started it and waits in tp all_reduce #5 with rank 3; rank 3 waits
    // in dp all_reduce #2 with rank 1; rank 1 waits in tp all_reduce #5 with rank 0. The
    // earliest operation some rank never posted is named: dp {1,3} #2, missing rank 1.
    job_new(2, 2, 1);
    for (int r = 0; r < 4; r++)
        op(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 4; k++)
            op(r, COMM_GROUP_TP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 8, g_now - 7.9);
    op(0, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 7, 0);
    waits(0, 1);
    op(2, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 7, 0);
    op(2, COMM_GROUP_TP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 6, 0);
    waits(2, 1);
    op(3, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 7, 0);
    waits(3, 1);
    op(1, COMM_GROUP_TP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 6.5, 0);
    waits(1, 1);
    tri_status st = verdict_of("every_rank_dumped");
    const char *want[] = {"dp group {1,3}: dp all_reduce #2",
                          "posted by rank 3; rank 1 never posted it",
                          "rank 1 (host n01, pid 1001): timed out waiting",
                          "also waiting: rank 0 on dp all_reduce #2", "blamed rank 1 (host n01)"};
    expect("verdict_every_rank_dumped", st, want, 5);
}

static void case_no_ring(void) {
    // dp2: rank 0 waits in dp all_reduce #2; rank 1 left no ring at all.
    job_new(1, 2, 1);
    op(0, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    op(0, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 7, 0);
    waits(0, 1);
    g_rings[1].present = 0;
    const char *want[] = {"dp all_reduce #2", "rank 1 never posted it", "rank 1: no ring",
                          "blamed rank 1 (host unknown)"};
    expect("verdict_rank_without_ring", verdict_of("no_ring"), want, 4);
}

static void case_dead(void) {
    // dp2, nobody waiting yet: rank 1 vanished (its peer marked it), rank 0 computes.
    job_new(1, 2, 1);
    op(0, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    op(1, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    g_rings[1].h.state = FLIGHT_STATE_EXITED;
    g_rings[1].h.exit_code = -1001; // FLIGHT_EXIT_VANISHED
    g_rings[1].h.t_state = g_now - 0.3;
    stopped(1, 0.5);
    const char *want[] = {"rank 1 (host n01, pid 1001): dead", "blamed rank 1 (host n01)"};
    expect("verdict_dead_rank", verdict_of("dead"), want, 2);
}

static void case_dead_remote(void) {
    // dp2: rank 1, on another host, went silent; rank 0 found its heartbeat 1.3 s old at a
    // stop request (flight.c) and marked it, with the evidence the verdict names.
    job_new(1, 2, 1);
    op(0, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    op(1, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    stopped(1, 1.6);
    g_rings[1].h.state = FLIGHT_STATE_EXITED;
    g_rings[1].h.exit_code = -1002; // FLIGHT_EXIT_SILENT
    g_rings[1].h.t_state = g_now - 0.3;
    const char *want[] = {"rank 1 (host n01, pid 1001): dead: no heartbeat for 1.3 s at a stop "
                          "request",
                          "on another host, so not probed; last completed dp all_reduce #1",
                          "blamed rank 1 (host n01)"};
    expect("verdict_dead_remote_rank", verdict_of("dead_remote"), want, 3);
}

static void case_wait_behind_stopped(void) {
    // pp2 x dp2, the step end: two ranks posted world all_reduce #2 and wait; the stopped
    // rank's pipeline peer waits on a receive from it, so it never posted the all_reduce
    // either. The stall is the receive (only the stopped rank missing), not the collective
    // that names both, posted earlier (test_diagnose.sh saw it first in a real job).
    job_new(1, 2, 2);
    const int victim = 2;
    const flight_header *vh = &g_rings[victim].h;
    const int peer = vh->members[COMM_GROUP_PP][0] == victim ? vh->members[COMM_GROUP_PP][1]
                                                             : vh->members[COMM_GROUP_PP][0];
    for (int r = 0; r < 4; r++)
        op(r, COMM_GROUP_WORLD, COMM_OP_ALL_REDUCE, -1, 24, g_now - 20, g_now - 19.9);
    for (int r = 0; r < 4; r++) {
        if (r == victim) continue;
        if (r == peer) op(r, COMM_GROUP_PP, COMM_OP_RECV, victim, 4096, g_now - 7, 0);
        else op(r, COMM_GROUP_WORLD, COMM_OP_ALL_REDUCE, -1, 24, g_now - 8, 0);
        waits(r, 1);
    }
    stopped(victim, 4.5);
    char want0[128], want1[64];
    snprintf(want0, sizeof want0, "pp recv #1 from rank %d", victim);
    snprintf(want1, sizeof want1, "posted by rank %d; rank %d never posted it", peer, victim);
    const char *want[] = {want0, want1, "blamed rank 2 (host n02)"};
    expect("verdict_wait_behind_stopped_rank", verdict_of("behind_stopped"), want, 3);
}

static void case_dead_linked(void) {
    // dp2: rank 1, on another host, closed its liveness link while its ring said it ran; rank
    // 0 marked it (flight_link.c).
    job_new(1, 2, 1);
    op(0, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    op(1, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 64, g_now - 9, g_now - 8.9);
    g_rings[1].h.state = FLIGHT_STATE_EXITED;
    g_rings[1].h.exit_code = FLIGHT_EXIT_UNLINKED;
    g_rings[1].h.t_state = g_now - 0.2;
    stopped(1, 0.3);
    const char *want[] = {"rank 1 (host n01, pid 1001): dead: its process is gone with no exit "
                          "of its own (killed by a signal?); its liveness link to a rank on "
                          "another host closed",
                          "blamed rank 1 (host n01)"};
    expect("verdict_dead_linked_rank", verdict_of("dead_linked"), want, 2);
}

// ---- the liveness links (flight_link.c) ----
//
// Rank 0 is this process, rank 1 a child with its own listener; each publishes its ring
// header (the link fields) in g_dir/links, as a run does. What a link must say: the child
// killed is a death; the child ending with a bye, or stopped, is not.

static char g_links[600];

// A ring header of rank r (world 2) with its listener open: written to g_links.
static void link_rank_open(int r, flight_header *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, FLIGHT_MAGIC, 8);
    h->rank = r, h->world = 2, h->pid = (int32_t)getpid();
    h->t_open = h->heartbeat = flight_clock();
    TEST_CHECK(flight_link_listen(g_links, h) == 0 || r != 0, "link_listen", "rank %d", r);
    char path[700];
    flight_path(path, sizeof path, g_links, r, "ring");
    write_file(path, h, sizeof *h);
}

// Polls this process's links for up to `s` seconds: the rank of a death reported, or -1.
static int link_poll_for(double s) {
    const double t0 = flight_clock();
    while (flight_clock() - t0 < s) {
        const int r = flight_link_poll(flight_clock());
        if (r >= 0) return r;
        usleep(5000);
    }
    return -1;
}

// The child: rank 1, polling its links; `how` when rank 0's link is up: 'k' wait to be
// killed or stopped, 'b' say bye and exit 0.
static pid_t link_child(char how) {
    char path[700];
    flight_path(path, sizeof path, g_links, 1, "ring");
    unlink(path); // the last child's, whose port is closed
    fflush(stdout);
    const pid_t pid = fork();
    if (pid != 0) return pid;
    flight_link_close(); // the parent's sockets: not the child's
    flight_header h;
    link_rank_open(1, &h);
    const double t0 = flight_clock();
    while (flight_clock() - t0 < 20) {
        flight_link_poll(flight_clock());
        if (how == 'b' && flight_link_up(0)) {
            usleep(50000);
            flight_link_bye();
            flight_link_close();
            _exit(0);
        }
        usleep(5000);
    }
    _exit(1);
}

static int link_to_child(pid_t child) {
    flight_link_close();
    flight_header h;
    link_rank_open(0, &h);
    flight_link_want(1);
    const double t0 = flight_clock();
    while (flight_clock() - t0 < 5 && !flight_link_up(1)) {
        if (flight_link_poll(flight_clock()) >= 0) break;
        usleep(5000);
    }
    const int up = flight_link_up(1);
    if (!up) kill(child, SIGKILL);
    return up;
}

static void case_links(void) {
    snprintf(g_links, sizeof g_links, "%s/links", g_dir);
    mkdir(g_links, 0755);
    // Killed: the far end closes; reported once.
    pid_t c = link_child('k');
    if (link_to_child(c)) {
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        const double t0 = flight_clock();
        const int r = link_poll_for(2.0);
        TEST_CHECK(r == 1, "link_killed_peer_is_death", "reported %d", r);
        printf("# liveness link: a killed peer reported %.0f ms after its end\n",
               1e3 * (flight_clock() - t0));
        TEST_CHECK(link_poll_for(0.2) == -1, "link_death_reported_once", "reported again");
    } else TEST_CHECK(0, "link_killed_peer_is_death", "no link made in 5 s");
    waitpid(c, NULL, WNOHANG);
    // A bye, then the end: no death.
    c = link_child('b');
    if (link_to_child(c)) {
        waitpid(c, NULL, 0);
        TEST_CHECK(link_poll_for(0.5) == -1, "link_bye_is_no_death", "a death reported");
    } else TEST_CHECK(0, "link_bye_is_no_death", "no link made in 5 s");
    // Stopped: the link stays; killed later: a death.
    c = link_child('k');
    if (link_to_child(c)) {
        kill(c, SIGSTOP);
        TEST_CHECK(link_poll_for(0.5) == -1, "link_stopped_is_no_death", "a death reported");
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        TEST_CHECK(link_poll_for(2.0) == 1, "link_stopped_then_killed_is_death", "not reported");
    } else TEST_CHECK(0, "link_stopped_is_no_death", "no link made in 5 s");
    flight_link_close();
}

// The seeded fuzzer of the listener (the network is outside input): connections that send
// random bytes, a hello cut short, or a hello with one field wrong (magic, nonce, rank), then
// close. None may be answered, none may count as a death, the listener must survive them; a
// valid hello afterwards is answered.
static void fuzz_links(int cases) {
    flight_link_close();
    flight_header h;
    link_rank_open(0, &h);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(h.link_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int answered = 0, deaths = 0, failed = 0;
    struct {
        char magic[4];
        int32_t from;
        uint64_t nonce;
    } hello;
    g_state = g_seed * 7777u;
    for (int c = 0; c <= cases; c++) {
        const int valid = c == cases;
        memcpy(hello.magic, "TLK1", 4);
        hello.from = 1;
        hello.nonce = h.link_nonce;
        unsigned char buf[64];
        size_t len = sizeof hello;
        memcpy(buf, &hello, sizeof hello);
        switch (valid ? -1 : (int)(rnd() % 5)) {
        case 0:
            len = rnd() % sizeof buf;
            for (size_t k = 0; k < len; k++) buf[k] = (unsigned char)rnd();
            break;
        case 1: len = rnd() % sizeof hello; break;
        case 2: buf[rnd() % 4] ^= (unsigned char)(1 + rnd() % 255); break;
        case 3: buf[8 + rnd() % 8] ^= (unsigned char)(1 + rnd() % 255); break;
        case 4: {
            const int32_t bad[] = {0, -1, 2, INT32_MIN, INT32_MAX};
            memcpy(buf + 4, &bad[rnd() % 5], 4);
            break;
        }
        default: break;
        }
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            failed++;
            if (fd >= 0) close(fd);
            continue;
        }
        if (len && send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) failed++;
        // The listener's answer (or its close) within 3 s of polls.
        char ack = 0;
        int got = 0;
        const double t0 = flight_clock();
        while (flight_clock() - t0 < 3.0) {
            deaths += flight_link_poll(flight_clock()) >= 0;
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 2) == 1) {
                got = (int)recv(fd, &ack, 1, MSG_DONTWAIT);
                break;
            }
            if (!valid && len < sizeof hello && flight_clock() - t0 > 0.05) break; // waits for more
        }
        if (valid) {
            TEST_CHECK(got == 1 && ack == 'K', "fuzz_link_valid_hello_answered",
                       "got %d byte(s) '%c' after %d cases", got, ack, cases);
            if (send(fd, "B", 1, MSG_NOSIGNAL) != 1) failed++; // a bye: its end is no death
            usleep(20000);
        } else answered += got == 1 && ack == 'K';
        close(fd);
        deaths += link_poll_for(0.01) >= 0;
    }
    deaths += link_poll_for(0.05) >= 0;
    printf("fuzz_link: %d cases, %d answered, %d deaths reported, %d connections failed\n", cases,
           answered, deaths, failed);
    TEST_CHECK(!answered && !deaths && !failed, "fuzz_link_hello",
               "%d of %d bad hellos answered, %d deaths reported, %d connections failed", answered,
               cases, deaths, failed);
    flight_link_close();
}

// ---- the recorder's cost ----

// The cost per operation of the recorder's hooks (post, started, completed, as comm_dispatch.c
// calls them), on a real ring of a world of one: printed for the closing note, not asserted
// (timing on a shared machine). Also checks the ring it wrote reads back.
static void bench_recorder(void) {
    comm *c = NULL;
    if (comm_self_create(&c, NULL) != TRI_OK) {
        TEST_CHECK(0, "recorder_bench_setup", "comm_self_create failed");
        return;
    }
    char out_dir[512];
    snprintf(out_dir, sizeof out_dir, "%s/bench", g_dir);
    mkdir(out_dir, 0755);
    const mesh m = {1, 1, 1};
    flight_open(out_dir, c, &m, "benchhost");
    const int n = 2000000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        uint64_t rec = flight_post(COMM_GROUP_DP, COMM_OP_ALL_REDUCE, 4096, DTYPE_FP32, -1);
        flight_started(rec, 1);
        flight_completed(rec, 1);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    const double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / n;
    printf("# flight recorder: %.1f ns per operation (post + started + completed, %d operations)\n",
           ns, n);
    flight_set_step(3);
    flight_close(0);
    comm_destroy(c);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/diagnose", out_dir);
    tri_status st = flight_verdict(dir, g_text, sizeof g_text);
    TEST_CHECK(st == TRI_OK && strstr(g_text, "no rank to blame"), "recorder_ring_reads_back",
               "status %d: %s", (int)st, g_text);
}

// ---- the fuzzer ----

enum { FAM_TRUNCATE, FAM_EXTEND, FAM_BITFLIP, FAM_HEADER_FIELD, FAM_RECORD_FIELD, FAM_COUNT };
static const char *FAM_NAMES[FAM_COUNT] = {"ring_truncate", "ring_extend", "ring_bitflip",
                                           "ring_header_field", "ring_record_field"};

static uint64_t rnd(void) { return fuzz_rnd(&g_state); }

// Writes case c of family fam into dir: the missing-poster job with rank `victim`'s ring
// mutated. Returns whether the mutation always breaks the file (a success is then wrong).
static int make_case(int fam, int c, const char *dir, int *victim) {
    g_state = g_seed * 1000003u + (uint64_t)fam * 7919u + (uint64_t)c;
    job_new(1, 4, 1);
    for (int r = 0; r < 4; r++) {
        for (int k = 0; k < 3 + (int)(rnd() % 300); k++)
            op(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 4096, g_now - 20, g_now - 19);
        op(r, COMM_GROUP_DP, COMM_OP_ALL_REDUCE, -1, 4096, g_now - 8, 0);
        waits(r, 1);
    }
    job_write(dir);
    *victim = (int)(rnd() % 4);
    char path[700];
    snprintf(path, sizeof path, "%s/rank_%05d.ring", dir, *victim);
    const size_t n = sizeof(flight_header) + sizeof g_rings[0].r;
    unsigned char *buf = malloc(n + 4096);
    memcpy(buf, &g_rings[*victim].h, sizeof(flight_header));
    memcpy(buf + sizeof(flight_header), g_rings[*victim].r, sizeof g_rings[0].r);
    size_t len = n;
    int always_bad = 0;
    switch (fam) {
    case FAM_TRUNCATE: len = rnd() % n, always_bad = 1; break;
    case FAM_EXTEND: len = n + 1 + rnd() % 4000, always_bad = 1; break;
    case FAM_BITFLIP:
        for (int k = 0, m = 1 + (int)(rnd() % 8); k < m; k++)
            buf[rnd() % n] ^= (unsigned char)(1u << (rnd() % 8));
        break;
    case FAM_HEADER_FIELD: { // a random 4-byte word of the header's used part
        const size_t at = (rnd() % (offsetof(flight_header, pad) / 4)) * 4;
        const uint32_t v = (uint32_t)rnd();
        memcpy(buf + at, &v, 4);
        break;
    }
    case FAM_RECORD_FIELD: { // a random 4-byte word of a random record
        const size_t at = sizeof(flight_header) + (rnd() % FLIGHT_CAPACITY) * sizeof(flight_rec) +
                          (rnd() % (offsetof(flight_rec, pad) / 4)) * 4;
        const uint32_t v = rnd() % 2 ? (uint32_t)rnd() : 0xffffffffu;
        memcpy(buf + at, &v, 4);
        break;
    }
    }
    write_file(path, buf, len);
    free(buf);
    return always_bad;
}

typedef struct {
    int cases, clean_errors, verdicts, crashes, hangs, wrong_successes, wrong_failures;
} fam_count;

// Runs flight_verdict on dir in a child: its status (0, 4, 2), -SIG when it died, -100 hung.
static int run_child(const char *dir, char *out, size_t cap) {
    int p[2];
    if (pipe(p)) abort();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        alarm(5);
        char text[16384];
        tri_status st = flight_verdict(dir, text, sizeof text);
        ssize_t w = write(p[1], text, strlen(text));
        (void)w;
        _exit((int)st);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t got;
    while (len + 1 < cap && (got = read(p[0], out + len, cap - 1 - len)) > 0) len += (size_t)got;
    out[len] = '\0';
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGALRM ? -100 : -WTERMSIG(status);
    return WEXITSTATUS(status);
}

static void fuzz(int cases) {
    for (int fam = 0; fam < FAM_COUNT; fam++) {
        fam_count n = {0};
        for (int c = 0; c < cases; c++) {
            char dir[512], out[16384], named[64];
            snprintf(dir, sizeof dir, "%s/fuzz_%s", g_dir, FAM_NAMES[fam]);
            int victim;
            const int always_bad = make_case(fam, c, dir, &victim);
            snprintf(named, sizeof named, "rank_%05d.ring", victim);
            const int rc = run_child(dir, out, sizeof out);
            n.cases++;
            const char *why = NULL;
            if (rc == -100) n.hangs++, why = "ran past 5 s";
            else if (rc < 0) n.crashes++, why = strsignal(-rc);
            else if (rc == 0 && always_bad) n.wrong_successes++, why = "accepted a broken ring";
            else if (rc == 0 && !strstr(out, "diagnose:")) n.wrong_failures++, why = "no verdict";
            else if (rc == 0) n.verdicts++;
            else if (rc != TRI_ERR_CKPT || !strstr(out, named))
                n.wrong_failures++, why = "not exit 4 naming the file";
            else n.clean_errors++;
            if (why)
                printf("FAIL %s_case_%d: %s (exit %d; seed %llu)\n%s\n", FAM_NAMES[fam], c, why, rc,
                       (unsigned long long)g_seed, out);
        }
        printf("%s: %d cases, %d clean errors, %d verdicts, %d crashes, %d hangs, %d wrong "
               "successes, %d wrong failures\n",
               FAM_NAMES[fam], n.cases, n.clean_errors, n.verdicts, n.crashes, n.hangs,
               n.wrong_successes, n.wrong_failures);
        char name[96];
        snprintf(name, sizeof name, "fuzz_%s", FAM_NAMES[fam]);
        TEST_CHECK(n.cases == cases && !n.crashes && !n.hangs && !n.wrong_successes &&
                       !n.wrong_failures,
                   name, "see the FAIL lines above");
    }
}

int main(int argc, char **argv) {
    int cases = 60;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cases")) cases = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) g_seed = strtoull(argv[i + 1], NULL, 10);
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/test_diagnose.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    case_missing_poster();
    case_p2p_behind();
    case_never_completed();
    case_every_rank_dumped();
    case_no_ring();
    case_dead();
    case_dead_remote();
    case_dead_linked();
    case_wait_behind_stopped();
    case_links();
    // A directory with no ring, and a truncated ring: the CLI's exit codes 2 and 4.
    char empty[512];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    mkdir(empty, 0755);
    TEST_CHECK(flight_verdict(empty, g_text, sizeof g_text) == TRI_ERR_CONFIG &&
                   strstr(g_text, "no flight recorder ring"),
               "verdict_empty_dir", "'%s'", g_text);
    fuzz(cases);
    fuzz_links(cases);
    bench_recorder();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    TEST_EXIT();
}
