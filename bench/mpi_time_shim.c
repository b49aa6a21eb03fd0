/* A PMPI shim for bench/measured_policies.py --explain: preloaded into a
 * trainer (LD_PRELOAD), it times what the ranks spend in MPI, so that a gap
 * between the simulator and a measured step can be split into its causes.
 *
 * - Non-blocking collectives (the runtime's all-to-alls, all-reduces and
 *   the small all-gathers of its shape checks): from the call that starts
 *   one to the MPI_Test / MPI_Testall that finds it complete. With the
 *   runtime polling every few tens of microseconds, that is the time the
 *   collective occupied its queue.
 * - Blocking calls (communicator set-up, barriers, blocking all-reduces):
 *   wall time inside the call.
 *
 * At MPI_Finalize every rank prints one line per kind on stderr:
 *   moe-mpi-time rank R KIND calls N total_ms T bytes B
 * (B: bytes each rank passed, summed). With MOE_SHIM_RANKS_PER_NODE=K
 * set (world rank = node * K + local rank, as scripts/emulated-cluster.sh
 * launches), the all-to-all-v bytes this rank sends are also split by
 * destination, in two more lines of the same form:
 *   moe-mpi-time rank R ialltoallv_inter_node calls N total_ms 0 bytes B
 *   moe-mpi-time rank R ialltoallv_intra_node calls N total_ms 0 bytes B
 * (intra: other ranks of its node; what a rank sends itself is in
 * neither). Nothing else changes: every call goes on to the MPI library.
 */
#include <stdlib.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

enum { A2A, A2AV, IAR, IAG, IRS, DUP, SPLIT, BARRIER, AR, KINDS };
static const char *names[KINDS] = {"ialltoall", "ialltoallv", "iallreduce",
                                   "iallgather", "ireduce_scatter_block",
                                   "comm_dup", "comm_split", "barrier",
                                   "allreduce"};
static double total[KINDS], bytes[KINDS];
static long calls[KINDS];
static double a2avInter, a2avIntra; /* bytes sent off / within the node */

#define SLOTS 4096
static struct {
  MPI_Request request;
  double start;
  int kind;
} open_[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void opened(MPI_Request r, int kind, double nbytes) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < SLOTS; ++i)
    if (open_[i].request == MPI_REQUEST_NULL || open_[i].request == 0) {
      open_[i].request = r;
      open_[i].start = now();
      open_[i].kind = kind;
      break;
    }
  bytes[kind] += nbytes;
  pthread_mutex_unlock(&lock);
}

static void closed(MPI_Request r) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < SLOTS; ++i)
    if (open_[i].request == r && r != MPI_REQUEST_NULL) {
      total[open_[i].kind] += now() - open_[i].start;
      calls[open_[i].kind]++;
      open_[i].request = MPI_REQUEST_NULL;
      break;
    }
  pthread_mutex_unlock(&lock);
}

static void blocked(int kind, double start) {
  pthread_mutex_lock(&lock);
  total[kind] += now() - start;
  calls[kind]++;
  pthread_mutex_unlock(&lock);
}

static double typeBytes(int count, MPI_Datatype t) {
  int size = 0;
  MPI_Type_size(t, &size);
  return (double)count * size;
}

int MPI_Ialltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                  MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
  int rv = PMPI_Ialltoall(s, sc, st, r, rc, rt, c, q), p = 1;
  MPI_Comm_size(c, &p);
  opened(*q, A2A, typeBytes(sc, st) * p);
  return rv;
}

/* Adds this all-to-all-v's send bytes to a2avInter / a2avIntra by the
 * destination's node (MOE_SHIM_RANKS_PER_NODE; nothing when unset). */
static void splitByNode(const int *sc, MPI_Datatype st, MPI_Comm c, int p) {
  const char *env = getenv("MOE_SHIM_RANKS_PER_NODE");
  int perNode = env ? atoi(env) : 0;
  if (perNode <= 0 || p > 4096)
    return;
  int mine = 0, world[4096], local[4096];
  MPI_Group group, worldGroup;
  MPI_Comm_rank(c, &mine);
  MPI_Comm_group(c, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &worldGroup);
  for (int i = 0; i < p; ++i)
    local[i] = i;
  MPI_Group_translate_ranks(group, p, local, worldGroup, world);
  MPI_Group_free(&group);
  MPI_Group_free(&worldGroup);
  double inter = 0, intra = 0;
  for (int i = 0; i < p; ++i) {
    if (i == mine)
      continue;
    if (world[i] / perNode != world[mine] / perNode)
      inter += typeBytes(sc[i], st);
    else
      intra += typeBytes(sc[i], st);
  }
  pthread_mutex_lock(&lock);
  a2avInter += inter;
  a2avIntra += intra;
  pthread_mutex_unlock(&lock);
}

int MPI_Ialltoallv(const void *s, const int *sc, const int *sd,
                   MPI_Datatype st, void *r, const int *rc, const int *rd,
                   MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
  int rv = PMPI_Ialltoallv(s, sc, sd, st, r, rc, rd, rt, c, q), p = 1;
  MPI_Comm_size(c, &p);
  double n = 0;
  for (int i = 0; i < p; ++i)
    n += typeBytes(sc[i], st);
  opened(*q, A2AV, n);
  splitByNode(sc, st, c, p);
  return rv;
}

int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op o,
                   MPI_Comm c, MPI_Request *q) {
  int rv = PMPI_Iallreduce(s, r, n, t, o, c, q);
  opened(*q, IAR, typeBytes(n, t));
  return rv;
}

int MPI_Iallgather(const void *s, int sc, MPI_Datatype st, void *r, int rc,
                   MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
  int rv = PMPI_Iallgather(s, sc, st, r, rc, rt, c, q);
  opened(*q, IAG, typeBytes(sc, st));
  return rv;
}

int MPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t,
                              MPI_Op o, MPI_Comm c, MPI_Request *q) {
  int rv = PMPI_Ireduce_scatter_block(s, r, n, t, o, c, q), p = 1;
  MPI_Comm_size(c, &p);
  opened(*q, IRS, typeBytes(n, t) * p);
  return rv;
}

int MPI_Test(MPI_Request *q, int *flag, MPI_Status *st) {
  MPI_Request r = *q;
  int rv = PMPI_Test(q, flag, st);
  if (*flag)
    closed(r);
  return rv;
}

int MPI_Testall(int n, MPI_Request *q, int *flag, MPI_Status *st) {
  MPI_Request r[16];
  for (int i = 0; i < n && i < 16; ++i)
    r[i] = q[i];
  int rv = PMPI_Testall(n, q, flag, st);
  if (*flag)
    for (int i = 0; i < n && i < 16; ++i)
      closed(r[i]);
  return rv;
}

int MPI_Comm_dup(MPI_Comm c, MPI_Comm *out) {
  double t = now();
  int rv = PMPI_Comm_dup(c, out);
  blocked(DUP, t);
  return rv;
}

int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *out) {
  double t = now();
  int rv = PMPI_Comm_split(c, color, key, out);
  blocked(SPLIT, t);
  return rv;
}

int MPI_Barrier(MPI_Comm c) {
  double t = now();
  int rv = PMPI_Barrier(c);
  blocked(BARRIER, t);
  return rv;
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op o,
                  MPI_Comm c) {
  double t0 = now();
  int rv = PMPI_Allreduce(s, r, n, t, o, c);
  blocked(AR, t0);
  bytes[AR] += typeBytes(n, t);
  return rv;
}

int MPI_Finalize(void) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int k = 0; k < KINDS; ++k)
    if (calls[k])
      fprintf(stderr, "moe-mpi-time rank %d %s calls %ld total_ms %.3f bytes %.0f\n",
              rank, names[k], calls[k], total[k] * 1e3, bytes[k]);
  if (getenv("MOE_SHIM_RANKS_PER_NODE") && calls[A2AV]) {
    fprintf(stderr, "moe-mpi-time rank %d ialltoallv_inter_node calls %ld "
            "total_ms 0 bytes %.0f\n", rank, calls[A2AV], a2avInter);
    fprintf(stderr, "moe-mpi-time rank %d ialltoallv_intra_node calls %ld "
            "total_ms 0 bytes %.0f\n", rank, calls[A2AV], a2avIntra);
  }
  return PMPI_Finalize();
}
