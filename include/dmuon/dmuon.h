/*
 * libdmuon: executes a dmuon plan inside a host trainer.
 *
 * C ABI in the style of NCCL and the IREE runtime: opaque handles, status
 * codes with readable messages, options structs that begin with their size
 * and version, create/destroy pairs, and the host's own communicator passed
 * in. Every function that can fail returns a status (the others are plain
 * getters that return 0, -1 or null for a null handle or an index out of
 * range); on failure the message is available from dmuon_last_error() (per
 * thread) and, for calls on a runtime, from dmuon_runtime_last_error(). No
 * function aborts the process. DMUON_STEP_SKIPPED is the one status that is
 * not an error.
 *
 * Structs the library fills (param info, mesh, counters, ...) begin with
 * struct_size and version like the options: the caller sets them, e.g.
 * `dmuon_param_info_t info = {.struct_size = sizeof info,
 *                             .version = DMUON_PARAM_INFO_VERSION};`.
 *
 * Threads: a plan is immutable once loaded and may be read from any thread.
 * A runtime is used by one host thread at a time (its calls are not
 * synchronized; the host's training loop is one thread), and different
 * runtimes are independent. Loading plans, creating runtimes and the NCCL
 * plugin's first load are safe from several threads at once.
 *
 * Lifetimes: a runtime keeps its plan alive (dmuon_plan_destroy may come
 * before dmuon_runtime_destroy); strings and views the library hands out live
 * as long as the plan or, for views, as documented at each call.
 *
 * Per training step, for hook groups g = 0..n-1 in forward order:
 *   forward:  pre_forward(g) ... read params through views ... post_forward(g)
 *   backward: for g = n-1..0: pre_backward(g) ... accumulate gradients into
 *             the runtime's gradient buffers ... post_backward(g)
 *   step()
 * Params with role adamw have views and gradient buffers whose lifetime is
 * their route's (the plan's, dmuon_plan_param_route): under the default routes
 * (dmuonc --adamw-route=auto: sharded from --sharded-threshold elements, else
 * owner) the hooks move them as they move Muon params, so their values are
 * valid only inside their hook group's forward window (and backward under Z3)
 * and their gradient buffers only between pre_backward and post_backward;
 * only a replicated param's views are valid at all times (its gradient zeroed
 * after each step), and a host-routed param has none. step() averages their
 * gradients over the data-parallel ranks and applies AdamW (unless the host
 * opted out of the replicated route's, manage_adamw = 0). For gradient
 * accumulation, run k micro-batches (forward and backward, every hook) before
 * step(), declaring each but the last with dmuon_runtime_begin_micro_batch(rt,
 * 0). The invariants I1-I4 (who owns, holds and steps what) and the training
 * loop are defined in docs/runtime.md.
 */
#ifndef DMUON_DMUON_H
#define DMUON_DMUON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define DMUON_API
#else
#define DMUON_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define DMUON_VERSION_MAJOR 0
#define DMUON_VERSION_MINOR 2
#define DMUON_VERSION_PATCH 0

typedef enum dmuon_status {
  DMUON_SUCCESS = 0,
  DMUON_ERROR_INVALID_ARGUMENT = 1, /* null pointer, bad option, unknown name, shape mismatch */
  DMUON_ERROR_INVALID_PLAN = 2,     /* unreadable, corrupt or incompatible plan */
  DMUON_ERROR_MISMATCH = 3,         /* plan vs communicator: world size, rank, fingerprint */
  DMUON_ERROR_INVALID_STATE = 4,    /* call out of order, e.g. step before post_backward */
  DMUON_ERROR_UNSUPPORTED = 5,      /* valid, but not supported by this build or backend */
  DMUON_ERROR_BACKEND = 6,          /* a collective or device call failed */
  DMUON_ERROR_OUT_OF_MEMORY = 7,
  DMUON_ERROR_IO = 8,
  DMUON_ERROR_INTERNAL = 9,
  /* dmuon_runtime_step applied an update that made a param NaN or Inf (on
   * any rank; every rank returns this together, naming the param). The
   * gradients were finite: the update itself overflowed fp32. The params are
   * no longer usable; load a checkpoint. */
  DMUON_ERROR_NON_FINITE = 10,
  /* Not an error: dmuon_runtime_step found a NaN or Inf in the gradient (on
   * any rank; every rank returns this together), or a squared gradient norm
   * (after clipping) past fp32's range, which would make the fp32 optimizer
   * state Inf for good; it skipped the update and changed no param or
   * optimizer state. The next step proceeds normally. */
  DMUON_STEP_SKIPPED = 64
} dmuon_status_t;

/* A short constant description of a status code. */
DMUON_API const char *dmuon_status_string(dmuon_status_t status);
/* The message of the last failed call on this thread ("" if none). */
DMUON_API const char *dmuon_last_error(void);
DMUON_API void dmuon_version(int *major, int *minor, int *patch);
/* The plan format this library reads: plans of this major, of any minor
 * (fields are only appended; `minor` is the newest it knows). Hosts that
 * load the library at run time (the Python package) report it beside the
 * library's version, which says nothing about the format. */
DMUON_API void dmuon_plan_format_version(int *major, int *minor);

/* ------------------------------------------------------------------ plans */

typedef struct dmuon_plan *dmuon_plan_t;

/* Reads and verifies a plan (FlatBuffers verifier, format version,
 * fingerprint, internal consistency). Only complete plans load. */
DMUON_API dmuon_status_t dmuon_plan_load_file(const char *path, dmuon_plan_t *out_plan);
/* As above from memory; the bytes are copied. */
DMUON_API dmuon_status_t dmuon_plan_load_buffer(const void *data, size_t size,
                                               dmuon_plan_t *out_plan);
DMUON_API void dmuon_plan_destroy(dmuon_plan_t plan);

DMUON_API uint64_t dmuon_plan_fingerprint(dmuon_plan_t plan);
DMUON_API int dmuon_plan_world_size(dmuon_plan_t plan);
DMUON_API int dmuon_plan_num_params(dmuon_plan_t plan);
DMUON_API int dmuon_plan_num_hook_groups(dmuon_plan_t plan);
/* The name of hook group `index` (valid while the plan lives). */
DMUON_API const char *dmuon_plan_hook_group_name(dmuon_plan_t plan, int index);

#define DMUON_MAX_MESH_DIMS 8

#define DMUON_MESH_INFO_VERSION 1
typedef struct dmuon_mesh_info {
  size_t struct_size; /* set by the caller: sizeof(dmuon_mesh_info_t) */
  uint32_t version;   /* set by the caller: DMUON_MESH_INFO_VERSION */
  int ndim;
  const char *dim_names[DMUON_MAX_MESH_DIMS]; /* valid while the plan lives */
  int dim_sizes[DMUON_MAX_MESH_DIMS];
  int shard_dim;     /* index of dp_shard, -1 if absent */
  int replicate_dim; /* index of dp_replicate, -1 if absent */
  int num_shards;    /* G */
  int num_replicas;  /* R */
  int world_size;
  /* 1 for a model-parallel dim whose coordinates see different tokens (ep,
   * cp by default): a param Replicate on it is averaged over it too. */
  int dim_carries_data[DMUON_MAX_MESH_DIMS];
  /* Ranks whose data meet in an averaged gradient (G * R * the sizes of the
   * data-carrying dims): the divisor of every gradient average. */
  int64_t data_parallel_size;
} dmuon_mesh_info_t;

/* The plan's mesh; a rank's coordinate is row-major over dim_sizes. */
DMUON_API dmuon_status_t dmuon_plan_mesh(dmuon_plan_t plan, dmuon_mesh_info_t *out_mesh);

typedef enum dmuon_role { DMUON_ROLE_ADAMW = 0, DMUON_ROLE_MUON = 1 } dmuon_role_t;
typedef enum dmuon_dtype {
  DMUON_DTYPE_F32 = 0,
  DMUON_DTYPE_BF16 = 1,
  DMUON_DTYPE_F16 = 2,
  DMUON_DTYPE_F64 = 3
} dmuon_dtype_t;

#define DMUON_MAX_DIMS 8

#define DMUON_PARAM_INFO_VERSION 1
typedef struct dmuon_param_info {
  size_t struct_size; /* set by the caller: sizeof(dmuon_param_info_t) */
  uint32_t version;   /* set by the caller: DMUON_PARAM_INFO_VERSION */
  const char *name;   /* valid while the plan lives */
  int ndim;
  int64_t shape[DMUON_MAX_DIMS]; /* the full shape; a rank's slice: dmuon_plan_param_slice */
  int64_t numel;
  dmuon_dtype_t dtype;
  dmuon_role_t role;
  int hook_group;   /* -1 unless the hooks move it (owner and sharded routes) */
  /* -1 unless it travels the owner route. Else the rank with dp_shard =
   * owner_shard, dp_replicate = owner_replicate, the data-carrying dims the
   * param is Replicate on at its owner's coordinates, and every other dim at
   * 0 (a rank there owns its own shard: docs/runtime.md). */
  int owner_rank;
  int owner_shard;  /* -1 unless it travels the owner route */
  int owner_replicate;
} dmuon_param_info_t;

/* How a param travels (plan.fbs Route; docs/dmuonc.md, "Routes"). */
typedef enum dmuon_route {
  DMUON_ROUTE_REPLICATED = 0, /* on every rank; gradients all-reduced */
  DMUON_ROUTE_OWNER = 1,      /* owner broadcast / reduce; the owner steps it (every Muon param) */
  DMUON_ROUTE_SHARDED = 2,    /* flat shards over dp_shard: all-gather / reduce-scatter */
  DMUON_ROUTE_HOST = 3        /* the host manages it: not bound, no views */
} dmuon_route_t;

#define DMUON_PARAM_ROUTE_VERSION 1
typedef struct dmuon_param_route {
  size_t struct_size; /* set by the caller: sizeof(dmuon_param_route_t) */
  uint32_t version;   /* set by the caller: DMUON_PARAM_ROUTE_VERSION */
  dmuon_route_t route;
  /* sharded: local elements per dp_shard rank; padding past the param's own
   * (shard_elements * G - its local elements) is zero. 0 otherwise. */
  int64_t shard_elements;
} dmuon_param_route_t;

DMUON_API dmuon_status_t dmuon_plan_param_route(dmuon_plan_t plan, int index,
                                               dmuon_param_route_t *out_route);

DMUON_API dmuon_status_t dmuon_plan_param_info(dmuon_plan_t plan, int index,
                                              dmuon_param_info_t *out_info);
#define DMUON_PARAM_SLICE_VERSION 1

/* The slice of a param that one rank binds and views: DTensor's rule. For
 * each tensor dim, the model-parallel mesh dims that Shard it split it one
 * after the other in mesh order, each as torch.chunk splits what the ones
 * before left: chunks of ceil(n / size), the last ones smaller when the size
 * does not divide n (dmuonc refuses placements that leave a rank nothing).
 * A StridedShard(d, k) param is refused (DMUON_ERROR_UNSUPPORTED): its slice
 * is k interleaved runs of dim d, not one shape and offset; bind the
 * DTensor's to_local() as it is (checkpoints save it box by box). */
typedef struct dmuon_param_slice {
  size_t struct_size; /* set by the caller: sizeof(dmuon_param_slice_t) */
  uint32_t version;   /* set by the caller: DMUON_PARAM_SLICE_VERSION */
  int ndim;
  int64_t shape[DMUON_MAX_DIMS];  /* the local shape */
  int64_t offset[DMUON_MAX_DIMS]; /* where it starts in the full param, per dim */
  int64_t numel;                  /* what bind_param takes */
} dmuon_param_slice_t;

DMUON_API dmuon_status_t dmuon_plan_param_slice(dmuon_plan_t plan, int index, int rank,
                                               dmuon_param_slice_t *out_slice);

/* Index of the param called `name`, or DMUON_ERROR_INVALID_ARGUMENT. */
DMUON_API dmuon_status_t dmuon_plan_find_param(dmuon_plan_t plan, const char *name,
                                              int *out_index);

/* Pipeline stages (plan format 1.9; docs/runtime.md, "Pipeline stages"): a
 * plan with a `pp` mesh dim gives every param and hook group to one stage,
 * and a rank holds only its own stage's. Without one there is one stage, 0,
 * and every rank holds everything. */
DMUON_API int dmuon_plan_num_stages(dmuon_plan_t plan);
/* The stage of `rank`: its coordinate on the pp dim. */
DMUON_API dmuon_status_t dmuon_plan_rank_stage(dmuon_plan_t plan, int rank, int *out_stage);
DMUON_API dmuon_status_t dmuon_plan_param_stage(dmuon_plan_t plan, int index, int *out_stage);
DMUON_API dmuon_status_t dmuon_plan_hook_group_stage(dmuon_plan_t plan, int index,
                                                    int *out_stage);

/* ---------------------------------------------------------------- runtime */

typedef struct dmuon_runtime *dmuon_runtime_t;

typedef enum dmuon_backend {
  DMUON_BACKEND_MPI = 1,  /* CPU: MPI collectives, OpenBLAS kernels */
  DMUON_BACKEND_NCCL = 2  /* GPU: NCCL collectives, CUDA kernels */
} dmuon_backend_t;

/* A setting the host leaves unset holds the unset value of its type, as the
 * *_init functions write it (NCCL's NCCL_CONFIG_UNDEF_* are the model):
 * DMUON_UNSET for int and enum fields, DMUON_UNSET_REAL (a NaN) for
 * real-valued ones. In dmuon_runtime_options_t an unset field takes the
 * plan's value (device: the communicator's); in dmuon_hyper_params_t it
 * keeps the current one. */
#define DMUON_UNSET (-1)
#define DMUON_UNSET_REAL NAN

typedef enum dmuon_mode {
  DMUON_MODE_FROM_PLAN = DMUON_UNSET,
  DMUON_MODE_Z3 = 0, /* free packed buffers after forward, re-broadcast for backward */
  DMUON_MODE_Z2 = 1  /* keep packed buffers from forward through backward */
} dmuon_mode_t;

/* Gradient accumulation over micro-batches (dmuon_runtime_begin_micro_batch). */
typedef enum dmuon_accumulation {
  /* Each rank accumulates its own fp32 gradients over the micro-batches and
   * they are reduced to the owners once, in the last micro-batch's backward
   * (FSDP2's no_sync): k times less reduce traffic, every hook group's
   * gradient buffer held from the first micro-batch's backward to the step. */
  DMUON_ACCUMULATION_LOCAL = 0,
  /* Every micro-batch's gradients are reduced to the owners, who accumulate
   * them: one hook group's gradient buffer at a time, k times the traffic. */
  DMUON_ACCUMULATION_REDUCE = 1
} dmuon_accumulation_t;

/* Which params dmuon_runtime_step clips to options.max_grad_norm. */
typedef enum dmuon_clip_policy {
  /* The AdamW params by their own norm. The default: Newton-Schulz normalizes
   * each Muon update, so scaling a Muon gradient changes its update only
   * through the momentum mix and the 1e-7 normalization epsilon; a global
   * clip coefficient can push small Muon gradients toward that epsilon and
   * stall their update. */
  DMUON_CLIP_ADAMW_ONLY = 0,
  /* Every param by the total norm (torch.nn.utils.clip_grad_norm_). */
  DMUON_CLIP_ALL = 1,
  DMUON_CLIP_NONE = 2
} dmuon_clip_policy_t;

typedef enum dmuon_momentum_form {
  DMUON_MOMENTUM_SGD = 0, /* buf <- mu*buf + g (Keller Jordan's Muon) */
  DMUON_MOMENTUM_EMA = 1  /* buf <- mu*buf + (1-mu)*g (torch.optim.Muon) */
} dmuon_momentum_form_t;

#define DMUON_RUNTIME_OPTIONS_VERSION 4

/* Fields left unset (DMUON_UNSET, DMUON_UNSET_REAL) take the plan's value.
 * Initialize with dmuon_runtime_options_init. A struct of an older
 * version (smaller struct_size) is accepted; its missing fields take their
 * defaults. */
typedef struct dmuon_runtime_options {
  size_t struct_size; /* sizeof(dmuon_runtime_options_t) */
  uint32_t version;   /* DMUON_RUNTIME_OPTIONS_VERSION */
  dmuon_backend_t backend;
  /* The host's world communicator: a pointer to an MPI_Comm for the MPI
   * backend, to an ncclComm_t for NCCL. The runtime derives its own
   * sub-communicators and never frees the host's. MPI backend only: NULL is
   * this process alone (MPI_COMM_SELF, a plan for 1 rank), for a host with
   * no MPI of its own (torchrun at world size 1); if MPI is not initialized
   * the runtime initializes it (MPI_Init, a singleton) and finalizes it at
   * exit. */
  void *communicator;
  void *stream;        /* NCCL: the host's compute cudaStream_t; unused for MPI */
  /* NCCL: the CUDA device ordinal; DMUON_UNSET (default): the communicator's device
   * (ncclCommCuDevice). It must equal the communicator's device and the
   * stream's, or create fails with DMUON_ERROR_INVALID_ARGUMENT. Every call
   * runs on it and leaves the calling thread's current device as it was.
   * Unused for MPI. */
  int device;
  dmuon_mode_t mode;
  int replicate_async; /* DMUON_UNSET: plan, 0: sync, 1: async */
  int manage_adamw;    /* 1 (default): the runtime averages and updates adamw params */
  double lr, momentum, weight_decay; /* DMUON_UNSET_REAL: plan */
  int nesterov;        /* DMUON_UNSET: plan, 0 or 1 */
  int ns_steps;        /* DMUON_UNSET: plan */
  double adamw_lr, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay; /* ditto */
  /* Seconds to wait for any one collective before giving up with
   * DMUON_ERROR_BACKEND (0: wait forever). After a timeout the runtime only
   * refuses further work and can be destroyed; with NCCL its communicators
   * are aborted. With NCCL a timeout makes waits poll on the host. */
  double collective_timeout_s;
  /* Version 2. */
  dmuon_accumulation_t accumulation;
  double max_grad_norm;            /* 0 (default): no clipping */
  dmuon_clip_policy_t clip_policy; /* what max_grad_norm clips */
  dmuon_momentum_form_t momentum_form;
  /* Version 3. */
  double normuon_beta2; /* NorMuon's second-moment decay; DMUON_UNSET_REAL: plan */
  /* Version 4: SOAP's and Shampoo's settings (docs/optimizers.md);
   * DMUON_UNSET_REAL: plan. Their precondition frequencies and max dims are
   * the plan's only: its memory figures count the state they size. */
  double soap_lr, soap_beta1, soap_beta2, soap_shampoo_beta, soap_eps, soap_weight_decay;
  double shampoo_lr, shampoo_beta1, shampoo_beta2, shampoo_eps, shampoo_weight_decay;
  double shampoo_graft_eps;
} dmuon_runtime_options_t;

DMUON_API void dmuon_runtime_options_init(dmuon_runtime_options_t *options);

/* Collective over the communicator: checks the plan against it (world size,
 * this rank, every rank holding the same plan fingerprint) and builds the
 * shard / replicate sub-communicators. The runtime holds a reference to the
 * plan: the host may destroy its own handle at any time after. */
DMUON_API dmuon_status_t dmuon_runtime_create(dmuon_plan_t plan,
                                             const dmuon_runtime_options_t *options,
                                             dmuon_runtime_t *out_runtime);
DMUON_API void dmuon_runtime_destroy(dmuon_runtime_t runtime);
DMUON_API const char *dmuon_runtime_last_error(dmuon_runtime_t runtime);

/* NCCL communicators for hosts without an NCCL binding of their own (Python
 * over ctypes): the world ncclComm_t that options.communicator points to,
 * made through libdmuon's NCCL plugin as a C++ host makes it: a unique id
 * from dmuon_nccl_unique_id on one rank (rank 0), sent as
 * DMUON_NCCL_UNIQUE_ID_BYTES opaque bytes to every rank over any channel the
 * host has (MPI, a key-value store), then dmuon_nccl_comm_init_rank on each.
 * Arguments are checked first, on any build; then, without the plugin (a
 * build without CUDA and NCCL), each call that needs NCCL returns
 * DMUON_ERROR_UNSUPPORTED and says so. */
#define DMUON_NCCL_UNIQUE_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES: an ncclUniqueId */

/* ncclGetUniqueId into `out_id`, `id_size` bytes (DMUON_NCCL_UNIQUE_ID_BYTES,
 * else DMUON_ERROR_INVALID_ARGUMENT): once per communicator, on one rank. */
DMUON_API dmuon_status_t dmuon_nccl_unique_id(void *out_id, size_t id_size);
/* ncclCommInitRank as rank `rank` of `world_size` on CUDA device `device`
 * (DMUON_UNSET: the calling thread's current one; the thread's current
 * device is left as it was): collective over the world_size ranks that pass
 * the same id. Writes
 * the communicator into *(ncclComm_t *)out_communicator: that pointer is
 * what options.communicator takes. A rank outside [0, world_size), a device
 * that is not visible or an id_size other than DMUON_NCCL_UNIQUE_ID_BYTES is
 * DMUON_ERROR_INVALID_ARGUMENT; no CUDA device or driver, or an NCCL
 * failure, DMUON_ERROR_BACKEND. */
DMUON_API dmuon_status_t dmuon_nccl_comm_init_rank(void *out_communicator, int world_size,
                                                   const void *id, size_t id_size, int rank,
                                                   int device);
/* ncclCommDestroy of the communicator that `communicator` points to (as
 * dmuon_nccl_comm_init_rank wrote it) and sets it to null; a null one is
 * nothing to do. Destroy the runtimes made over it first. */
DMUON_API dmuon_status_t dmuon_nccl_comm_destroy(void *communicator);

/* Gives the runtime a param's initial fp32 values: the full param, or this
 * rank's local shard for a param sharded on model-parallel dims (as with
 * DTensor's to_local()). Every data-parallel rank passes the same values;
 * ranks that keep no copy ignore them. `numel` must match the plan's local
 * shape. Every param must be bound before the first pre_forward. */
DMUON_API dmuon_status_t dmuon_runtime_bind_param(dmuon_runtime_t runtime, const char *name,
                                                 const float *values, int64_t numel);

/* The views are the per-layer calls of the training loop, so they take the
 * param's index in the plan (dmuon_plan_find_param, once, at set-up).
 *
 * The param's values in the plan's dtype (this rank's local shard for a
 * param sharded on model-parallel dims, as bound): for a param the hooks
 * move (owner and sharded routes: every Muon param) valid between
 * pre_forward and post_forward of its hook group (and pre_backward and
 * post_backward under Z3); for a replicated param always; a host-routed
 * param has none (DMUON_ERROR_INVALID_ARGUMENT). */
DMUON_API dmuon_status_t dmuon_runtime_param_view(dmuon_runtime_t runtime, int param,
                                                 void **out_data);
/* The fp32 gradient buffer the host accumulates into: for a param the hooks
 * move valid between pre_backward and post_backward of its hook group
 * (zeroed when the group's backward starts a step), for a replicated param
 * always (zeroed after each step). */
DMUON_API dmuon_status_t dmuon_runtime_grad_view(dmuon_runtime_t runtime, int param,
                                                float **out_grad);

DMUON_API dmuon_status_t dmuon_runtime_pre_forward(dmuon_runtime_t runtime, int hook_group);
DMUON_API dmuon_status_t dmuon_runtime_post_forward(dmuon_runtime_t runtime, int hook_group);
DMUON_API dmuon_status_t dmuon_runtime_pre_backward(dmuon_runtime_t runtime, int hook_group);
DMUON_API dmuon_status_t dmuon_runtime_post_backward(dmuon_runtime_t runtime, int hook_group);
/* Completes every gradient reduce; afterwards only global owners hold a
 * reduced gradient (I3). step() calls it if the host did not. */
DMUON_API dmuon_status_t dmuon_runtime_finish_backward(dmuon_runtime_t runtime);
/* Owner-only Muon on every owned param, AdamW on adamw params, then the
 * replicate broadcast of updated owned data (async or sync). Clips first
 * (options.max_grad_norm); returns DMUON_STEP_SKIPPED, not an error, when a
 * gradient is not finite or its squares are past fp32's range. Collective over every rank of every pipeline
 * stage. What one rank refuses before the step's collectives (a step before
 * any hook, an unbound param, a hook group's backward not finished) every
 * rank returns, naming that rank, instead of waiting for it; a rank whose
 * stage has no hook group (AdamW params alone) starts with its first step. */
DMUON_API dmuon_status_t dmuon_runtime_step(dmuon_runtime_t runtime);
/* Collective (every rank calls it): abandons the current step, e.g. after
 * an exception in the host's forward or backward (out of memory, a bad
 * batch). Completes what is in flight, drops every gradient of the step and
 * its micro-batches and every hook group's state; no param or optimizer
 * state changes. The host then starts the step again with pre_forward. A
 * rank blocked in a collective its peers never reach is not freed by it:
 * that collective's timeout (options.collective_timeout_s) is. */
DMUON_API dmuon_status_t dmuon_runtime_abandon_step(dmuon_runtime_t runtime);
/* Waits for every outstanding collective, including an async replicate
 * broadcast (I4 holds afterwards). */
DMUON_API dmuon_status_t dmuon_runtime_synchronize(dmuon_runtime_t runtime);

/* ----------------------------------------------------------- training loop */

/* Declares the coming micro-batch (its forward and backward, every hook
 * each) not the last before step() when is_last is 0. Without this call a
 * micro-batch is the last one. Call it before the micro-batch's first
 * pre_forward. The runtime averages gradients over the data-parallel ranks
 * only: as with torch, the host scales its loss by 1/k for k micro-batches.
 * What is reduced when: options.accumulation. */
DMUON_API dmuon_status_t dmuon_runtime_begin_micro_batch(dmuon_runtime_t runtime, int is_last);

#define DMUON_HYPER_PARAMS_VERSION 2

/* The hyper-parameters a schedule changes. For set, an unset value
 * (DMUON_UNSET_REAL) is left as it is; initialize with
 * dmuon_hyper_params_init. A host built against version 1 (no SOAP or
 * Shampoo fields) keeps working: its struct_size and version say which
 * fields it has, and get fills only those. */
typedef struct dmuon_hyper_params {
  size_t struct_size; /* sizeof(dmuon_hyper_params_t) */
  uint32_t version;   /* DMUON_HYPER_PARAMS_VERSION */
  double lr, momentum, weight_decay; /* Muon (NorMuon too) */
  double adamw_lr, adamw_weight_decay;
  /* Version 2. */
  double soap_lr, soap_weight_decay;
  double shampoo_lr, shampoo_weight_decay;
} dmuon_hyper_params_t;

DMUON_API void dmuon_hyper_params_init(dmuon_hyper_params_t *params);
/* Collective: every rank passes the same values (checked; a mismatch is
 * DMUON_ERROR_MISMATCH on every rank and changes nothing). Takes effect at
 * the next step(). Saved in and restored from checkpoints. */
DMUON_API dmuon_status_t dmuon_runtime_set_hyper_params(dmuon_runtime_t runtime,
                                                       const dmuon_hyper_params_t *params);
DMUON_API dmuon_status_t dmuon_runtime_get_hyper_params(dmuon_runtime_t runtime,
                                                       dmuon_hyper_params_t *out_params);
/* Collective: params whose names match the glob `pattern` (fnmatch: *, ?,
 * [...]) step with lr and weight decay multiplied by these factors (1, 1
 * undoes it). A later call wins for the params both match. Returns
 * DMUON_ERROR_INVALID_ARGUMENT when no param matches. */
DMUON_API dmuon_status_t dmuon_runtime_set_param_group_scale(dmuon_runtime_t runtime,
                                                            const char *pattern,
                                                            double lr_scale,
                                                            double weight_decay_scale);

#define DMUON_GRAD_NORM_VERSION 1

/* Norms of this step's averaged gradient (after every reduce), each element
 * counted once over owners, shards, replicas and model-parallel copies. */
typedef struct dmuon_grad_norm {
  size_t struct_size; /* set by the caller: sizeof(dmuon_grad_norm_t) */
  uint32_t version;   /* set by the caller: DMUON_GRAD_NORM_VERSION */
  double total;       /* L2 norm over every param the runtime steps */
  double muon;        /* over the Muon params */
  double adamw;       /* over the AdamW params the runtime manages */
  double clip_coef;   /* factor step() applies to the clipped params (1: none) */
  int finite;         /* 0: a gradient element is NaN or Inf, or the squared
                       * norm after clipping is >= FLT_MAX; step() skips */
} dmuon_grad_norm_t;

/* Completes the backward (finish_backward) if needed and reports the norms,
 * before clipping. Collective (one scalar all-reduce per step, which step()
 * performs anyway, and one agreement per call: every rank measures when any
 * rank is inside a step, and a rank's refusal is every rank's). After step()
 * it reports that step's norms. */
DMUON_API dmuon_status_t dmuon_runtime_grad_norm(dmuon_runtime_t runtime,
                                                dmuon_grad_norm_t *out_norm);
/* Steps applied and steps skipped (DMUON_STEP_SKIPPED) so far. */
DMUON_API dmuon_status_t dmuon_runtime_step_counts(dmuon_runtime_t runtime,
                                                  int64_t *out_applied, int64_t *out_skipped);

/* This rank's fp32 values of a param as the optimizer sees them (its local
 * shard for a model-parallel param), from the global owner to every rank of
 * the data-parallel group (a collective over it; for checkpoints and tests). */
DMUON_API dmuon_status_t dmuon_runtime_gather_param(dmuon_runtime_t runtime, const char *name,
                                                   float *out_values, int64_t numel);

/* ---------------------------------------------------------------- QK-Clip */

/* QK-Clip (MuonClip, as in Kimi K2) on the query/key projection pairs the
 * manifest declares (qk_clip, docs/manifest-format.md). Rows
 * [h*head_dim, (h+1)*head_dim) of a projection belong to head h. Each step,
 * before dmuon_runtime_step, every rank reports for every pair the largest
 * attention logit (q_h . k_h, after the softmax scale the model applies)
 * that each query head produced in its own forward passes. step() takes the
 * maximum over all ranks (one all-reduce) and, after the Muon update, the
 * owners rescale each head whose maximum m exceeds the plan's tau (dmuonc
 * --qk-clip-tau): with gamma = tau / m, the head's query rows and key rows
 * by sqrt(gamma) each; when key_heads < heads (grouped-query attention) the
 * query rows by gamma and the shared key rows not at all. Other heads are
 * not touched. A skipped step (DMUON_STEP_SKIPPED) clips nothing and forgets
 * the step's maxima. docs/runtime.md, "Training loop". */
#define DMUON_QK_CLIP_PAIR_INFO_VERSION 1
typedef struct dmuon_qk_clip_pair_info {
  size_t struct_size; /* set by the caller: sizeof(dmuon_qk_clip_pair_info_t) */
  uint32_t version;   /* set by the caller: DMUON_QK_CLIP_PAIR_INFO_VERSION */
  const char *query;  /* param names, valid while the plan lives */
  const char *key;
  int query_index;   /* param indices */
  int key_index;
  int heads;         /* query heads: the length of the max-logit array */
  int key_heads;     /* heads, or fewer for grouped-query attention */
  int head_dim;
} dmuon_qk_clip_pair_info_t;

DMUON_API int dmuon_plan_num_qk_clip_pairs(dmuon_plan_t plan);
DMUON_API dmuon_status_t dmuon_plan_qk_clip_pair(dmuon_plan_t plan, int index,
                                                dmuon_qk_clip_pair_info_t *out_info);
/* The plan's threshold tau (0 for a null plan). */
DMUON_API double dmuon_plan_qk_clip_tau(dmuon_plan_t plan);

/* This rank's per-head maximum attention logits of pair `pair` for the
 * coming step(): `count` (= the pair's heads) finite floats. Not collective;
 * repeated calls before a step keep the element-wise maximum (one call per
 * micro-batch is fine). A pair no rank reports is not clipped. */
DMUON_API dmuon_status_t dmuon_runtime_set_qk_max_logits(dmuon_runtime_t runtime, int pair,
                                                        const float *max_logits, int64_t count);
/* Heads clipped (over all pairs) by the last step() and since creation. */
DMUON_API dmuon_status_t dmuon_runtime_qk_clip_counts(dmuon_runtime_t runtime,
                                                     int64_t *out_last_step,
                                                     int64_t *out_total);

/* ------------------------------------------------------------ checkpoints */

/* Saves every param's fp32 master and every rule's optimizer state (Muon
 * momentum, NorMuon's second moment, SOAP's and Shampoo's statistics, bases
 * and roots, AdamW moments, the step counts) keyed by param name into the directory `path`, with the
 * plan's fingerprint and `step` (docs/checkpoint-format.md). Collective; call
 * between steps. Atomic: until the new manifest replaces the old one, the
 * previous checkpoint in `path` stays loadable. */
DMUON_API dmuon_status_t dmuon_checkpoint_save(dmuon_runtime_t runtime, const char *path,
                                              int64_t step);
/* Restores a checkpoint saved under this plan or under a plan of the same
 * model for another mesh (state moves to the new owners). Binds every param.
 * Collective; a checkpoint that is truncated, corrupt or from another model
 * is refused and the runtime is left unchanged. `out_step` may be null. */
DMUON_API dmuon_status_t dmuon_checkpoint_load(dmuon_runtime_t runtime, const char *path,
                                              int64_t *out_step);

/* ---------------------------------------------------------- introspection */

#define DMUON_PARAM_STATE_VERSION 1
typedef struct dmuon_param_state {
  size_t struct_size;   /* set by the caller: sizeof(dmuon_param_state_t) */
  uint32_t version;     /* set by the caller: DMUON_PARAM_STATE_VERSION */
  int is_owner;         /* this rank is the global owner (I1) */
  int has_owned_data;   /* this rank keeps an fp32 master copy (I2) */
  int has_reduced_grad; /* a reduced gradient is held here (I3) */
  int has_momentum;
  uint64_t owned_checksum; /* FNV-1a of the master bytes, 0 without them (I4) */
} dmuon_param_state_t;

DMUON_API dmuon_status_t dmuon_runtime_param_state(dmuon_runtime_t runtime, const char *name,
                                                  dmuon_param_state_t *out_state);

typedef enum dmuon_collective {
  DMUON_COLLECTIVE_BROADCAST = 0, /* shard-dim unshard broadcasts */
  DMUON_COLLECTIVE_REDUCE = 1,    /* gradient reduces, both HSDP phases */
  DMUON_COLLECTIVE_REPLICATE = 2, /* post-step replicate broadcasts */
  DMUON_COLLECTIVE_ALLREDUCE = 3, /* gradient all-reduces (replicated params, shards over
                                     dp_replicate, sums along data-carrying dims) */
  DMUON_COLLECTIVE_GATHER = 4,    /* TP shards of a matrix gathered for NS */
  DMUON_COLLECTIVE_SCATTER = 5,   /* orthogonalized slices sent back */
  DMUON_COLLECTIVE_ALLGATHER = 6, /* sharded params' shards gathered for use */
  DMUON_COLLECTIVE_REDUCE_SCATTER = 7, /* sharded params' gradients to their shards */
  DMUON_COLLECTIVE_COUNT = 8
} dmuon_collective_t;

/* Logical payload bytes this rank sent and received, and the collectives it
 * took part in, of one kind (accounting rule: docs/plan-format.md). */
typedef struct dmuon_collective_counts {
  uint64_t sent;
  uint64_t received;
  uint64_t calls;
} dmuon_collective_counts_t;

/* Per collective kind, since creation or the last reset. Kinds are only
 * appended: a caller built with fewer kinds gets those it knows. */
#define DMUON_COMM_COUNTERS_VERSION 1
typedef struct dmuon_comm_counters {
  size_t struct_size; /* set by the caller: sizeof(dmuon_comm_counters_t) */
  uint32_t version;   /* set by the caller: DMUON_COMM_COUNTERS_VERSION */
  dmuon_collective_counts_t kinds[DMUON_COLLECTIVE_COUNT];
} dmuon_comm_counters_t;

DMUON_API dmuon_status_t dmuon_runtime_comm_counters(dmuon_runtime_t runtime,
                                                    dmuon_comm_counters_t *out_counters);
DMUON_API dmuon_status_t dmuon_runtime_reset_comm_counters(dmuon_runtime_t runtime);

/* This rank's predicted per-step figures from the plan, for comparison. */
DMUON_API dmuon_status_t dmuon_runtime_planned_counters(dmuon_runtime_t runtime,
                                                       dmuon_comm_counters_t *out_counters);

/* The memory this rank's runtime holds, by category, in bytes (the plan's
 * per-rank figures: docs/plan-format.md, "Memory"). `live` is what is held
 * now; `peak` the most held at once since creation. Masters are the owner
 * route's fp32 masters (Muon and AdamW, I2); values the sharded route's
 * shards and the replicated params; grads the reduced gradients held for
 * the step (owned params, shards, the replicated buffer); buffers the hook
 * groups' packed values and gradients and the replicate staging. NS scratch
 * is not counted. */
typedef struct dmuon_memory_category {
  uint64_t live;
  uint64_t peak;
} dmuon_memory_category_t;

#define DMUON_MEMORY_REPORT_VERSION 1
typedef struct dmuon_memory_report {
  size_t struct_size; /* set by the caller: sizeof(dmuon_memory_report_t) */
  uint32_t version;   /* set by the caller: DMUON_MEMORY_REPORT_VERSION */
  dmuon_memory_category_t masters;
  dmuon_memory_category_t momentum;
  dmuon_memory_category_t values;
  dmuon_memory_category_t adam_moments;
  dmuon_memory_category_t grads;
  dmuon_memory_category_t buffers;
} dmuon_memory_report_t;

DMUON_API dmuon_status_t dmuon_runtime_memory(dmuon_runtime_t runtime,
                                             dmuon_memory_report_t *out_report);
/* The plan's figures for this rank in the same categories (live = peak =
 * the figure), for a step in the plan's own mode and replicate setting whose
 * host calls the hooks in forward order and backward in reverse. */
DMUON_API dmuon_status_t dmuon_runtime_planned_memory(dmuon_runtime_t runtime,
                                                     dmuon_memory_report_t *out_report);

/* NS flops this rank ran in steps so far (SOAP and Shampoo matrices: their
 * GEMM and decomposition flops; docs/optimizers.md). */
DMUON_API double dmuon_runtime_ns_flops(dmuon_runtime_t runtime);

#ifdef __cplusplus
}
#endif

#endif /* DMUON_DMUON_H */
