//===- CollectivePlan.h - the arithmetic of a collective --------*- C++ -*-===//
//
// What the MPI path (src/mpi/MpiCollectives.cpp) and the NCCL path
// (src/cuda/NcclCollectives.cpp) compute the same way before they move any
// byte: which communicator class and pool queue a collective uses, a byte
// range as elements, and per-peer counts and offsets of an all-to-all(-v).
// Plain C++ (no MPI, no CUDA), so tests/CollectivePlanTest.cpp runs it on
// any machine. Functions return "" on success or the reason a call is
// refused; callers prefix the public call's name.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_COLLECTIVEPLAN_H
#define MOE_RT_SRC_COLLECTIVEPLAN_H

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace moe_rt::coll {

/// The collective kinds; also the first word of the shape-check signature
/// ranks exchange, so the numbering is part of the wire format.
enum Kind : int64_t {
  AllReduce = 1,
  AllToAll,
  AllToAllV,
  AllGather,
  ReduceScatter,
  Send, // point-to-point (moe_rt_send / moe_rt_recv)
  Recv
};

inline const char *kindName(int64_t k) {
  switch (k) {
  case AllReduce:
    return "all_reduce";
  case AllToAll:
    return "all_to_all";
  case AllToAllV:
    return "all_to_all_v";
  case AllGather:
    return "all_gather";
  case ReduceScatter:
    return "reduce_scatter";
  case Send:
    return "send";
  case Recv:
    return "recv";
  }
  return "collective";
}

/// Communicator classes. All-reduces get their own communicator (MPI and
/// NCCL alike) so that the pool may reorder them against the MoE layer's
/// pipeline (all-to-alls, and FSMoE's all-gather / reduce-scatter) without
/// two ranks matching different operations.
enum class CommClass { AllToAll = 0, AllReduce = 1 };

inline CommClass commClassOf(int64_t kind) {
  return kind == AllReduce ? CommClass::AllReduce : CommClass::AllToAll;
}
inline const char *commClassName(CommClass c) {
  return c == CommClass::AllReduce ? "all-reduce" : "all-to-all";
}
/// Whether the collective goes to the pool's low-priority queue / stream.
inline bool lowPriority(int64_t kind) {
  return commClassOf(kind) == CommClass::AllReduce;
}

struct ElementRange {
  int64_t offset = 0, count = 0; // in elements
};

/// [offsetBytes, offsetBytes + sizeBytes) of a tensor of totalBytes as
/// whole elements of elemBytes; sizeBytes < 0 means the whole tensor.
inline std::string elementRange(int64_t offsetBytes, int64_t sizeBytes,
                                int64_t totalBytes, int64_t elemBytes,
                                ElementRange &out) {
  if (elemBytes <= 0 || totalBytes < 0)
    return "bad element size or tensor size";
  if (sizeBytes < 0) {
    offsetBytes = 0;
    sizeBytes = totalBytes;
  }
  if (offsetBytes < 0 || offsetBytes % elemBytes || sizeBytes % elemBytes ||
      offsetBytes > totalBytes || sizeBytes > totalBytes - offsetBytes)
    return "range [" + std::to_string(offsetBytes) + ", " +
           std::to_string(offsetBytes + sizeBytes) +
           ") is not whole floats inside the tensor's " +
           std::to_string(totalBytes) + " bytes";
  out.offset = offsetBytes / elemBytes;
  out.count = sizeBytes / elemBytes;
  return "";
}

/// Per-peer element counts and offsets of an all-to-all: peer p receives
/// send[sendOffset[p], +sendCount[p]) and this rank writes what p sends to
/// recv[recvOffset[p], +recvCount[p]).
struct PeerPlan {
  std::vector<int64_t> sendCount, sendOffset, recvCount, recvOffset;
};

/// Equal parts along dimension 0 (moe_rt_all_to_all).
inline std::string planAllToAll(int size, int64_t sendNumel, int64_t sendDim0,
                                int64_t recvNumel, PeerPlan &out) {
  if (size < 1)
    return "empty group";
  if (sendNumel != recvNumel || sendDim0 < 0 || sendDim0 % size)
    return "send and recv must have the same size and a dimension 0 "
           "divisible by the group size " +
           std::to_string(size);
  int64_t part = sendNumel / size;
  out = PeerPlan();
  for (int p = 0; p < size; ++p) {
    out.sendCount.push_back(part);
    out.sendOffset.push_back(p * part);
    out.recvCount.push_back(part);
    out.recvOffset.push_back(p * part);
  }
  return "";
}

/// Variable rows (moe_rt_all_to_all_v): sendRows[p] rows of rowSend
/// elements go to p, packed in rank order from row 0; recvRows[p] rows of
/// rowRecv elements come from p. The tensors have sendCapacity /
/// recvCapacity rows.
inline std::string planAllToAllV(int size, const int64_t *sendRows,
                                 const int64_t *recvRows, int64_t rowSend,
                                 int64_t sendCapacity, int64_t rowRecv,
                                 int64_t recvCapacity, PeerPlan &out) {
  if (size < 1)
    return "empty group";
  out = PeerPlan();
  int64_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < size; ++p) {
    if (sendRows[p] < 0 || recvRows[p] < 0)
      return "negative row count";
    out.sendOffset.push_back(sendTotal * rowSend);
    out.sendCount.push_back(sendRows[p] * rowSend);
    out.recvOffset.push_back(recvTotal * rowRecv);
    out.recvCount.push_back(recvRows[p] * rowRecv);
    sendTotal += sendRows[p];
    recvTotal += recvRows[p];
    if (sendTotal > sendCapacity || recvTotal > recvCapacity)
      break; // reported below, before the sums can overflow
  }
  if (rowSend != rowRecv || sendTotal > sendCapacity ||
      recvTotal > recvCapacity)
    return "row counts exceed the tensors or row sizes differ";
  return "";
}

/// Whether every count and offset fits MPI's int arguments.
inline bool fitsInt(const PeerPlan &plan) {
  for (const std::vector<int64_t> *v :
       {&plan.sendCount, &plan.sendOffset, &plan.recvCount, &plan.recvOffset})
    for (int64_t x : *v)
      if (x < 0 || x > std::numeric_limits<int>::max())
        return false;
  return true;
}

/// Point-to-point (moe_rt_send / moe_rt_recv): "" if `peer` may be sent to
/// or received from by `rank` in a group of `size`, else the reason.
inline std::string checkPeer(int size, int rank, int peer) {
  if (peer < 0 || peer >= size)
    return "peer " + std::to_string(peer) + " is not a rank of the group of " +
           std::to_string(size);
  if (peer == rank)
    return "peer " + std::to_string(peer) + " is this rank itself";
  return "";
}

/// The moe_rt_dtype values by name (moe_rt.h's enum; kept here so that this
/// header needs no runtime header).
inline const char *dtypeName(int64_t dtype) {
  static const char *names[] = {"f32", "f16", "bf16", "i32", "i64"};
  return dtype >= 0 && dtype < 5 ? names[dtype] : "unknown dtype";
}

/// What the two sides of a point-to-point transfer announce to each other
/// when shape checks are on: the kind (Send or Recv), bytes and dtype.
struct P2PHeader {
  int64_t kind = 0, bytes = 0, dtype = 0;
};

/// "" if a send announced as `sent` (by rank `sender`) matches the receive
/// announced as `received` (by rank `receiver`), else the message both
/// ranks report, word for word the same on either side.
inline std::string p2pMismatch(int sender, const P2PHeader &sent, int receiver,
                               const P2PHeader &received) {
  if (sent.kind == Send && received.kind == Recv &&
      sent.bytes == received.bytes && sent.dtype == received.dtype)
    return "";
  auto side = [](const P2PHeader &h) {
    return std::string(kindName(h.kind)) + " of " + std::to_string(h.bytes) +
           " B of " + dtypeName(h.dtype);
  };
  return "send/recv mismatch between ranks " + std::to_string(sender) +
         " and " + std::to_string(receiver) + ": rank " +
         std::to_string(sender) + " issued " + side(sent) + " while rank " +
         std::to_string(receiver) + " issued " + side(received);
}

} // namespace moe_rt::coll

#endif // MOE_RT_SRC_COLLECTIVEPLAN_H
