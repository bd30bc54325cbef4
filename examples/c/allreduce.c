/* The FP8 gradient allreduce of libgift from C, one process per rank.
 *
 * Build against an installed libgift (cmake --install build --prefix P):
 *
 *   export PKG_CONFIG_PATH=P/lib/pkgconfig
 *   cc -std=c11 -Wall -Werror examples/c/allreduce.c \
 *      $(pkg-config --cflags --libs gift) -Wl,-rpath,P/lib -o allreduce
 *
 * Run 2 ranks on this host; they meet through a store directory that must
 * be empty (fresh) at the start of the job:
 *
 *   store=$(mktemp -d)
 *   ./allreduce 0 2 "$store" & ./allreduce 1 2 "$store" & wait
 *
 * Each rank builds the same bucket plan (a 64 x 96 weight gradient, a gap,
 * a bias of 64), makes a gradient of its own and averages it with the other
 * ranks' in FP8 (75% fewer bytes than FP32), three steps in a row. It then
 * checks what libgift promises: the result is within FP8 error of the
 * exact average (computed here from every rank's gradient), it is not the
 * exact average (it was quantized), it is bit-identical on every rank
 * (rank 0's result is broadcast and compared), the gap is untouched, and
 * the FP8 payload is about a quarter of FP32's. It prints one line per step
 * and exits 0 on success, 1 otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gift/c_api.h"

enum {
  kRows = 64,
  kCols = 96,
  kGap = 16,
  kFcOffset = 0,
  kBiasOffset = kRows * kCols + kGap,
  kBucket = kBiasOffset + kRows,
  kSteps = 3
};

/* Rank `rank`'s gradient at `step`: deterministic values in [-1, 1), every
 * 97th one larger (an outlier sets the FP8 scale). */
static void make_gradient(int rank, int step, float* g) {
  uint32_t x = 2654435761u * (uint32_t)(step + 1) + 40503u * (uint32_t)rank;
  for (int i = 0; i < kBucket; ++i) {
    x = x * 1664525u + 1013904223u;
    g[i] = 2.0f * (float)(x >> 8) / 16777216.0f - 1.0f;
    if (i % 97 == 5) g[i] *= 8.0f;
  }
}

/* sqrt by Newton's method (x >= 0), so that the example needs no libm. */
static double root(double x) {
  if (x <= 0) return 0;
  double r = x > 1 ? x : 1;
  for (int i = 0; i < 64; ++i) r = 0.5 * (r + x / r);
  return r;
}

/* Prints the last error and returns 1 when `s` is not GIFT_OK. */
static int failed(gift_status_t s, const char* what, int rank) {
  if (s == GIFT_OK) return 0;
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what,
          gift_status_name(s), gift_last_error_message());
  return 1;
}

/* sum (got - want)^2 and sum want^2 over [begin, end). */
static void error_sums(const float* got, const float* want, int begin, int end,
                       double* err_sq, double* want_sq) {
  *err_sq = 0;
  *want_sq = 0;
  for (int i = begin; i < end; ++i) {
    const double d = (double)got[i] - (double)want[i];
    *err_sq += d * d;
    *want_sq += (double)want[i] * (double)want[i];
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK WORLD_SIZE STORE_DIR\n", argv[0]);
    return 2;
  }
  const int rank = atoi(argv[1]);
  const int world = atoi(argv[2]);
  const char* store_dir = argv[3];
  int bad = 0;

  /* The communicator: Gloo over TCP on this host. */
  gift_communicator_options_t* co = gift_communicator_options_create();
  if (co == NULL) return 1;
  bad |= failed(gift_communicator_options_set_rank(co, rank), "set_rank", rank);
  bad |= failed(gift_communicator_options_set_world_size(co, world),
                "set_world_size", rank);
  bad |= failed(gift_communicator_options_set_store_dir(co, store_dir),
                "set_store_dir", rank);
  bad |= failed(gift_communicator_options_set_hostname(co, "127.0.0.1"),
                "set_hostname", rank);
  bad |= failed(gift_communicator_options_set_timeout_seconds(co, 60),
                "set_timeout_seconds", rank);
  gift_communicator_t* comm = NULL;
  if (!bad) {
    bad |= failed(gift_communicator_create(co, &comm), "communicator", rank);
  }
  gift_communicator_options_destroy(co);
  if (bad) return 1;

  /* The bucket plan: the same on every rank. */
  gift_plan_builder_t* builder = gift_plan_builder_create();
  const int64_t fc_shape[2] = {kRows, kCols};
  const int64_t bias_shape[1] = {kRows};
  bad |= failed(
      gift_plan_builder_add_layer(builder, "fc.weight", fc_shape, 2, kFcOffset),
      "add_layer fc.weight", rank);
  bad |= failed(gift_plan_builder_add_layer(builder, "fc.bias", bias_shape, 1,
                                            kBiasOffset),
                "add_layer fc.bias", rank);
  gift_plan_t* plan = NULL;
  if (!bad) {
    bad |= failed(gift_plan_create(builder, 0, kBucket, &plan), "plan", rank);
  }
  gift_plan_builder_destroy(builder);

  /* The allreduce: FP8 is the default mode (NULL options). */
  gift_allreduce_t* ar = NULL;
  if (!bad) {
    bad |=
        failed(gift_allreduce_create(comm, plan, NULL, &ar), "allreduce", rank);
  }

  float* grad = malloc(kBucket * sizeof(float));
  float* mine = malloc(kBucket * sizeof(float));
  float* exact = malloc(kBucket * sizeof(float));
  float* other = malloc(kBucket * sizeof(float));
  float* rank0 = malloc(kBucket * sizeof(float));
  if (grad == NULL || mine == NULL || exact == NULL || other == NULL ||
      rank0 == NULL) {
    bad = 1;
  }

  for (int step = 0; step < kSteps && !bad; ++step) {
    /* The exact average of every rank's gradient. */
    memset(exact, 0, kBucket * sizeof(float));
    for (int r = 0; r < world; ++r) {
      make_gradient(r, step, other);
      for (int i = 0; i < kBucket; ++i) exact[i] += other[i] / (float)world;
    }
    make_gradient(rank, step, grad);
    memcpy(mine, grad, kBucket * sizeof(float));

    if (failed(gift_allreduce_step(ar, grad, kBucket), "step", rank)) {
      bad = 1;
      break;
    }

    /* Within FP8 error of the exact average, and quantized. */
    const int begins[2] = {kFcOffset, kBiasOffset};
    const int ends[2] = {kFcOffset + kRows * kCols, kBiasOffset + kRows};
    double worst = 0;
    for (int l = 0; l < 2; ++l) {
      double err_sq, want_sq;
      error_sums(grad, exact, begins[l], ends[l], &err_sq, &want_sq);
      const double rel = root(err_sq / want_sq);
      /* FP8 E4M3 with one scale per layer, quantized twice (by the sender
       * and by the owner of the chunk): a RelL2 of a few percent. */
      if (!(rel < 0.06) || !(rel > 1e-4)) {
        fprintf(stderr, "rank %d step %d: layer %d RelL2 %g out of range\n",
                rank, step, l, rel);
        bad = 1;
      }
      if (rel > worst) worst = rel;
    }
    /* The gap is neither sent nor written. */
    if (memcmp(grad + kRows * kCols, mine + kRows * kCols,
               kGap * sizeof(float)) != 0) {
      fprintf(stderr, "rank %d step %d: the gap was written\n", rank, step);
      bad = 1;
    }
    /* Bit-identical on every rank: compare with rank 0's result. */
    memcpy(rank0, grad, kBucket * sizeof(float));
    if (failed(gift_communicator_broadcast(comm, rank0, kBucket * sizeof(float),
                                           0),
               "broadcast", rank)) {
      bad = 1;
      break;
    }
    if (memcmp(rank0, grad, kRows * kCols * sizeof(float)) != 0 ||
        memcmp(rank0 + kBiasOffset, grad + kBiasOffset,
               kRows * sizeof(float)) != 0) {
      fprintf(stderr, "rank %d step %d: result differs from rank 0's\n", rank,
              step);
      bad = 1;
    }

    gift_step_info_t info;
    info.struct_size = sizeof(info);
    if (failed(gift_allreduce_last_step(ar, &info), "last_step", rank)) {
      bad = 1;
      break;
    }
    /* An FP32 ring allreduce sends 2 (W - 1) / W of the payload. */
    const double fp32_bytes =
        2.0 * (world - 1) / world * (kRows * kCols + kRows) * sizeof(float);
    const double share = world > 1 ? info.bytes_euclid / fp32_bytes : 0;
    if (world > 1 && !(share < 0.27)) {
      fprintf(stderr, "rank %d step %d: FP8 sent %.1f%% of FP32's bytes\n",
              rank, step, 100 * share);
      bad = 1;
    }
    printf(
        "rank %d step %d: RelL2 %.4f, %llu payload bytes (%.1f%% of "
        "FP32), identical on every rank\n",
        rank, step, worst, (unsigned long long)info.bytes_euclid, 100 * share);
  }

  free(grad);
  free(mine);
  free(exact);
  free(other);
  free(rank0);
  gift_allreduce_destroy(ar);
  gift_plan_destroy(plan);
  gift_communicator_destroy(comm);
  if (bad) {
    fprintf(stderr, "rank %d: FAILED\n", rank);
    return 1;
  }
  printf("rank %d: OK (libgift %s)\n", rank, gift_version());
  return 0;
}
