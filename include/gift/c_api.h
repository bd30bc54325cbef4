/* The C ABI of libgift, for trainers that are not written in Python: JAX/XLA
 * custom calls, C++ launchers built with another standard library, Rust,
 * Julia, ... Plain C11 (also valid C++); no C++ or CUDA types. Link with
 * `pkg-config --cflags --libs gift`, or `find_package(gift)` and
 * `gift::gift` in CMake.
 *
 * One rank of a data-parallel job, per training step:
 *
 *   gift_communicator_options_t* co = gift_communicator_options_create();
 *   gift_communicator_options_set_rank(co, rank);
 *   gift_communicator_options_set_world_size(co, world_size);
 *   gift_communicator_options_set_store_dir(co, "/shared/job42/store");
 *   gift_communicator_t* comm = NULL;
 *   if (gift_communicator_create(co, &comm) != GIFT_OK) {
 *     fprintf(stderr, "gift: %s\n", gift_last_error_message());
 *   }
 *   gift_communicator_options_destroy(co);
 *
 *   gift_plan_builder_t* b = gift_plan_builder_create();
 *   int64_t fc2[2] = {64, 128}, bias[1] = {64};
 *   gift_plan_builder_add_layer(b, "fc2", fc2, 2, 0);
 *   gift_plan_builder_add_layer(b, "bias", bias, 1, 8192);
 *   gift_plan_t* plan = NULL;
 *   gift_plan_create(b, 0, 8256, &plan);        // epoch 0, 8256 floats
 *
 *   gift_allreduce_t* ar = NULL;
 *   gift_allreduce_create(comm, plan, NULL, &ar);  // FP8 by default
 *   for (each step) gift_allreduce_step(ar, grads, 8256);  // in place
 *   gift_allreduce_destroy(ar);
 *   gift_plan_destroy(plan);
 *   gift_plan_builder_destroy(b);
 *   gift_communicator_destroy(comm);
 *
 * examples/c/allreduce.c is a complete program.
 *
 * Errors. Every function that returns gift_status_t returns GIFT_OK or an
 * error code (the canonical gRPC / abseil codes, with their numbers) and
 * sets the calling thread's last error message: "" after GIFT_OK, a
 * sentence naming the function and the problem otherwise;
 * gift_last_error_message() returns it. Bad input -- NULL handles or
 * pointers, negative or absurd sizes, lengths that do not match the plan,
 * enum values out of range -- is GIFT_INVALID_ARGUMENT and changes nothing;
 * no function aborts or throws because of its arguments (pointers that are
 * not NULL must point at the memory the length says). A function with an
 * out-parameter sets *out to NULL (or its documented neutral value) when it
 * fails. Functions that return a value rather than a status return the
 * neutral value documented with them for a NULL handle.
 *
 * Memory. Buffers are passed by pointer and length (elements, not bytes,
 * unless named *_bytes). With the Gloo backend every buffer is host memory;
 * with NCCL, gradient buckets are device memory of the communicator's GPU
 * (the factors passed to put_*_factor are always host memory). Strings are
 * NUL-terminated UTF-8 and copied; the library keeps no pointer given to it.
 *
 * Ownership. Every *_create has its *_destroy, which accepts NULL. Handles
 * are reference-counted inside: an allreduce keeps its communicator alive
 * and an allreduce keeps its attachment alive, so they may be destroyed in
 * any order (a communicator's connections close when the last allreduce
 * over it is gone).
 *
 * Thread safety.
 *   - gift_last_error_message and gift_status_name, gift_version: any
 *     thread, any time (the message is per thread).
 *   - Distinct handles may be used from distinct threads concurrently,
 *     except that the collective calls on one communicator -- its barrier
 *     and broadcast and every step call of any allreduce over it -- must
 *     not overlap.
 *   - One handle must not be used by two threads at once, with two
 *     exceptions: the getters of gift_communicator_t, and an attachment's
 *     sketch / wants_sketch / get_info, which may run on another thread
 *     while an allreduce it is attached to steps (the attachment locks).
 *   - Options objects, plan builders and plans are plain data; a plan may
 *     be read (passed as const) from several threads at once.
 *
 * Collective calls (every rank makes the same ones in the same order):
 * gift_communicator_create, _barrier, _broadcast, gift_allreduce_create,
 * _step, _begin_step, _reduce_bucket. Each returns within about the
 * communicator's timeout when a peer dies or stalls
 * (GIFT_DEADLINE_EXCEEDED / GIFT_UNAVAILABLE); the communicator is then
 * broken (later calls fail with GIFT_FAILED_PRECONDITION) and the job
 * builds a new one. */
#ifndef GIFT_C_API_H_
#define GIFT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "gift/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every enumeration below spans the whole int range (its *_RANGE_MIN_ and
 * *_RANGE_MAX_ constants are not values to pass): a caller's value outside
 * the listed ones is then a well-defined value of the type, in C and in
 * C++, which the library rejects (GIFT_INVALID_ARGUMENT). */
#define GIFT_ENUM_RANGE_(prefix) \
  prefix##RANGE_MIN_ = -2147483647 - 1, prefix##RANGE_MAX_ = 2147483647

/* ---- Status -------------------------------------------------------------- */

typedef enum gift_status_t {
  GIFT_OK = 0,
  GIFT_CANCELLED = 1,
  GIFT_UNKNOWN = 2,
  GIFT_INVALID_ARGUMENT = 3,
  GIFT_DEADLINE_EXCEEDED = 4,
  GIFT_NOT_FOUND = 5,
  GIFT_ALREADY_EXISTS = 6,
  GIFT_PERMISSION_DENIED = 7,
  GIFT_RESOURCE_EXHAUSTED = 8,
  GIFT_FAILED_PRECONDITION = 9,
  GIFT_ABORTED = 10,
  GIFT_OUT_OF_RANGE = 11,
  GIFT_UNIMPLEMENTED = 12,
  GIFT_INTERNAL = 13,
  GIFT_UNAVAILABLE = 14,
  GIFT_DATA_LOSS = 15,
  GIFT_UNAUTHENTICATED = 16,
  GIFT_ENUM_RANGE_(GIFT_STATUS_)
} gift_status_t;

/* "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for other values). Static
 * storage. */
GIFT_EXPORT const char* gift_status_name(gift_status_t code);

/* The message of the last gift_status_t-returning call on this thread: ""
 * after GIFT_OK. Valid until that thread's next such call. Never NULL. */
GIFT_EXPORT const char* gift_last_error_message(void);

/* The library's version, "MAJOR.MINOR.PATCH". Static storage. */
GIFT_EXPORT const char* gift_version(void);

/* ---- Enumerations ---------------------------------------------------------*/

typedef enum gift_backend_t {
  GIFT_BACKEND_GLOO = 0, /* CPU, host memory, TCP */
  GIFT_BACKEND_NCCL = 1, /* GPU, device memory (a libgift built with CUDA) */
  GIFT_ENUM_RANGE_(GIFT_BACKEND_)
} gift_backend_t;

typedef enum gift_allreduce_mode_t {
  GIFT_MODE_FP8 = 0,      /* two-phase FP8, GIFT on GIFT layers (default) */
  GIFT_MODE_FP32 = 1,     /* exact FP32 baseline */
  GIFT_MODE_BF16 = 2,     /* bfloat16 sum */
  GIFT_MODE_NCCL_FP8 = 3, /* NCCL's FP8 sum (NCCL backend, sm_90) */
  GIFT_ENUM_RANGE_(GIFT_MODE_)
} gift_allreduce_mode_t;

/* Error feedback on the Euclidean path: auto = on for 4-bit layers, off
 * for FP8 ones. */
typedef enum gift_euclid_feedback_t {
  GIFT_EUCLID_FEEDBACK_AUTO = 0, /* default */
  GIFT_EUCLID_FEEDBACK_OFF = 1,
  GIFT_EUCLID_FEEDBACK_ON = 2,
  GIFT_ENUM_RANGE_(GIFT_EUCLID_FEEDBACK_)
} gift_euclid_feedback_t;

typedef enum gift_layer_path_t {
  GIFT_PATH_EUCLID = 0, /* FP8 with the layer's scale (default) */
  GIFT_PATH_GIFT = 1,   /* whitened FP8 with error feedback (2-D layers) */
  GIFT_ENUM_RANGE_(GIFT_PATH_)
} gift_layer_path_t;

/* A layer's element format on the wire (stable values: gift::WireFormat's
 * and giftd's). The 4-bit formats are E2M1 in blocks along each row (d_in
 * contiguous): a 2-D layer needs d_in a multiple of the block. */
typedef enum gift_wire_format_t {
  GIFT_FORMAT_E4M3 = 0,  /* FP8, max 448 (default) */
  GIFT_FORMAT_E5M2 = 1,  /* FP8, max 57344 */
  GIFT_FORMAT_NVFP4 = 2, /* blocks of 16, E4M3 block and FP32 tensor scales */
  GIFT_FORMAT_MXFP4 = 3, /* blocks of 32, power-of-two block scales */
  /* The former names, when only FP8 existed (same values). */
  GIFT_FP8_E4M3 = GIFT_FORMAT_E4M3,
  GIFT_FP8_E5M2 = GIFT_FORMAT_E5M2,
  GIFT_ENUM_RANGE_(GIFT_FORMAT_)
} gift_wire_format_t;
/* The former name of gift_wire_format_t. */
typedef gift_wire_format_t gift_fp8_format_t;

typedef enum gift_transform_t {
  GIFT_TRANSFORM_LOW_RANK = 0, /* T = I + U diag(c) U^T (default) */
  GIFT_TRANSFORM_FULL = 1,     /* dense d_in x d_in */
  GIFT_ENUM_RANGE_(GIFT_TRANSFORM_)
} gift_transform_t;

/* ---- Opaque handles -------------------------------------------------------*/

typedef struct gift_communicator_options_t gift_communicator_options_t;
typedef struct gift_communicator_t gift_communicator_t;
typedef struct gift_plan_builder_t gift_plan_builder_t;
typedef struct gift_plan_t gift_plan_t;
typedef struct gift_allreduce_options_t gift_allreduce_options_t;
typedef struct gift_allreduce_t gift_allreduce_t;
typedef struct gift_attachment_options_t gift_attachment_options_t;
typedef struct gift_attachment_t gift_attachment_t;

/* ---- Communicator ---------------------------------------------------------*/

/* Options with their defaults: Gloo, rank -1 and world size 0 (both must be
 * set), no store (one must be set), 60 s timeout, hostname and interface
 * chosen as PyTorch does ($GLOO_SOCKET_IFNAME, $GIFT_SOCKET_IFNAME, the
 * route to $MASTER_ADDR, the host name's address, 127.0.0.1), device 0.
 * NULL only when out of memory. */
GIFT_EXPORT gift_communicator_options_t* gift_communicator_options_create(void);
GIFT_EXPORT void gift_communicator_options_destroy(
    gift_communicator_options_t* options);
/* The setters copy their arguments. They reject (GIFT_INVALID_ARGUMENT) a
 * NULL options or string, an enum value out of range and an empty job id;
 * gift_communicator_create checks the rest. */
GIFT_EXPORT gift_status_t gift_communicator_options_set_backend(
    gift_communicator_options_t* options, gift_backend_t backend);
/* REQUIRES at create: 0 <= rank < world_size. */
GIFT_EXPORT gift_status_t gift_communicator_options_set_rank(
    gift_communicator_options_t* options, int rank);
GIFT_EXPORT gift_status_t gift_communicator_options_set_world_size(
    gift_communicator_options_t* options, int world_size);
/* Rendezvous through a directory every rank reaches, empty at the start of
 * the job (created if missing). Clears a daemon store set before. */
GIFT_EXPORT gift_status_t gift_communicator_options_set_store_dir(
    gift_communicator_options_t* options, const char* dir);
/* Rendezvous through the local giftd's Agent socket (NULL or "" = the
 * default: $GIFT_AGENT_SOCKET, else /tmp/gift/agent.sock) for the job
 * `job_id` (not empty; the same on every rank). Clears a store dir. */
GIFT_EXPORT gift_status_t gift_communicator_options_set_daemon_store(
    gift_communicator_options_t* options, const char* agent_socket,
    const char* job_id);
/* Prepended to every rendezvous key (several communicators per store). */
GIFT_EXPORT gift_status_t gift_communicator_options_set_key_prefix(
    gift_communicator_options_t* options, const char* prefix);
/* Bound of creation and of every collective call. REQUIRES at create:
 * > 0. */
GIFT_EXPORT gift_status_t gift_communicator_options_set_timeout_seconds(
    gift_communicator_options_t* options, double seconds);
/* Gloo: the address to listen on and announce ("" = chosen, see above). */
GIFT_EXPORT gift_status_t gift_communicator_options_set_hostname(
    gift_communicator_options_t* options, const char* hostname);
/* Gloo: the interface to listen on, e.g. "eth0" ("" = chosen). */
GIFT_EXPORT gift_status_t gift_communicator_options_set_socket_ifname(
    gift_communicator_options_t* options, const char* ifname);
/* NCCL: the rank's CUDA device. REQUIRES at create: >= 0. */
GIFT_EXPORT gift_status_t gift_communicator_options_set_device(
    gift_communicator_options_t* options, int device);

/* Collective: returns once every rank is connected. GIFT_INVALID_ARGUMENT
 * for NULL arguments or bad options; GIFT_FAILED_PRECONDITION for NCCL in a
 * build without CUDA or a CPU older than the build's x86-64 level;
 * GIFT_DEADLINE_EXCEEDED / GIFT_UNAVAILABLE when the peers do not all
 * arrive within the timeout. */
GIFT_EXPORT gift_status_t gift_communicator_create(
    const gift_communicator_options_t* options, gift_communicator_t** out);
GIFT_EXPORT void gift_communicator_destroy(gift_communicator_t* comm);
/* -1, 0, 0 and 0 for NULL. */
GIFT_EXPORT int gift_communicator_rank(const gift_communicator_t* comm);
GIFT_EXPORT int gift_communicator_world_size(const gift_communicator_t* comm);
/* 1 when buffers are device memory (NCCL), else 0. */
GIFT_EXPORT int gift_communicator_device_memory(
    const gift_communicator_t* comm);
/* Payload bytes this rank has sent since creation. */
GIFT_EXPORT uint64_t
gift_communicator_bytes_sent(const gift_communicator_t* comm);
/* Collective. */
GIFT_EXPORT gift_status_t gift_communicator_barrier(gift_communicator_t* comm);
/* Collective: data[0, bytes) of rank `root` into data on every rank (the
 * communicator's memory kind). GIFT_INVALID_ARGUMENT for NULL data with
 * bytes > 0, or root outside [0, world size). */
GIFT_EXPORT gift_status_t gift_communicator_broadcast(gift_communicator_t* comm,
                                                      void* data, size_t bytes,
                                                      int root);

/* ---- Bucket plan ----------------------------------------------------------*/

/* A plan lists the layers of one fused bucket of FP32 gradients: each a
 * contiguous run at an element offset, sorted by offset, not overlapping
 * (gaps are neither sent nor written). Every rank must build the same plan
 * (gift_allreduce_create checks it across the ranks). */
GIFT_EXPORT gift_plan_builder_t* gift_plan_builder_create(void);
GIFT_EXPORT void gift_plan_builder_destroy(gift_plan_builder_t* builder);
/* Appends a layer: shape[0, ndim) is {d_out, d_in} (ndim 2) or {n} (ndim
 * 1), at element `offset`; Euclidean, E4M3, one scale per layer, low-rank
 * transform. GIFT_INVALID_ARGUMENT for NULL arguments, an empty name, ndim
 * other than 1 or 2, a negative dimension or offset, or an element count
 * that overflows; GIFT_ALREADY_EXISTS for a name already added. The rest
 * (order, overlap, bucket size) is checked by gift_plan_create. */
GIFT_EXPORT gift_status_t
gift_plan_builder_add_layer(gift_plan_builder_t* builder, const char* name,
                            const int64_t* shape, size_t ndim, int64_t offset);
/* Changes an added layer; GIFT_NOT_FOUND for an unknown name. block_size:
 * FP8: elements per scale block, 0 = one scale per layer segment; 4-bit:
 * 0 or the format's block (16 NVFP4, 32 MXFP4), checked with the shape by
 * gift_plan_create. */
GIFT_EXPORT gift_status_t gift_plan_builder_set_path(
    gift_plan_builder_t* builder, const char* layer, gift_layer_path_t path);
GIFT_EXPORT gift_status_t
gift_plan_builder_set_format(gift_plan_builder_t* builder, const char* layer,
                             gift_wire_format_t format, int64_t block_size);
GIFT_EXPORT gift_status_t
gift_plan_builder_set_transform(gift_plan_builder_t* builder, const char* layer,
                                gift_transform_t transform);
/* Builds an immutable plan of the builder's layers (the builder is
 * unchanged and may build more). GIFT_INVALID_ARGUMENT naming the layer for
 * layers out of order, overlapping or past bucket_elements, a 1-D GIFT
 * layer, or a negative epoch or bucket size. */
GIFT_EXPORT gift_status_t gift_plan_create(const gift_plan_builder_t* builder,
                                           int64_t epoch,
                                           int64_t bucket_elements,
                                           gift_plan_t** out);
GIFT_EXPORT void gift_plan_destroy(gift_plan_t* plan);
/* 0 for NULL. */
GIFT_EXPORT int64_t gift_plan_epoch(const gift_plan_t* plan);
GIFT_EXPORT int64_t gift_plan_bucket_elements(const gift_plan_t* plan);
GIFT_EXPORT int64_t gift_plan_communicated_elements(const gift_plan_t* plan);
GIFT_EXPORT size_t gift_plan_num_layers(const gift_plan_t* plan);
/* Stable across processes and hosts. */
GIFT_EXPORT uint64_t gift_plan_fingerprint(const gift_plan_t* plan);
/* The wire format of the plan's layer named `layer` into *out.
 * GIFT_INVALID_ARGUMENT for NULL arguments, GIFT_NOT_FOUND for an unknown
 * name. */
GIFT_EXPORT gift_status_t gift_plan_layer_format(const gift_plan_t* plan,
                                                 const char* layer,
                                                 gift_wire_format_t* out);

/* ---- Quantized allreduce --------------------------------------------------*/

/* Defaults: GIFT_MODE_FP8, 256 MiB pieces, a probe step every 10 steps,
 * error feedback on. */
GIFT_EXPORT gift_allreduce_options_t* gift_allreduce_options_create(void);
GIFT_EXPORT void gift_allreduce_options_destroy(
    gift_allreduce_options_t* options);
GIFT_EXPORT gift_status_t gift_allreduce_options_set_mode(
    gift_allreduce_options_t* options, gift_allreduce_mode_t mode);
/* Buckets above this FP32 payload are sent in pieces. REQUIRES: >= 4. */
GIFT_EXPORT gift_status_t gift_allreduce_options_set_piece_bytes(
    gift_allreduce_options_t* options, int64_t piece_bytes);
/* 0 = never. REQUIRES: >= 0. An attached giftd's own interval overrides it. */
GIFT_EXPORT gift_status_t gift_allreduce_options_set_probe_interval(
    gift_allreduce_options_t* options, int probe_interval);
GIFT_EXPORT gift_status_t gift_allreduce_options_set_error_feedback(
    gift_allreduce_options_t* options, int enabled);
/* Audit steps: every this many steps (steps n, 2n, ...) the fp8 step also
 * runs an FP32 allreduce of the same local gradients and reports the error
 * of what it applied against it (gift_layer_info_t audit_*); an attached
 * giftd's interval overrides it. 0 = never. Default 100. REQUIRES: >= 0. */
GIFT_EXPORT gift_status_t gift_allreduce_options_set_audit_interval(
    gift_allreduce_options_t* options, int audit_interval);
/* With the audit, the drift of the running sums since the previous audit
 * (8 bytes of memory per gradient element, two additions per element and
 * step). Default off. */
GIFT_EXPORT gift_status_t gift_allreduce_options_set_audit_drift(
    gift_allreduce_options_t* options, int enabled);
/* Error feedback on the steps a layer is sent Euclidean (fp8 mode): each
 * rank and each chunk owner keeps what its quantization lost and adds it
 * to the next step, as on GIFT layers (4 bytes of memory per element of
 * such layers). Default GIFT_EUCLID_FEEDBACK_AUTO (on for 4-bit layers,
 * off for FP8 ones). The same on every rank. */
GIFT_EXPORT gift_status_t gift_allreduce_options_set_euclid_error_feedback(
    gift_allreduce_options_t* options, gift_euclid_feedback_t feedback);
/* Error feedback with a capped release (either path): a chunk owner adds at
 * most cap × the norm of the step's sum of its residual and keeps the rest
 * for later steps. 0 = no cap. Default 0.25. GIFT_INVALID_ARGUMENT unless
 * finite and >= 0. The same on every rank. */
GIFT_EXPORT gift_status_t gift_allreduce_options_set_owner_release_cap(
    gift_allreduce_options_t* options, float cap);

/* Collective: checks the plan's fingerprint across the ranks
 * (GIFT_FAILED_PRECONDITION "bucket plan mismatch across ranks" on every
 * rank when they differ) and the mode against the backend. options: NULL
 * for the defaults. The allreduce keeps `comm` alive. */
GIFT_EXPORT gift_status_t gift_allreduce_create(
    gift_communicator_t* comm, const gift_plan_t* plan,
    const gift_allreduce_options_t* options, gift_allreduce_t** out);
GIFT_EXPORT void gift_allreduce_destroy(gift_allreduce_t* allreduce);

/* Collective: averages bucket[0, count) in place across the ranks; count
 * must equal the plan's bucket elements. Every rank gets bit-identical
 * results. A NaN/Inf in a layer on any rank makes that layer NaN on every
 * rank. GIFT_INVALID_ARGUMENT (nothing sent) for a NULL bucket or a count
 * that differs from the plan; GIFT_FAILED_PRECONDITION inside an
 * overlapped step. */
GIFT_EXPORT gift_status_t gift_allreduce_step(gift_allreduce_t* allreduce,
                                              float* bucket, size_t count);

/* An overlapped step, for buckets handed over while the backward pass
 * runs: begin_step (collective), reduce_bucket for every bucket (each holds
 * the plan's layers layers[0, num_layers) at element offsets
 * offsets[0, num_layers), ascending, of data[0, count); every layer of the
 * plan in exactly one bucket; the same buckets in the same order on every
 * rank; collective), then end_step (local; returns the step's first error,
 * or GIFT_FAILED_PRECONDITION when a layer was in no bucket). Every
 * successful or failed begin_step must be followed by end_step. */
GIFT_EXPORT gift_status_t
gift_allreduce_begin_step(gift_allreduce_t* allreduce);
GIFT_EXPORT gift_status_t gift_allreduce_reduce_bucket(
    gift_allreduce_t* allreduce, const int32_t* layers, const int64_t* offsets,
    size_t num_layers, float* data, size_t count);
GIFT_EXPORT gift_status_t gift_allreduce_end_step(gift_allreduce_t* allreduce);

/* Local: a newer plan epoch of the same layout (which layers go the GIFT
 * path); the job switches in the first step in which every rank has it.
 * GIFT_INVALID_ARGUMENT unless the epoch is above every held one and the
 * layout (bucket size, names, shapes, offsets) matches. */
/* Local: the audit interval from the next step on (0 stops auditing; a step
 * audits only when it is an audit step for every rank's interval).
 * GIFT_INVALID_ARGUMENT when negative. */
GIFT_EXPORT gift_status_t
gift_allreduce_set_audit_interval(gift_allreduce_t* allreduce, int steps);
GIFT_EXPORT gift_status_t gift_allreduce_add_plan(gift_allreduce_t* allreduce,
                                                  const gift_plan_t* plan);
/* Local: a factor version for a 2-D layer, for use without a daemon:
 * low-rank T = I + U diag(c) U^T, T^-1 = I + U diag(c_inv) U^T with u of
 * d_in * r floats (row-major) and c, c_inv of r floats; or full t, t_inv of
 * d_in * d_in floats. Copied. GIFT_INVALID_ARGUMENT for an unknown or 1-D
 * layer, a d_in other than the layer's, a negative version, or a length
 * that does not match. */
GIFT_EXPORT gift_status_t gift_allreduce_put_low_rank_factor(
    gift_allreduce_t* allreduce, const char* layer, int64_t version,
    int64_t d_in, int64_t r, const float* u, size_t u_len, const float* c,
    size_t c_len, const float* c_inv, size_t c_inv_len);
GIFT_EXPORT gift_status_t gift_allreduce_put_full_factor(
    gift_allreduce_t* allreduce, const char* layer, int64_t version,
    int64_t d_in, const float* t, size_t t_len, const float* t_inv,
    size_t t_inv_len);

/* Attaches the allreduce to giftd through `attachment` (NULL detaches):
 * every later step takes the daemon's plans and factors first and reports
 * its telemetry after. The allreduce keeps the attachment alive while
 * attached. GIFT_INVALID_ARGUMENT unless the attachment's base plan has the
 * allreduce's layout; GIFT_FAILED_PRECONDITION when the attachment serves
 * another allreduce, or inside an overlapped step. */
GIFT_EXPORT gift_status_t gift_allreduce_attach(gift_allreduce_t* allreduce,
                                                gift_attachment_t* attachment);

/* What the last completed step reported. Set struct_size to
 * sizeof(gift_step_info_t) before the call: the library fills the fields
 * that fit (older and newer headers interoperate). */
typedef struct gift_step_info_t {
  size_t struct_size;
  int64_t step; /* steps completed before it, 0-based; -1 before any */
  int64_t plan_epoch;
  int32_t probe_step;
  int32_t num_layers; /* entries for gift_allreduce_last_layer */
  int64_t nonfinite_layers;
  int64_t gift_layers; /* layers that took the GIFT path */
  uint64_t bytes_euclid;
  uint64_t bytes_gift;
  uint64_t bytes_control;
  double transform_seconds;
  double seconds;
  int32_t audit_step; /* an audit step (see set_audit_interval) */
  int32_t reserved;
  uint64_t bytes_audit; /* the audit's FP32 allreduce */
  double audit_seconds;
} gift_step_info_t;

GIFT_EXPORT gift_status_t gift_allreduce_last_step(
    const gift_allreduce_t* allreduce, gift_step_info_t* info);

/* Layer `index` (plan order) of the last completed step; struct_size as
 * above. `name` is valid until the allreduce's next step or destruction.
 * GIFT_OUT_OF_RANGE for an index >= num_layers (none before a step). */
typedef struct gift_layer_info_t {
  size_t struct_size;
  const char* name;
  gift_layer_path_t path; /* the path taken this step */
  int64_t factor_version; /* -1 = none */
  int64_t elements;
  int64_t upper; /* FP8 codes at +-max */
  int64_t lower; /* non-zero inputs at code zero or the smallest subnormal */
  int64_t nonfinite;
  double err_sq; /* ||x^ - x||^2 of this rank's quantization */
  double x_sq;   /* ||x||^2 */
  int32_t nonfinite_result;
  int32_t probed;
  double probe_euclid_rel_l2;
  double probe_gift_rel_l2;
  /* Audit steps: the applied gradient against the FP32 average of the
   * ranks' local ones (the same on every rank), and with drift the RelL2 of
   * the running sums over the last drift_steps steps. */
  int32_t audited;
  int32_t drift_audited;
  double audit_rel_l2;
  double audit_cosine;
  double audit_drift;
  int64_t drift_steps;
} gift_layer_info_t;

GIFT_EXPORT gift_status_t gift_allreduce_last_layer(
    const gift_allreduce_t* allreduce, size_t index, gift_layer_info_t* info);

/* 0, 0 and NULL for NULL. */
GIFT_EXPORT int64_t
gift_allreduce_current_epoch(const gift_allreduce_t* allreduce);
GIFT_EXPORT int64_t gift_allreduce_steps(const gift_allreduce_t* allreduce);
/* The cudaStream_t of the device path, or NULL. */
GIFT_EXPORT void* gift_allreduce_stream(const gift_allreduce_t* allreduce);

/* ---- Daemon attachment ----------------------------------------------------*/

/* Defaults: the default Agent socket ($GIFT_AGENT_SOCKET, else
 * /tmp/gift/agent.sock), no job id (must be set), rank -1 / world size 0
 * (must be set), local rank 0, host memory, retry every 1 s, 2 s per call to
 * the daemon, staleness limit 200 steps. */
GIFT_EXPORT gift_attachment_options_t* gift_attachment_options_create(void);
GIFT_EXPORT void gift_attachment_options_destroy(
    gift_attachment_options_t* options);
GIFT_EXPORT gift_status_t gift_attachment_options_set_agent_socket(
    gift_attachment_options_t* options, const char* path);
GIFT_EXPORT gift_status_t gift_attachment_options_set_job_id(
    gift_attachment_options_t* options, const char* job_id);
GIFT_EXPORT gift_status_t
gift_attachment_options_set_rank(gift_attachment_options_t* options, int rank);
GIFT_EXPORT gift_status_t gift_attachment_options_set_world_size(
    gift_attachment_options_t* options, int world_size);
GIFT_EXPORT gift_status_t gift_attachment_options_set_local_rank(
    gift_attachment_options_t* options, int local_rank);
/* enabled != 0: gradients and activations in device memory of `device`. */
GIFT_EXPORT gift_status_t gift_attachment_options_set_device_memory(
    gift_attachment_options_t* options, int enabled, int device);
GIFT_EXPORT gift_status_t gift_attachment_options_set_retry_interval_seconds(
    gift_attachment_options_t* options, double seconds);
GIFT_EXPORT gift_status_t gift_attachment_options_set_rpc_timeout_seconds(
    gift_attachment_options_t* options, double seconds);
GIFT_EXPORT gift_status_t gift_attachment_options_set_staleness_limit(
    gift_attachment_options_t* options, int64_t steps);

/* Never fails because of the daemon: absent, the rank runs the base plan
 * (Euclidean) and a background thread keeps trying to register.
 * GIFT_INVALID_ARGUMENT for NULL arguments or bad options;
 * GIFT_FAILED_PRECONDITION for device memory without a usable CUDA device.
 * `base` is the plan the allreduce runs (its 2-D layers are declared to
 * the daemon). Destroying the handle deregisters once no allreduce is
 * attached to it any more. */
GIFT_EXPORT gift_status_t
gift_attachment_create(const gift_attachment_options_t* options,
                       const gift_plan_t* base, gift_attachment_t** out);
GIFT_EXPORT void gift_attachment_destroy(gift_attachment_t* attachment);
/* 1 when the daemon wants this layer's activations this step, else 0
 * (also for NULL arguments). */
GIFT_EXPORT int gift_attachment_wants_sketch(
    const gift_attachment_t* attachment, const char* layer);
/* Adds rows x d_in activations (row-major; count = rows * d_in floats, d_in
 * of the layer in the base plan) to the layer's open window; no-op when
 * not wanted. Device memory: producer_stream is the cudaStream_t that
 * produced them (NULL = the legacy default stream) and the call does not
 * wait for the GPU; keep them allocated until gift_attachment_sketch_stream
 * has read them. Host memory: producer_stream is ignored.
 * GIFT_INVALID_ARGUMENT for an unknown or 1-D layer, NULL pointers,
 * rows < 1 or a count other than rows * d_in. */
GIFT_EXPORT gift_status_t gift_attachment_sketch(gift_attachment_t* attachment,
                                                 const char* layer,
                                                 const float* activations,
                                                 size_t count, int64_t rows,
                                                 void* producer_stream);
/* The cudaStream_t of the device sketches, or NULL. */
GIFT_EXPORT void* gift_attachment_sketch_stream(
    const gift_attachment_t* attachment);

/* struct_size as for gift_step_info_t. */
typedef struct gift_attachment_info_t {
  size_t struct_size;
  int32_t attached; /* registered with a live giftd now */
  int32_t reserved;
  int64_t attaches;
  int64_t detaches;
  int64_t plans_applied;
  int64_t factors_received;
  int64_t stale_drops;
  int64_t windows_closed;
  int64_t windows_skipped;
  int64_t current_epoch;
  int64_t current_refresh_interval;
} gift_attachment_info_t;

GIFT_EXPORT gift_status_t gift_attachment_get_info(
    const gift_attachment_t* attachment, gift_attachment_info_t* info);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GIFT_C_API_H_ */
