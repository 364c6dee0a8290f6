// flight.h: the flight recorder (issue 19): every rank keeps its last FLIGHT_CAPACITY comm
// operations in a ring, so that a stalled or dead job can say which rank, host and operation
// it waits for.
//
// The ring lives in a MAP_SHARED file, <out_dir>/diagnose/rank_XXXXX.ring: a header (rank,
// host, pid, mesh, heartbeat, state, what the rank is doing now) and FLIGHT_CAPACITY
// fixed-size records. Writing a record is a few stores into that mapping (no system call),
// and the page cache keeps what a stopped or killed rank wrote last, readable by the other
// ranks on the node and by `trident diagnose` afterwards. A watchdog thread beats the
// heartbeat every FLIGHT_BEAT_S; when a group peer is on another host it also writes the
// header's page back every beat and the whole file every second (msync MS_SYNC), so that the
// other nodes see them through a shared file system (MS_ASYNC is a no-op on Linux: the
// kernel's own write-back of a dirty page may wait 30 s).
//
// comm_dispatch.c records every operation that reaches a backend (groups of one never do):
// posted (the layer's start), started (the backend's start returned; for a send or receive the
// group's end) and completed (the wait returned, or the start completed it inside). Sequence
// numbers are counted per group in call order for collectives (the same number on every member
// for the same collective, since every member calls them in the same order) and per (group,
// peer, direction) for sends and receives (send #k from A to B meets receive #k on B from A).
//
// The trainer and the executor say what the rank is doing (flight_set_step,
// flight_set_activity); every record carries it.
//
// The verdict (flight_verdict): when a collective exceeds system.comm_timeout_s, the backend
// calls flight_stall; the lowest live rank (fresh heartbeat) reads every ring, prints one
// verdict naming the group, the operation and its sequence number, the ranks that never posted
// or never completed it, and each missing rank's host and last completed operation; then the
// job ends with exit 5. A rank whose process is gone (a dead pid on this host) is noticed by
// the watchdogs of its group peers within about FLIGHT_BEAT_S, with the same verdict.
//
// A group peer on another host cannot be probed by pid. Its liveness link (flight_link.c) says
// when it dies: each rank listens on a TCP port published in its ring, connects to up to
// FLIGHT_LINKS_OUT group peers on other hosts, and a link whose far end closes while that
// peer's ring says it runs is its death (the kernel closes a dead process's sockets, however
// it died; a stopped one's stay open): the same verdict and exit 5, within a beat, under any
// launcher (srun cancels a step with SIGKILL alone, about 2.5 s after a death).
//
// Where no link could be made (TRIDENT_FLIGHT_LINKS=0, a firewall), a remote peer's ring is
// read when a stop request (SIGTERM, SIGUSR1, SIGINT) comes, every beat for
// FLIGHT_STOP_SCAN_S (reading it every beat would cost the shared file system a request per
// peer and beat): mpirun ends a job that lost a rank that way (SIGTERM about 1 s after the
// death, SIGKILL 1 s later). A peer whose ring says it ended without an exit of its own, or
// whose heartbeat is older than FLIGHT_REMOTE_DEAD_S, is dead: the same verdict, naming the
// evidence, and exit 5. A genuine preemption finds every heartbeat fresh and goes on to its
// checkpoint. A stopped peer (SIGSTOP) stays the stall's business (system.comm_timeout_s).
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "base/common.h"
#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLIGHT_CAPACITY 256
#define FLIGHT_BEAT_S 0.25
// A rank whose heartbeat is older than this is not live (stopped, dead or its node gone).
#define FLIGHT_STALE_S 2.0
// A group peer on another host is dead when, at a stop request, its heartbeat is older than
// this. A live peer's header reaches the file system every beat (0.25 s) once the job spans
// hosts, so its heartbeat as read there is at most a beat and a write-back old: 1 s leaves
// 0.75 s for a slow write-back, a loaded node and the hosts' clock offset (their clocks are
// compared). A larger bound would not decide before mpirun's SIGKILL (2 s after a death).
#define FLIGHT_REMOTE_DEAD_S 1.0
// How long after a stop request the remote peers are read, every beat: past a dead peer's
// FLIGHT_REMOTE_DEAD_S when a SIGTERM came at once after the death, and short, so that a
// preemption's checkpoint, which may slow the shared file system, is not judged by it.
#define FLIGHT_STOP_SCAN_S 3.0
#define FLIGHT_MAGIC "TRIFLT1"
#define FLIGHT_VERSION 1

// What a rank is doing (records and the header carry it).
typedef enum {
    FLIGHT_ACT_NONE = 0,
    FLIGHT_ACT_FORWARD,
    FLIGHT_ACT_BACKWARD,
    FLIGHT_ACT_P2P,        // the pipeline's sends and receives
    FLIGHT_ACT_GRADS,      // gradient reduction and the optimizer step
    FLIGHT_ACT_EVAL,       // evaluation
    FLIGHT_ACT_CHECKPOINT, // writing or reading a checkpoint
    FLIGHT_ACT_COUNT
} flight_activity;

// The barrier is an operation of the recorder only (the counters have no bytes for it).
#define FLIGHT_OP_BARRIER COMM_OP_COUNT

typedef enum {
    FLIGHT_STATE_RUNNING = 0,
    FLIGHT_STATE_TIMED_OUT, // a collective of this rank exceeded system.comm_timeout_s
    FLIGHT_STATE_EXITED,    // the process ended (exit_code says how)
    FLIGHT_STATE_COUNT
} flight_state;

// One operation: 96 bytes, little-endian as the host writes it.
typedef struct {
    uint64_t index; // 1-based operation number on this rank; 0: an empty slot
    uint64_t seq;   // 1-based, see above
    uint64_t bytes; // the payload, as comm.h counts it
    double t_posted, t_started, t_completed; // CLOCK_REALTIME seconds; 0: not yet
    int32_t step, micro, chunk;
    int32_t peer;     // world rank of the peer of a send or receive; -1
    uint8_t group;    // comm_group_id
    uint8_t op;       // comm_op_id, or FLIGHT_OP_BARRIER
    uint8_t dtype;    // tri_dtype
    uint8_t activity; // flight_activity
    uint32_t bucket;  // 1 + the ZeRO gradient bucket a dp reduction or gather moves
                      // (flight_set_bucket); 0: none
    uint8_t pad[24];
} flight_rec;

#define FLIGHT_MAX_GROUP 64 // members kept in the header per group (larger: the first 64)

// The ring file's header: 2048 bytes.
typedef struct {
    char magic[8]; // FLIGHT_MAGIC
    uint32_t version, header_size, rec_size, capacity;
    int32_t rank, world, pid, state;
    int32_t mesh_tp, mesh_dp, mesh_pp, exit_code;
    char host[64];
    double t_open, heartbeat, t_state;    // t_state: when state was set (a timeout: its moment)
    uint64_t n_ops;                       // operations recorded (the newest record's index)
    uint64_t waiting_first, waiting_n;    // the wait in progress: record indices; 0 none
    int32_t step, micro, chunk, activity; // what the rank does now
    int32_t group_size[COMM_GROUP_COUNT];
    int32_t members[COMM_GROUP_COUNT][FLIGHT_MAX_GROUP]; // world ranks, in group-rank order
    // The liveness link's listener (flight_link.c): a random nonce a connecting peer must
    // quote, the TCP port, and up to 4 IPv4 addresses (network order) to try; port 0: none.
    // links_up: the links made and open now (to and from this rank).
    uint64_t link_nonce;
    uint16_t link_port, n_link_addr;
    uint32_t link_addr[4];
    uint32_t links_up;
    uint8_t pad[2048 - 8 - 16 - 16 - 16 - 64 - 24 - 24 - 16 - 4 * COMM_GROUP_COUNT -
                4 * COMM_GROUP_COUNT * FLIGHT_MAX_GROUP - 32];
} flight_header;

// Opens this rank's ring in <out_dir>/diagnose/ (created), for the comm `c` of mesh m on host
// `host`; starts the watchdog thread and sets c->flight_on. A failure to create the file is a
// warning (the run goes on without a recorder). TRIDENT_FLIGHT_RECORDER=0 turns it off.
void flight_open(const char *out_dir, comm *c, const mesh *m, const char *host);
// Marks the ring EXITED with `code`, stops the watchdog, unmaps the file (kept on disk).
void flight_close(int code);
int flight_enabled(void);

// ---- what the rank does (cheap: stores into the mapping) ----
void flight_set_step(int step);
void flight_set_activity(flight_activity a, int micro, int chunk);
// The ZeRO bucket (zero.h, 0-based) of the operations posted from now on; -1: none. The ZeRO
// layer sets it around each bucket's reduction or gather, so a verdict can name the bucket.
void flight_set_bucket(int bucket);

// ---- comm_dispatch.c's hooks: indices are records' `index` ----
uint64_t flight_post(comm_group_id g, int op, size_t bytes, tri_dtype dt, int peer_group_rank);
void flight_started(uint64_t first, uint64_t n);
void flight_completed(uint64_t first, uint64_t n);
// The wait for records [first, first + n) begins (n 0: it ended).
void flight_waiting(uint64_t first, uint64_t n);
// Sends and receives posted in the open group, not yet started: (first, n).
void flight_p2p_pending(uint64_t *first, uint64_t *n);

// ---- the verdict ----

// A collective of this rank exceeded the timeout after waited_s: marks the ring TIMED_OUT,
// writes <out_dir>/diagnose/rank_XXXXX.json and waits (bounded, a few seconds) until the lowest
// live rank printed the verdict, printing it here when that rank does not. Returns; the caller
// ends the job (exit 5).
void flight_stall(double waited_s);

// Why the rings in `dir` say the job stopped: one paragraph into out (a pure function of the
// files). Returns TRI_OK, TRI_ERR_CKPT naming a corrupt or truncated ring in out, or
// TRI_ERR_CONFIG when dir holds no ring at all.
tri_status flight_verdict(const char *dir, char *out, size_t cap);

// The names the verdict and the dumps use.
const char *flight_op_name(int op);
const char *flight_activity_name(int a);

// Writes one ring (the header and its records, oldest first) as JSON to f; for the dumps and
// the tests.
void flight_write_json(const flight_header *h, const flight_rec *recs, FILE *f);

#ifdef __cplusplus
}
#endif
