// plan_profile.h: measured device profiles for the planner (`trident plan --calibrate` writes
// one, `--device FILE` reads one). A profile is plain YAML (profile_version 1), named by
// device and host (profiles/<device>-<host>.yaml by default), every value a mapping
// {value: X, source: measured | estimate}: what this machine measured, and what it could not
// (the link between nodes, the datasheet peaks) kept from the built-in table, marked as such.
// README "Planning a run" describes the fields.
#pragma once
#include "base/common.h"
#include "config/config.h"
#include "plan/plan.h"

#define PLAN_PROFILE_VERSION 1
#define PLAN_PROFILE_MAX_POINTS 32

// One measured matmul: (m, n, k) = rows, output columns, inner dimension; fwd + bwd FLOP/s.
typedef struct {
    int m, n, k;
    tri_dtype dtype;
    double rate;
} plan_matmul_point;

// What --calibrate measured, before it becomes a file.
typedef struct {
    plan_device dev; // the device it refines, with the measured fields set
    plan_matmul_point points[PLAN_PROFILE_MAX_POINTS];
    int n_points;
    double matmul_rate; // R of rate(s) = R s / (s + gemm_half), fp32 operands
    const char *config; // the config whose shapes were measured
    double seconds;     // how long the measurement took
} plan_profile;

// 1 when --device `arg` names a profile file rather than a built-in device: it ends in .yaml
// or .yml, or it is no built-in name and a file by that name exists.
int plan_profile_is_file(const char *arg);

// Loads the profile `path` into *dev for a world of `world` ranks (the built-in entry its
// `device` names, with the profile's values over it). Every error (unreadable, not YAML, a
// key missing, unknown or out of range, another profile_version) is reported naming the file
// and the key: TRI_ERR_CONFIG. `what` names where the path came from in the message when the
// file cannot be opened ("--device", "system.device_profile").
tri_status plan_profile_load(const char *path, const char *what, int world, plan_device *dev);

// The profile the config's system.device_profile names, loaded as plan_profile_load loads
// one; on an error, a hint naming the config file (cfg->source_path). For train (every rank,
// before the communicators), check and plan (when no --device is given).
tri_status plan_profile_of_config(const run_config *cfg, int world, plan_device *dev);
// How this process's idle OpenMP threads wait, as a profile records it (omp_wait).
void plan_omp_wait(char *out, size_t n);
// Whether calibrated profile dev was measured with another omp_wait than this process's
// (into now); 0 for a built-in table or a profile that does not say.
int plan_omp_wait_differs(const plan_device *dev, char *now, size_t n);

// Writes `pr` to `path` (its directory created when missing; written to a temporary file,
// then renamed). TRI_ERR_CKPT (an output file) when it cannot be written.
tri_status plan_profile_write(const plan_profile *pr, const char *path);

// profiles/<device>-<host>.yaml, the host as gethostname says (characters outside
// [A-Za-z0-9._-] become '_').
void plan_profile_default_path(const char *device, char *out, size_t n);

// `trident plan CONFIG --calibrate [--out FILE]`: measures this machine at the shapes of
// `cfg` (resolved for its own layout) through the compute backend system.backend picks,
// with the threads the trainer would give one rank, and writes the profile (to `out`, or the
// default path); says where. Bounded: about 20 s for configs/bench-m.yaml on 2 cores.
// Launched on N >= 2 ranks (mpirun, srun) every rank measures, rank 0 writes, and the
// communication within this host is timed too (plan_calibrate_comm).
tri_status plan_calibrate(const run_config *cfg, const char *out);

// ---- communication (plan_calibrate_comm.c) ----

#define PLAN_COMM_OPS 4   // all_reduce, reduce_scatter, all_gather, send (recv: send's)
#define PLAN_COMM_SIZES 5 // message sizes timed per op
// The message sizes (bytes, ascending, distinct) a step of cfg sends; returns how many.
int plan_comm_sizes(const run_config *cfg, size_t out[PLAN_COMM_SIZES]);
// Times the ops on comm `c` (every rank of the world in its tp group: a mesh of tp = world,
// world >= 2; every rank calls it) and sets d's comm_lat, comm_bw, intra_bw and
// latency_intra as measured, calib.ranks to world.
tri_status plan_calibrate_comm(const run_config *cfg, comm *c, backend *be, int rank, int world,
                               plan_device *d);
