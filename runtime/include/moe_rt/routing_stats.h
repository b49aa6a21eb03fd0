/*===- routing_stats.h - what the gates routed, every step -------*- C -*-===*
 *
 * Routing statistics in the step (docs/load-aware.md §1): per MoE block and
 * micro-batch, the samples x experts token counts of the whole batch
 * (NetMoE Eq. 2's num), on every rank. moe.routing_counts computes them
 * with moe_rt_routing_counts; a routing log collects them per step, writes
 * them as a routing trace (docs/routing-trace-format.md) and gives the
 * step's balance line. moe-run --routing-trace and generated steps
 * (moe_step_set_routing_trace, step_support.h) both use it.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_ROUTING_STATS_H
#define MOE_RT_ROUTING_STATS_H

#include "moe_rt/collectives.h"
#include "moe_rt/moe_rt.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Which dispatch the counts belong to, and the grid they were gathered on
 * (nodes x ranks per node: the trace's grid; rank r sits on node
 * r / ranks_per_node). */
typedef struct moe_rt_routing_site {
  int64_t block;          /* the model's block index l */
  int64_t micro;          /* the micro-batch r */
  int64_t experts;        /* E */
  int64_t nodes;          /* grid axis 0 of the group */
  int64_t ranks_per_node; /* the product of the group's other axes */
} moe_rt_routing_site;

/* Per step, the statistics of every moe.routing_counts call (opaque). */
typedef struct moe_rt_routing_log moe_rt_routing_log;

/* out (G*B x E, I64) = on every rank of `comm`, the per-sample expert
 * counts of every rank's token-choice `indices` (B x N x k, I64): row
 * j*B + b is sample b of group rank j, column e the tokens it routed to
 * expert e (before capacity). Queued on `s` (a pool stream): a counting
 * task, then the group's all-gather. With a non-NULL `log`, the gathered
 * matrix is added to the log's running step once it has arrived. An index
 * outside [0, E) fails the stream after the all-gather (no peer is left
 * waiting). On a CUDA stream (CUDA tensors) it runs staged: it waits for
 * the stream, counts on the host (the same CPU call, on a CPU stream of
 * its own) and copies the result back before returning. */
moe_rt_status moe_rt_routing_counts(moe_rt_stream s, moe_rt_comm comm,
                                    moe_rt_routing_log *log,
                                    const moe_rt_routing_site *site,
                                    const moe_rt_tensor *indices,
                                    moe_rt_tensor *out);

moe_rt_routing_log *moe_rt_routing_log_create(void);
/* Closes the trace (writing its end line) and frees the log. */
void moe_rt_routing_log_destroy(moe_rt_routing_log *log);
/* Records every step's counts to the routing trace `path` from now on;
 * `source` goes to its source line. One rank writes (every rank holds the
 * same matrices). The header is written with the first step. */
moe_rt_status moe_rt_routing_log_open_trace(moe_rt_routing_log *log,
                                            const char *path,
                                            const char *source);
/* After training step `step` has synchronised: writes its records in
 * (micro, block) order to the trace, if one is open, and makes the step's
 * balance line. A step without counts leaves an empty line. */
moe_rt_status moe_rt_routing_log_end_step(moe_rt_routing_log *log,
                                          int64_t step);
/* "step S balance: tokens/rank max/mean X (block l), tokens/expert
 * max/mean Y (block l)" — the worst (micro-batch, block) of the last
 * ended step — or "" when it had no counts. Valid until the next
 * end_step. */
const char *moe_rt_routing_log_balance(const moe_rt_routing_log *log);
/* The expert placement (expert -> rank, `experts` entries) of MoE block
 * `block` (-1: every block, replacing the blocks' own) that the per-rank
 * loads and the trace's expert-ranks follow, for blocks of that many
 * experts; unset (or 0 entries): E/G consecutive experts per rank. */
moe_rt_status moe_rt_routing_log_set_expert_ranks(moe_rt_routing_log *log,
                                                  int64_t block,
                                                  const int64_t *ranks,
                                                  int64_t experts);
/* Writes the trace's end line; an error when the file could not be
 * written. Later steps are not recorded. */
moe_rt_status moe_rt_routing_log_close(moe_rt_routing_log *log);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_RT_ROUTING_STATS_H */
