/*===- collectives.h - collectives on groups of ranks ----------*- C -*-===*
 *
 * The CPU backend's collectives over MPI (OpenMPI), queued on streams like
 * any task. Every collective is bounded by the communicator's timeout: a
 * rank that dies or stops responding makes the others fail within it, with
 * an error that names the ranks that did not answer a liveness probe. With
 * shape checks on, ranks first exchange each collective's kind and size and
 * report a mismatch instead of corrupting memory or hanging.
 *
 * On CUDA streams with CUDA tensors (runtime built with CUDA) the same
 * calls run with NCCL on the stream: all-reduces on a communication pool's
 * low-priority stream, the rest on its high-priority one. The group's NCCL
 * communicators (one for all-to-alls, one for all-reduces, as below) are
 * created on first CUDA use, on the calling thread's current device, by
 * every rank of the group at the same call. Shape checks exchange kind and
 * size over MPI when the call is made; a CUDA stream's synchronize that
 * times out, or a communicator's asynchronous error, aborts the NCCL
 * communicator and names the group and the ranks that did not answer.
 *
 * All-to-alls and all-reduces use separate MPI communicators, so the
 * communication pool (moe_rt_stream_create_pool) may reorder one class
 * against the other without ranks deadlocking; all-reduces are queued in the
 * pool's low-priority queue.
 * Point-to-point send / recv (below) use a fourth communicator of their own.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOE_RT_COLLECTIVES_H
#define MOE_RT_COLLECTIVES_H

#include "moe_rt/moe_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct moe_rt_comm_impl *moe_rt_comm;

/* Initialises MPI with thread support (streams call it from their workers)
 * unless the caller already has. A process no MPI launcher started (no
 * OMPI_COMM_WORLD_SIZE / PMIX_RANK / PMI_RANK / PMI_SIZE) is one rank and
 * runs without MPI ("solo": its collectives are local copies), which skips
 * MPI's singleton start-up; MOE_RT_MPI_SINGLETON=1 initialises MPI anyway.
 * Finalize and abort then need no MPI either. */
moe_rt_status moe_rt_mpi_init(int *argc, char ***argv);
moe_rt_status moe_rt_mpi_finalize(void);
/* Ends every rank of the job: what a trainer does after a collective failed,
 * so that no rank waits on a dead peer. */
void moe_rt_mpi_abort(int code);

/* All ranks. timeout_s > 0 bounds each collective; check_shapes != 0
 * exchanges kind and size before each. */
moe_rt_status moe_rt_comm_create_world(double timeout_s, int check_shapes,
                                       moe_rt_comm *out);
/* Ranks with the same color form a group (MPI_Comm_split), ordered by rank.*/
moe_rt_status moe_rt_comm_split(moe_rt_comm parent, int color,
                                moe_rt_comm *out);
/* Ends the signature exchange on `comm` and on every group split from it
 * (before or after this call). A compiled step issues the same collectives
 * with the same sizes every step, so the first step's checks prove later
 * steps' signatures; moe-run and generated steps call this after the first
 * step unless asked to check every step (docs/runtime/collectives.md).
 * Every rank must call it at the same step boundary. */
moe_rt_status moe_rt_comm_end_shape_checks(moe_rt_comm comm);
/* 1 while `comm` exchanges signatures before its collectives. */
int moe_rt_comm_checks_shapes(moe_rt_comm comm);
moe_rt_status moe_rt_comm_destroy(moe_rt_comm comm);
int moe_rt_comm_rank(moe_rt_comm comm);
int moe_rt_comm_size(moe_rt_comm comm);
/* The timeout the group was created with (<= 0: none): what a host wait
 * on its collectives' results is bounded by. */
double moe_rt_comm_timeout(moe_rt_comm comm);
/* This process's rank among the group's processes on its node, and their
 * number (MPI_Comm_split_type SHARED): which GPU a rank takes
 * (moe_rt_cuda_select_device). Collective over the group. */
moe_rt_status moe_rt_comm_node_rank(moe_rt_comm comm, int *local_rank,
                                    int *local_size);

/* Sums `tensor` (F32) over the group in place; with size_bytes >= 0 only the
 * byte range [offset_bytes, offset_bytes + size_bytes) (a FlowMoE chunk).
 * Queued as a low-priority task on a pool stream. */
moe_rt_status moe_rt_all_reduce(moe_rt_stream stream, moe_rt_comm comm,
                                moe_rt_tensor *tensor, int64_t offset_bytes,
                                int64_t size_bytes);
/* Equal parts along dimension 0: part j of `send` goes to rank j, part i of
 * `recv` comes from rank i. */
moe_rt_status moe_rt_all_to_all(moe_rt_stream stream, moe_rt_comm comm,
                                const moe_rt_tensor *send, moe_rt_tensor *recv);
/* Variable counts, in rows of dimension 0 (dropless dispatch). The arrays
 * have one entry per rank and are read when the call is made. */
moe_rt_status moe_rt_all_to_all_v(moe_rt_stream stream, moe_rt_comm comm,
                                  const moe_rt_tensor *send,
                                  const int64_t *send_rows, moe_rt_tensor *recv,
                                  const int64_t *recv_rows);
/* recv = concatenation of every rank's send along dimension 0. */
moe_rt_status moe_rt_all_gather(moe_rt_stream stream, moe_rt_comm comm,
                                const moe_rt_tensor *send, moe_rt_tensor *recv);
/* recv = this rank's part (dimension 0) of the sum of every rank's send. */
moe_rt_status moe_rt_reduce_scatter(moe_rt_stream stream, moe_rt_comm comm,
                                    const moe_rt_tensor *send,
                                    moe_rt_tensor *recv);

/* Point-to-point: `tensor`'s bytes to / from rank `peer` of the group
 * (its rank in `comm`, not this rank). Any dtype, a CPU tensor on a CPU
 * stream or a CUDA tensor on a CUDA stream; a pool queues both in its
 * high-priority queue (CUDA: its high-priority stream). The n-th send from
 * rank a to rank b meets b's n-th recv from a (MPI's non-overtaking order
 * on the group's own point-to-point communicator; NCCL's order on a
 * two-rank communicator of the pair, created by both at their first CUDA
 * transfer), as issued on each rank — keep one stream per direction and
 * peer if the order matters. A send completes only once the peer's recv
 * has matched it (MPI_Issend; ncclSend): in a ring on one in-order stream
 * per rank, let even ranks send first and odd ranks receive first, or use
 * a stream for sends and another for recvs. Bounded by the communicator's
 * timeout: an error names the peer that did not respond (no matching call,
 * dead or stuck) and marks the communicator failed. With shape checks the
 * two sides exchange kind, size and dtype first, and a mismatch fails both
 * (MOE_RT_INVALID_ARGUMENT, the same message) before any data moves;
 * without them a recv that gets a different size still fails. NULL
 * arguments, a peer outside the group or equal to this rank, and a tensor
 * on the other backend are MOE_RT_INVALID_ARGUMENT. */
moe_rt_status moe_rt_send(moe_rt_stream stream, moe_rt_comm comm,
                          const moe_rt_tensor *tensor, int peer);
moe_rt_status moe_rt_recv(moe_rt_stream stream, moe_rt_comm comm,
                          moe_rt_tensor *tensor, int peer);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_RT_COLLECTIVES_H */
