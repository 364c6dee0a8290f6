// plan_device.c: the planner's device table. Datasheet numbers (NVIDIA H100 and H200 SXM,
// A100 80GB SXM: dense tensor-core bf16 and TF32 (half the sparse figures the datasheets
// lead with), fp32 without TF32, HBM size and bandwidth, NVLink
// per GPU in one direction, one 400 Gb/s (H100, H200) or 200 Gb/s (A100) InfiniBand NIC per
// GPU) and, for the CPU, nominal figures of one x86-64-v3 core with this machine's memory.
// The efficiencies, reserves and latencies are the planner's assumptions; `trident plan`
// prints every one of them.
#include "plan/plan.h"

#include <string.h>
#include <strings.h>
#include <unistd.h>

static const plan_device DEVICES[] = {
    {
        /* .name          = */ "h100",
        /* .description   = */ "NVIDIA H100 80GB SXM",
        /* .peak_bf16     = */ 989e12,
        /* .peak_fp32     = */ 67e12,
        /* .peak_tf32     = */ 494.5e12,
        /* .mem_bytes     = */ 80e9,
        /* .reserve_bytes = */ 3e9,
        /* .mem_bw        = */ 3.35e12,
        /* .intra_bw      = */ 450e9,
        /* .inter_bw      = */ 50e9,
        /* .per_node      = */ 8,
        /* .latency_intra = */ 10e-6,
        /* .latency_inter = */ 20e-6,
        /* .efficiency    = */ 0.6,
        /* .gemm_half     = */ 128,
        /* .attn          = */ ATTN_STATE_LSE,
        /* .cuda          = */ 1,
        /* .driver_name   = */ "NVIDIA H100 80GB HBM3",
        /* .bf16_out      = */ 1,
        /* .fbw           = */ {1.0, 1.0, 1.0},
        /* .fbw_measured  = */ 0,
        /* .attn_rate .. .calib: a profile's (plan_profile.h) */ 0,
        0,
        0,
        {0},
        /* .comm_lat, .comm_bw: a profile's */ {0},
        {0},
    },
    {
        /* .name          = */ "h200",
        /* .description   = */ "NVIDIA H200 141GB SXM",
        /* .peak_bf16     = */ 989e12,
        /* .peak_fp32     = */ 67e12,
        /* .peak_tf32     = */ 494.5e12,
        /* .mem_bytes     = */ 141e9,
        /* .reserve_bytes = */ 3e9,
        /* .mem_bw        = */ 4.8e12,
        /* .intra_bw      = */ 450e9,
        /* .inter_bw      = */ 50e9,
        /* .per_node      = */ 8,
        /* .latency_intra = */ 10e-6,
        /* .latency_inter = */ 20e-6,
        /* .efficiency    = */ 0.6,
        /* .gemm_half     = */ 128,
        /* .attn          = */ ATTN_STATE_LSE,
        /* .cuda          = */ 1,
        /* .driver_name   = */ "NVIDIA H200",
        /* .bf16_out      = */ 1,
        /* .fbw           = */ {1.0, 1.0, 1.0},
        /* .fbw_measured  = */ 0,
        /* .attn_rate .. .calib: a profile's (plan_profile.h) */ 0,
        0,
        0,
        {0},
        /* .comm_lat, .comm_bw: a profile's */ {0},
        {0},
    },
    {
        /* .name          = */ "a100",
        /* .description   = */ "NVIDIA A100 80GB SXM",
        /* .peak_bf16     = */ 312e12,
        /* .peak_fp32     = */ 19.5e12,
        /* .peak_tf32     = */ 156e12,
        /* .mem_bytes     = */ 80e9,
        /* .reserve_bytes = */ 3e9,
        /* .mem_bw        = */ 2.039e12,
        /* .intra_bw      = */ 300e9,
        /* .inter_bw      = */ 25e9,
        /* .per_node      = */ 8,
        /* .latency_intra = */ 10e-6,
        /* .latency_inter = */ 20e-6,
        /* .efficiency    = */ 0.6,
        /* .gemm_half     = */ 128,
        /* .attn          = */ ATTN_STATE_LSE,
        /* .cuda          = */ 1,
        /* .driver_name   = */ "NVIDIA A100-SXM4-80GB",
        /* .bf16_out      = */ 1,
        /* .fbw           = */ {1.0, 1.0, 1.0},
        /* .fbw_measured  = */ 0,
        /* .attn_rate .. .calib: a profile's (plan_profile.h) */ 0,
        0,
        0,
        {0},
        /* .comm_lat, .comm_bw: a profile's */ {0},
        {0},
    },
    {
        // One rank per core: 3 GHz x 2 AVX2 FMA units x 8 fp32 lanes x 2 FLOPs; bf16 is
        // stored, not computed, so it runs at the fp32 rate. Memory, cores: this machine.
        /* .name          = */ "cpu",
        /* .description   = */ "CPU core (x86-64-v3, one rank per core)",
        /* .peak_bf16     = */ 96e9,
        /* .peak_fp32     = */ 96e9,
        /* .peak_tf32     = */ 96e9,
        /* .mem_bytes     = */ 0,
        /* .reserve_bytes = */ 0.2e9,
        /* .mem_bw        = */ 10e9,
        /* .intra_bw      = */ 5e9,
        /* .inter_bw      = */ 1.25e9,
        /* .per_node      = */ 0,
        /* .latency_intra = */ 5e-6,
        /* .latency_inter = */ 20e-6,
        /* .efficiency    = */ 0.6,
        /* .gemm_half     = */ 16,
        /* .attn          = */ ATTN_STATE_PROBS,
        /* .cuda          = */ 0,
        /* .driver_name   = */ NULL,
        /* .bf16_out      = */ 0,
        // F:B:W measured by scripts/bench-pipeline.sh (configs/bench-pipe.yaml, zb-h1, one
        // rank per core, pass_ms 23.05 : 24.72 : 19.36 ms): the CPU's attention backward
        // makes B a little heavier than F, and W's GEMMs lighter.
        /* .fbw           = */ {1.0, 1.07, 0.84},
        /* .fbw_measured  = */ 1,
        /* .attn_rate .. .calib: a profile's (plan_profile.h) */ 0,
        0,
        0,
        {0},
        /* .comm_lat, .comm_bw: a profile's */ {0},
        {0},
    },
};
#define N_DEVICES (sizeof DEVICES / sizeof DEVICES[0])

int plan_device_lookup(const char *name, int world, plan_device *dev) {
    for (size_t i = 0; i < N_DEVICES; i++) {
        if (strcasecmp(name, DEVICES[i].name)) continue;
        *dev = DEVICES[i];
        if (!strcmp(dev->name, "cpu")) {
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
            dev->per_node = cores > 0 ? (int)cores : 1;
            int ranks_here = world < dev->per_node ? world : dev->per_node;
            dev->mem_bytes = ram / (ranks_here > 0 ? ranks_here : 1);
        }
        return 0;
    }
    return -1;
}

int plan_device_for_gpu(const char *driver_name, plan_device *dev) {
    if (!driver_name) return -1;
    for (size_t i = 0; i < N_DEVICES; i++) {
        const char *want = DEVICES[i].driver_name;
        // "NVIDIA H200" names the SXM part; "NVIDIA H200 NVL" is another (its peaks differ).
        if (!want || strncasecmp(driver_name, want, strlen(want)) != 0) continue;
        const char *rest = driver_name + strlen(want);
        if (*rest && (strcasestr(rest, "NVL") || strcasestr(rest, "PCIe"))) continue;
        *dev = DEVICES[i];
        return 0;
    }
    return -1;
}

double plan_device_peak(const plan_device *dev, precision_kind p, const char **what) {
    if (what) *what = p == PRECISION_BF16 ? "bf16" : p == PRECISION_TF32 ? "tf32" : "fp32";
    return p == PRECISION_BF16   ? dev->peak_bf16
           : p == PRECISION_TF32 ? dev->peak_tf32
                                 : dev->peak_fp32;
}

const char *plan_device_default(const run_config *cfg) {
    return cfg->system.backend == BACKEND_CUDA ? "h100" : "cpu";
}

const char *plan_device_names(void) { return "h100, h200, a100, cpu"; }
