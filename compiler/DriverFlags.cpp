// dmuonc's flags, each bound to its DriverFlags field (support/OptionsBinder.h):
// the struct's initializers are the defaults, and nothing copies a flag.
#include "DriverOptions.h"

using namespace llvm;

namespace dmuon {

namespace {

// The model in, the mesh, and the plan out: where, in which form, after which pass.
void bindInputOutputFlags(DriverFlags &flags, OptionsBinder &binder) {
  binder.opt(flags.input, cl::Positional, cl::desc("<model.onnx|model.toml>"), cl::Required);
  binder.opt(flags.format, "input-format",
             cl::desc("Input format (default: from the file extension)"),
             cl::values(clEnumValN(InputFormat::Toml, "toml", "TOML manifest"),
                        clEnumValN(InputFormat::Onnx, "onnx", "ONNX model")));
  binder.opt(flags.mesh, "mesh",
             cl::desc("Device mesh: '8', '2x4' (dp_replicate x dp_shard), "
                      "'dp_replicate=2,dp_shard=2,tp=2', or 'auto:N[,tp=8...]' to choose "
                      "dp_replicate x dp_shard (and the mode) by simulating on --cluster"),
             cl::value_desc("mesh"), cl::Required);
  binder.opt(flags.output, "o", cl::desc("Output file (default: stdout)"), cl::value_desc("file"));
  binder.opt(flags.emit, "emit", cl::desc("Output form"),
             cl::values(clEnumValN(PlanForm::Binary, "bin", "binary plan (FlatBuffers)"),
                        clEnumValN(PlanForm::Text, "text", "line-oriented text"),
                        clEnumValN(PlanForm::Json, "json", "JSON"),
                        clEnumValN(PlanForm::Html, "html",
                                   "self-contained HTML report (inline CSS and SVG)")));
  binder.opt(flags.stopAfter, "stop-after",
             cl::desc("Stop after a pass and print its state: frontend, select, validate, "
                      "group, partition, hooks or layout (needs --emit=text|json)"),
             cl::value_desc("pass"));
}

// How params are grouped into hook groups, stages and units, which update rule
// each gets, and how the non-matrix params travel.
void bindGroupingFlags(DriverFlags &flags, OptionsBinder &binder) {
  binder.opt(flags.hookBoundary, "hook-boundary",
             cl::desc("Regex: hook on the lowest ancestor module whose path matches "
                      "(default: layers.N / blocks.N / h.N, else the model's repeated "
                      "blocks, else the parent module)"),
             cl::value_desc("regex"));
  binder.opt(flags.pipelineSplit, "pipeline-split",
             cl::desc("The layers of each pipeline stage, one comma-separated item per "
                      "stage: 'layers.0-15,layers.16-31' (default: contiguous runs balanced "
                      "by param elements; needs a pp dim in --mesh)"),
             cl::value_desc("ranges"));
  binder.opt(flags.smallParamThreshold, "small-param-threshold",
             cl::desc("Params with fewer elements merge per layer into one unit"));
  binder.opt(flags.adamwRoute, "adamw-route",
             cl::desc("How the non-Muon params travel (docs/dmuonc.md#routes)"),
             cl::values(clEnumValN(RoutePolicy::by_size, "auto",
                                   "sharded at or above --sharded-threshold elements, else owner "
                                   "(default)"),
                        clEnumValN(RoutePolicy::owner, "owner",
                                   "with the layer's Muon params: owner broadcast / reduce, AdamW "
                                   "on the owner"),
                        clEnumValN(RoutePolicy::sharded, "sharded",
                                   "flat shards over dp_shard: all-gather / reduce-scatter"),
                        clEnumValN(RoutePolicy::replicated, "replicated",
                                   "on every rank, gradients all-reduced"),
                        clEnumValN(RoutePolicy::host, "host",
                                   "the host manages them; the runtime leaves them alone")));
  binder.opt(flags.matrixOptimizer, "matrix-optimizer",
             cl::desc("The update rule of the matrices a manifest names none for"),
             cl::values(clEnumValN(MatrixOptimizer::muon, "muon",
                                   "Newton-Schulz orthogonalized momentum (default)"),
                        clEnumValN(MatrixOptimizer::normuon, "normuon",
                                   "Muon normalized per row by a running second moment"),
                        clEnumValN(MatrixOptimizer::soap, "soap",
                                   "Adam in the eigenbasis of Shampoo's statistics"),
                        clEnumValN(MatrixOptimizer::shampoo, "shampoo",
                                   "Shampoo's inverse fourth roots, grafted onto Adam")));
  binder.list(flags.nsSplits, "ns-split",
              cl::desc("Orthogonalize the matrices whose names match REGEX as blocks: SPEC is "
                       "[rows:|cols:]N (N equal blocks) or [rows:|cols:]a,b,... (their sizes); "
                       "may be repeated, the first match wins"),
              cl::value_desc("REGEX=SPEC"));
  binder.opt(flags.splitInProj, "split-in-proj",
             cl::desc("Orthogonalize a fused attention in_proj_weight [3E, E] "
                      "(nn.MultiheadAttention) as its Q, K and V rows (default true)"));
  binder.opt(flags.strictNames, "strict-names",
             cl::desc("An ONNX initializer whose torch parameter name cannot be recovered (a "
                      "constant-folded export) is an error, not a warning"));
  binder.opt(flags.shardedThreshold, flags.shardedThresholdGiven, "sharded-threshold",
             cl::desc("With --adamw-route=auto, non-Muon params with at least this many elements "
                      "are sharded"));
  binder.opt(flags.muonInclude, "muon-include", cl::desc("Regex of param names forced onto Muon"),
             cl::value_desc("regex"));
  binder.opt(flags.muonExclude, "muon-exclude", cl::desc("Regex of param names forced onto AdamW"),
             cl::value_desc("regex"));
}

// What the runtime does with the packed buffers.
void bindRuntimeFlags(DriverFlags &flags, OptionsBinder &binder) {
  binder.opt(flags.mode, flags.modeGiven, "mode", cl::desc("Packed-buffer lifetime"),
             cl::values(clEnumValN(Mode::z3, "z3", "reshard after forward (ZeRO-3)"),
                        clEnumValN(Mode::z2, "z2", "keep packed buffers (ZeRO-2)")));
  binder.opt(flags.replicateAsync, "replicate-async",
             cl::desc("Overlap the post-step replicate broadcast with the next forward"));
  binder.opt(flags.alignment, "alignment",
             cl::desc("Byte alignment of each param in a packed buffer"));
}

// What the partition balances, and the device and cluster the plan is checked
// against (or, with --mesh auto, simulated on).
void bindCostFlags(DriverFlags &flags, OptionsBinder &binder) {
  binder.opt(flags.costModel, flags.costModelGiven, "cost-model",
             cl::desc("What the partition balances"),
             cl::values(clEnumValN(CostModel::flops, "flops",
                                   "Newton-Schulz flops of each matrix (default)"),
                        clEnumValN(CostModel::table, "table",
                                   "measured NS seconds per matrix shape (--cost-table)")));
  binder.opt(flags.costTable, "cost-table",
             cl::desc("CSV 'rows,cols,seconds' of measured NS times per matrix shape "
                      "(implies --cost-model=table)"),
             cl::value_desc("file"));
  binder.opt(flags.dataCarryingDims, "data-carrying-dims",
             cl::desc("Model-parallel mesh dims whose ranks see different tokens, comma-separated "
                      "(default: ep and cp; '' for none)"),
             cl::value_desc("dims"));
  binder.opt(flags.deviceMemory, "device-memory",
             cl::desc("Check every rank's memory in the plan against a device of this size (80GiB, "
                      "141GB, bytes) and warn where it does not fit"),
             cl::value_desc("size"));
  binder.opt(
      flags.cluster, "cluster",
      cl::desc("Check every rank's memory against the [device] memory of a cluster description "
               "(docs/cluster-format.md); with --mesh auto:N, the cluster the candidates are "
               "simulated on"),
      cl::value_desc("cluster.toml"));
  binder.opt(flags.pipelineSchedule, "pipeline-schedule",
             cl::desc("With --mesh auto:N,pp=P, the pipeline schedule the candidates are simulated "
                      "with (1f1b or gpipe; default the cluster's [pipeline] schedule)"),
             cl::value_desc("1f1b|gpipe"));
  binder.opt(flags.microBatches, "micro-batches",
             cl::desc("With --mesh auto:N,pp=P, the micro-batches the candidates are simulated "
                      "with (1 to 65536; default the cluster's [pipeline] micro_batches)"),
             cl::value_desc("M"));
}

// The passes' own reports and checks.
void bindPassFlags(DriverFlags &flags, OptionsBinder &binder) {
  binder.opt(flags.timePasses, "time-passes", cl::desc("Time each pass and print a report"));
  binder.opt(flags.verifyEach, "verify-each",
             cl::desc("Verify the plan of every stage with the readers' verifier "
                      "(the final plan is always verified)"));
}

// The update rules' hyper-parameters.
void bindOptimizerFlags(DriverFlags &flags, OptionsBinder &binder) {
// One flag per scheduled hyper-parameter (common/HyperParams.def).
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  binder.opt(flags.camel, flag, cl::desc(help));
#include "common/HyperParams.def"
  binder.opt(flags.nesterov, "nesterov", cl::desc("Nesterov momentum"));
  binder.opt(flags.nsSteps, "ns-steps", cl::desc("Newton-Schulz iterations"));
  binder.opt(flags.polarExpress, "polar-express",
             cl::desc("Use the Polar Express per-iteration coefficients"));
  binder.opt(flags.matchRmsAdamW, "match-rms-adamw",
             cl::desc("LR scale 0.2*sqrt(max(m,n)) instead of sqrt(max(1,m/n))"));
  binder.opt(flags.soapPreconditionFrequency, "soap-precondition-frequency",
             cl::desc("Steps between SOAP's eigenbasis refreshes"));
  binder.opt(flags.soapMaxPrecondDim, "soap-max-precond-dim",
             cl::desc("SOAP leaves a matrix side longer than this unrotated"));
  binder.opt(flags.shampooPreconditionFrequency, "shampoo-precondition-frequency",
             cl::desc("Steps between Shampoo's inverse-root refreshes (also its first "
                      "preconditioned step)"));
  binder.opt(flags.shampooMaxPreconditionerDim, "shampoo-max-preconditioner-dim",
             cl::desc("Shampoo leaves a matrix side longer than this unpreconditioned"));
  binder.opt(flags.staggerRefreshes, "stagger-refreshes",
             cl::desc("Spread SOAP's and Shampoo's basis refreshes over the steps of their "
                      "period (default true; false: every matrix refreshes on the same step)"));
  binder.opt(
      flags.qkClipTau, "qk-clip-tau",
      cl::desc("QK-Clip threshold on the per-head max attention logit (manifest qk_clip pairs)"));
}

} // namespace

void bindDriverFlags(DriverFlags &flags, OptionsBinder &binder, cl::OptionCategory &main,
                     cl::OptionCategory &optimizer) {
  binder.setCategory(main);
  bindInputOutputFlags(flags, binder);
  bindGroupingFlags(flags, binder);
  bindRuntimeFlags(flags, binder);
  bindCostFlags(flags, binder);
  bindPassFlags(flags, binder);
  binder.setCategory(optimizer);
  bindOptimizerFlags(flags, binder);
}

} // namespace dmuon
