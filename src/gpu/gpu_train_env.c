/* gpu_train_env.c — the measurement switches of the environment (issue 25, docs/cuda.md)
 * for the CUDA trainer (gpu_train_int.h): TSR_GEMM_REDUCTION, TSR_ATT_WARP_ROWS, TSR_ATT_DQ_FUSED,
 * TSR_NORM_HOLD, TSR_XENT_RESIDENT, TSR_DECODE_GEMM, TSR_ATTENTION, TSR_ATT_WGMMA (checked against
 * the device) and TSR_GEMM_TUNE (its file read at start, written at the end); every rank must
 * agree on each. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_train_int.h"
#include "model/decoder.h"
#include "tcu_cudnn.h"

/* A measurement switch of the environment (docs/cuda.md, issue 25) that every rank must agree
 * on: its value, one of names[0..n) (unset or empty: names[0], the default), into *choice; rank 0
 * says so, with notes[i], when it is not the default. Every rank reads its own environment (a job
 * script can set it per node), so the ranks agree before any of them stops: one rank refusing
 * alone would leave the others waiting in their next collective, and two values would make the
 * ranks' kernels differ. `expected` lists the values for the error message. */
static int env_switch(const tsr_dist *d, const char *name, const char *const *names,
                      const char *const *notes, int n, const char *expected, int *choice) {
    const int not_one = n; /* a value that is none of names[] */
    const char *v = getenv(name);
    int mine = 0;
    if (v && *v) {
        mine = not_one;
        for (int i = 0; i < n; i++)
            if (strcmp(v, names[i]) == 0) mine = i;
    }
    int zero = mine, first = INT_MAX;
    dist_bcast(&zero, sizeof zero, 0);
    if (mine == not_one || mine != zero) first = d->rank;
    dist_allreduce_min_int(&first, 1);
    if (first == INT_MAX) {
        *choice = mine;
        if (mine && d->rank == 0)
            tsr_warn("environment %s = \"%s\": %s (docs/cuda.md)", name, v, notes[mine]);
        return 0;
    }
    int theirs = mine;
    dist_bcast(&theirs, sizeof theirs, first);
    if (d->rank != 0) return TSR_EXIT_USAGE;
    if (zero == not_one)
        tsr_error("environment %s = \"%s\": expected %s (docs/cuda.md)", name, v, expected);
    else
        tsr_error("environment %s: rank %d has %s%s%s, rank 0 \"%s\"%s: expected %s, the same on "
                  "every rank (docs/cuda.md)",
                  name, first, theirs == not_one ? "another value" : "\"",
                  theirs == not_one ? "" : names[theirs], theirs == not_one ? "" : "\"",
                  names[zero], v && *v ? "" : " (unset)", expected);
    return TSR_EXIT_USAGE;
}

/* TSR_GEMM_REDUCTION (issue 25 item 4): the split-K schemes the matmul heuristic may pick */
static int gemm_reduction(const tsr_dist *d, tcu_reduction *r) {
    static const char *const names[] = {"compute", "none", "any"};
    static const char *const notes[] = {
        "", "no split-K GEMMs",
        "cuBLASLt's own split-K reductions, partial sums possibly added in bf16: for measuring, "
        "not for training"};
    int choice;
    TSR_CHECK(env_switch(d, "TSR_GEMM_REDUCTION", names, notes, 3,
                         "compute (the default), none or any", &choice));
    *r = (tcu_reduction)choice;
    return 0;
}

/* an on/off measurement switch (issue 25): "0" (the default, unset or empty) or "1", whose
 * meaning `note` gives */
static int env_flag(const tsr_dist *d, const char *name, const char *note, int *on) {
    const char *const names[] = {"0", "1"}, *const notes[] = {"", note};
    return env_switch(d, name, names, notes, 2, "0 (the default) or 1", on);
}

/* TSR_ATT_WARP_ROWS (issue 25 item 2): the rows each warp of the attention kernels owns */
static int att_warp_rows(const tsr_dist *d, int *rows) {
    static const char *const names[] = {"16", "32"};
    static const char *const notes[] = {
        "", "32 rows a warp in the attention kernels where the head size is 64 or less (not the "
            "16-row default's bits)"};
    int choice;
    TSR_CHECK(env_switch(d, "TSR_ATT_WARP_ROWS", names, notes, 2, "16 (the default) or 32",
                         &choice));
    *rows = choice ? 32 : 16;
    return 0;
}

/* TSR_ATTENTION (issue 66 item 1): the attention's backend, tcu_cudnn.h's tcu_att_backend (its
 * names table). Read here with the other switches, so that every rank agrees and a bad value
 * stops the start (the library's own reader, for the op test and the bench, exits instead). */
static int attention_backend(const tsr_dist *d, tcu_att_backend *b) {
    static const char *const notes[TCU_ATT_COUNT] = {
        "", "cuDNN's fused attention for every shape it takes (causal, no document mask, no ALiBi "
            "or variants, head size 32, 64 or 128), the own kernels for the rest, said once: not "
            "yet run on a GPU",
        "cuDNN's fused attention on an sm_90 GPU for every shape it takes, the own kernels for "
        "the rest: not yet run on a GPU"};
    int choice;
    TSR_CHECK(env_switch(d, "TSR_ATTENTION", tcu_att_backend_names, notes, TCU_ATT_COUNT,
                         "own (the default), cudnn or auto", &choice));
    *b = (tcu_att_backend)choice;
    return 0;
}

/* TSR_NORM_HOLD (issue 25): the norms whose backward keeps each row in registers, a
 * tcu_norm_set_hold mask. Unset (or "layernorm"): LayerNorm's up to C = 768, the default since
 * the H200 timed it (docs/cuda.md); 0: none; 1: both, at every C the kernel reaches (the rest
 * not yet timed) */
static int norm_hold_switch(const tsr_dist *d, int *mask) {
    static const char *const names[] = {"layernorm", "0", "1"};
    static const char *const notes[] = {
        "", "the LayerNorm and RMSNorm backwards read each row twice (the same bits)",
        "the LayerNorm and RMSNorm backwards keep each row in registers up to C = 1024 (the "
        "same bits; only LayerNorm's up to C = 768 is timed, and the default)"};
    static const int masks[] = {TCU_NORM_HOLD_DEFAULT, 0, TCU_NORM_HOLD_ALL};
    int choice;
    TSR_CHECK(env_switch(d, "TSR_NORM_HOLD", names, notes, 3,
                         "layernorm (the default: LayerNorm's backward holds its rows up to C = "
                         "768), 0 (neither) or 1 (LayerNorm's and RMSNorm's up to C = 1024)",
                         &choice));
    *mask = masks[choice];
    return 0;
}

/* TSR_GEMM_TUNE (issue 25 item 4): the file of GEMM choices (tcu_matmul_tune_open), or "" when
 * unset or empty (the heuristic's first answers). Every rank must name the same file. Only a
 * run on one rank times (and writes the file): on several, each rank would choose for itself. */
static char gemm_tune[4096];
static int gemm_tune_opened; /* gtrain_gemm_tune_open read the file: gtrain_gemm_tune_close reports */

/* whether every rank has the value v (its two halves and their negatives through one max:
 * exact in doubles). Collective. */
static int ranks_agree(uint64_t v) {
    const double hi = (double)(v >> 32), lo = (double)(v & 0xffffffffu);
    double m[4] = {hi, lo, -hi, -lo};
    dist_allreduce_max_f64(m, 4);
    return m[0] == -m[2] && m[1] == -m[3];
}

static int gemm_tune_switch(const tsr_dist *d) {
    const char *v = getenv("TSR_GEMM_TUNE");
    int too_long = v && strlen(v) >= sizeof gemm_tune;
    snprintf(gemm_tune, sizeof gemm_tune, "%s", v && !too_long ? v : "");
    double any_too_long = too_long;
    dist_allreduce_max_f64(&any_too_long, 1);
    /* the value's checksum, or one no checksum has for a value too long */
    const uint64_t mine = too_long ? UINT64_MAX : tsr_crc32c(0, gemm_tune, strlen(gemm_tune));
    if (!ranks_agree(mine) || any_too_long > 0) {
        if (d->rank == 0 && any_too_long > 0)
            tsr_error("environment TSR_GEMM_TUNE: a path of %zu bytes or more on some rank: "
                      "expected a file name (docs/cuda.md)", sizeof gemm_tune);
        else if (d->rank == 0)
            tsr_error("environment TSR_GEMM_TUNE: the ranks name different files (rank 0 "
                      "\"%s\"): expected the same value on every rank, one file on a shared file "
                      "system (docs/cuda.md)", gemm_tune);
        return TSR_EXIT_USAGE;
    }
    if (gemm_tune[0] && d->rank == 0 && d->world == 1)
        tsr_warn("environment TSR_GEMM_TUNE = \"%s\": each GEMM shape runs the file's algorithm, "
                 "or the fastest of cuBLASLt's first 8 answers, timed on its first call and "
                 "written to the file at the end; a run whose shapes are all in the file repeats "
                 "its bits (the file is read when the device opens; docs/cuda.md)", gemm_tune);
    else if (gemm_tune[0] && d->rank == 0)
        tsr_warn("environment TSR_GEMM_TUNE = \"%s\": each GEMM shape runs the file's algorithm, "
                 "else cuBLASLt's first answer; %d ranks time nothing (each would choose for "
                 "itself): tune with one rank first (the file is read when the device opens; "
                 "docs/cuda.md)", gemm_tune, d->world);
    return 0;
}

/* After tcu_init, before the first matmul: every rank reads the file of GEMM choices (one rank:
 * and checks it can write it); the first rank that cannot is named by rank 0 with its reason,
 * and the ranks must have read the same table (its hash). Collective. */
int gtrain_gemm_tune_open(const tsr_dist *d) {
    if (!gemm_tune[0]) return 0;
    char err[1024] = "";
    int bad = tcu_matmul_tune_open(gemm_tune, d->world == 1, err, sizeof err) ? d->rank : INT_MAX;
    dist_allreduce_min_int(&bad, 1);
    if (bad != INT_MAX) {
        dist_bcast(err, sizeof err, bad);
        if (d->rank == 0)
            tsr_error("environment TSR_GEMM_TUNE: rank %d: %s (docs/cuda.md)", bad, err);
        return TSR_EXIT_USAGE;
    }
    tcu_tune_stats st;
    tcu_matmul_tune_stats(&st);
    if (!ranks_agree(tcu_matmul_tune_hash())) {
        if (d->rank == 0)
            tsr_error("environment TSR_GEMM_TUNE = \"%s\": the ranks read different files (rank "
                      "0: %d entries): expected one file on a shared file system (docs/cuda.md)",
                      gemm_tune, st.loaded);
        return TSR_EXIT_USAGE;
    }
    gemm_tune_opened = 1;
    if (d->rank == 0)
        printf("TSR_GEMM_TUNE: %d GEMM choice(s) read from %s\n", st.loaded, gemm_tune);
    return 0;
}

/* At the end, before tcu_shutdown: rank 0 writes the choices timed in this run into the file
 * and says what tuning did; a file that cannot be written is a warning (the run's own outputs
 * are complete). */
void gtrain_gemm_tune_close(const tsr_dist *d) {
    if (!gemm_tune_opened) return;
    gemm_tune_opened = 0;
    if (d->rank != 0) return;
    tcu_tune_stats st;
    tcu_matmul_tune_stats(&st);
    char err[1024] = "", wrote[64];
    int w = tcu_matmul_tune_save(gemm_tune, err, sizeof err);
    snprintf(wrote, sizeof wrote, "%d new choice(s) written to the file", st.added);
    printf("TSR_GEMM_TUNE: %d shape(s) from the file (%d by configuration), %d timed (%.1f us "
           "faster than cuBLASLt's first answers over one call of each), %d with one answer; "
           "%d not matched by the heuristic's answers, %d untimed, %d not in the file; calls "
           "past the algorithm cache: %lld not in the file, %lld not matched; %s\n",
           st.from_file, st.by_config, st.timed, st.saved_us, st.single, st.unmatched,
           st.untimed, st.missing, st.overflow_missing, st.overflow_unmatched,
           w == 1 ? wrote : w == 0 ? "the file unchanged" : "the file NOT written");
    if (w < 0) tsr_warn("TSR_GEMM_TUNE: %s", err);
    if (st.unmatched || st.overflow_unmatched)
        tsr_warn("TSR_GEMM_TUNE = \"%s\": %d shape(s) (and %lld calls past the algorithm cache) "
                 "ran cuBLASLt's first answer because the file's algorithm was not among its "
                 "answers (another split-K rule, workspace or cuBLASLt build?): not the bits of "
                 "the run that made the file", gemm_tune, st.unmatched, st.overflow_unmatched);
    if (st.missing)
        tsr_warn("TSR_GEMM_TUNE = \"%s\": %d shape(s) not in the file ran cuBLASLt's first "
                 "answer, untimed (%d ranks time nothing): tune with one rank first", gemm_tune,
                 st.missing, d->world);
    if (st.overflow_missing)
        tsr_warn("TSR_GEMM_TUNE = \"%s\": %lld call(s) of shapes past the algorithm cache (128 "
                 "shapes) ran cuBLASLt's first answer, untimed (never timed: it would be, every "
                 "call)", gemm_tune, st.overflow_missing);
    fflush(stdout);
}

/* TSR_ATTENTION's choice for this model: the own kernels for a model cuDNN's graphs refuse, so
 * the sizing counts no cuDNN workspace for a model whose every attention call runs on the own
 * kernels; said at start (docs/cuda.md "cuDNN attention") */
static void cudnn_model(const gpu_train_ctx *c, tcu_att_backend attention) {
    const tsr_model *m = c->model;
    const char *why;
    tcu_cudnn_set_backend(tcu_cudnn_model_backend(attention, m->cfg.attn_mask == TSR_MASK_DOCUMENT,
                                                  m->cfg.pos == TSR_POS_ALIBI,
                                                  dec_attn_has_variants(m), &why));
    if (attention != TCU_ATT_OWN && why && c->dist->rank == 0)
        tsr_warn("environment TSR_ATTENTION = \"%s\": this model's attention runs on the own "
                 "kernels: %s (docs/cuda.md \"cuDNN attention\")",
                 attention == TCU_ATT_CUDNN ? "cudnn" : "auto", why);
}

/* The measurement switches of the environment (issue 25, docs/cuda.md), read and set before the
 * device memory plan is sized (the attention's scratch depends on TSR_ATT_WARP_ROWS and
 * TSR_ATT_DQ_FUSED) and before anything runs; no device is touched, so --plan reads them too.
 * Collective. */
static int att_wgmma_asked; /* TSR_ATT_WGMMA=1: checked against the device by gtrain_check_wgmma */

int gtrain_switches(const gpu_train_ctx *c) {
    tcu_reduction reduction;
    int att_rows, resident, dq_fused, hold, wgmma, decode_gemm;
    tcu_att_backend attention;
    TSR_CHECK(gemm_reduction(c->dist, &reduction));
    TSR_CHECK(att_warp_rows(c->dist, &att_rows));
    TSR_CHECK(env_flag(c->dist, "TSR_ATT_DQ_FUSED",
                       "the attention backward adds dq in its dk/dv kernel, in a fixed order (the "
                       "same bits with 16 rows a warp and no document mask); its fp32 sums, "
                       "micro_batch x n_head x seq_len x head_dim x 4 bytes, are in the device "
                       "plan's activations",
                       &dq_fused));
    TSR_CHECK(norm_hold_switch(c->dist, &hold));
    TSR_CHECK(env_flag(c->dist, "TSR_XENT_RESIDENT",
                       "softmax + cross-entropy keeps each row in registers where Vp <= 57344 "
                       "(the same bits)",
                       &resident));
    TSR_CHECK(env_flag(c->dist, "TSR_ATT_WGMMA",
                       "the attention forward and backward on Hopper's wgmma where the head size "
                       "is 64 or 128 (a GPU of compute capability 9.0: refused elsewhere; not the "
                       "default's bits; the fused dq stays on mma.sync)",
                       &wgmma));
    TSR_CHECK(env_flag(c->dist, "TSR_DECODE_GEMM",
                       "batched decoding's linear layers (GRPO's rollouts) at 8 rows or more, a "
                       "multiple of 8, through cuBLASLt's GEMM on the tensor cores: a row's bits "
                       "then depend on the rows decoded beside it (not batch-invariant)",
                       &decode_gemm));
    TSR_CHECK(attention_backend(c->dist, &attention));
    TSR_CHECK(gemm_tune_switch(c->dist));
    /* the wgmma kernels have 16 rows a warp and no fused dq: with either switch the run would mix
     * kernels unsaid (every rank reads the same environment: each refuses alike) */
    if (wgmma && (att_rows == 32 || dq_fused)) {
        if (c->dist->rank == 0)
            tsr_error("environment TSR_ATT_WGMMA = \"1\" with %s: the wgmma attention kernels "
                      "have 16 rows a warp and no fused dq; measure the switches one at a time",
                      att_rows == 32 ? "TSR_ATT_WARP_ROWS = \"32\""
                                     : "TSR_ATT_DQ_FUSED = \"1\"");
        return TSR_EXIT_USAGE;
    }
    att_wgmma_asked = wgmma;
    tcu_attention_set_wgmma(wgmma);
    tcu_matmul_set_reduction(reduction);
    tcu_attention_set_warp_rows(att_rows);
    tcu_attention_set_dq_fused(dq_fused);
    tcu_norm_set_hold(hold);
    tcu_softmax_xent_set_resident(resident);
    gpu_backend_set_decode_gemm(decode_gemm);
    cudnn_model(c, attention);
    return 0;
}

/* TSR_ATT_WGMMA=1 where the wgmma attention kernels cannot run (another GPU than compute
 * capability 9.0, a head size other than 64 or 128) is refused, not run on the mma.sync kernel: a
 * measurement of the switch would time the other kernel unawares. Collective (the lowest such
 * rank named). */
int gtrain_check_wgmma(const gpu_train_ctx *c) {
    const tsr_dist *d = c->dist;
    const int hs = c->model->hs;
    double first = att_wgmma_asked && !tcu_attention_wgmma_possible(hs) ? d->world - d->rank : 0;
    dist_allreduce_max_f64(&first, 1);
    if (first <= 0) return 0;
    if (d->rank == 0) {
        int sm = 0;
        char name[128] = "";
        tcu_device_info(name, sizeof name, &sm, NULL, NULL);
        tsr_error("environment TSR_ATT_WGMMA = \"1\": the wgmma attention kernels need a GPU of "
                  "compute capability 9.0 (H100, H200), a build with sm_90a code (NVCC_GENCODE) "
                  "and head size 64 or 128; rank %d cannot run them (rank 0: %s, sm %d.%d; head "
                  "size %d): unset it, or 0",
                  d->world - (int)first, name[0] ? name : "?", sm / 10, sm % 10, hs);
    }
    return TSR_EXIT_USAGE;
}
