//===- PointToPoint.h - send / recv over MPI --------------------*- C++ -*-===//
//
// moe_rt_send / moe_rt_recv on a CPU stream use the group's p2p MPI
// communicator, which no collective uses, so a transfer never matches a
// collective whatever the pool reorders. MPI matches the messages of one
// (communicator, source, tag) in the order they were sent
// (non-overtaking), so the n-th send from a rank to a peer meets the
// peer's n-th recv from that rank: no sequence numbers are needed. The
// shape-check headers travel on one tag per direction, so that two ranks
// sending to each other at once never match a send's header with a
// recv's; the data on a third; the NCCL pair id (CUDA) on a fourth.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_MPI_POINTTOPOINT_H
#define MOE_RT_SRC_MPI_POINTTOPOINT_H

#include "../CollectivePlan.h"
#include "Communicator.h"

#include <memory>
#include <string>

namespace moe_rt::mpi {

enum P2PTag : int {
  HeaderToReceiver = 1,
  HeaderToSender = 2,
  P2PData = 3,
  NcclPairId = 4
};

/// One side of a transfer and the buffers MPI writes while it runs (kept
/// alive in the group's orphans if it times out).
struct P2PTransfer {
  bool sending = false;
  int peer = -1;
  void *data = nullptr;
  int64_t bytes = 0, dtype = 0;
  coll::P2PHeader mine, theirs;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};

  std::string what() const {
    return (sending ? "send to rank " : "recv from rank ") +
           std::to_string(peer);
  }
  /// Sends this side's header, receives the peer's.
  int postHeaders(MPI_Comm comm) {
    mine.kind = sending ? coll::Send : coll::Recv;
    mine.bytes = bytes;
    mine.dtype = dtype;
    static_assert(sizeof(coll::P2PHeader) == 3 * sizeof(int64_t), "wire format");
    int rc = MPI_Isend(&mine, 3, MPI_INT64_T, peer,
                       sending ? HeaderToReceiver : HeaderToSender, comm,
                       &requests[0]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Irecv(&theirs, 3, MPI_INT64_T, peer,
                     sending ? HeaderToSender : HeaderToReceiver, comm,
                     &requests[1]);
    return rc;
  }
  /// The same message on both ranks if the headers disagree.
  std::string mismatch(int rank) const {
    return sending ? coll::p2pMismatch(rank, mine, peer, theirs)
                   : coll::p2pMismatch(peer, theirs, rank, mine);
  }
  /// The data. A synchronous send (MPI_Issend) completes only once the
  /// peer's recv has matched it, whatever the size, so a send behaves the
  /// same on MPI as on NCCL (where it waits for the recv) and a wrong call
  /// order shows up at once instead of only past MPI's eager limit.
  int postData(MPI_Comm comm) {
    requests[1] = MPI_REQUEST_NULL;
    return sending ? MPI_Issend(data, int(bytes), MPI_BYTE, peer, P2PData,
                                comm, &requests[0])
                   : MPI_Irecv(data, int(bytes), MPI_BYTE, peer, P2PData,
                               comm, &requests[0]);
  }
  /// After a timeout: best-effort cancel (a recv must not write the tensor
  /// later), then keep the buffers alive with the group.
  static void orphan(moe_rt_comm_impl &c, std::shared_ptr<P2PTransfer> t) {
    for (MPI_Request &r : t->requests)
      if (r != MPI_REQUEST_NULL)
        MPI_Cancel(&r);
    std::lock_guard<std::mutex> lock(c.mutex);
    c.orphans.push_back(std::move(t));
  }
};

/// Queues one side of a transfer on a CPU stream as non-blocking steps
/// ([header exchange,] data, each tested to the group's timeout) in a
/// pool's high-priority queue.
/// The error of a send/recv on a solo group (Communicator.h): no peer.
moe_rt_status refuseSolo(const P2PTransfer &t);

moe_rt_status queueTransfer(moe_rt_stream stream, moe_rt_comm comm,
                            std::shared_ptr<P2PTransfer> t);

} // namespace moe_rt::mpi

#endif // MOE_RT_SRC_MPI_POINTTOPOINT_H
