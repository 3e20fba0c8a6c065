// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// An MPI program of two ranks for the vm_stacks test: ping-pong latency (8
// bytes), one-way bandwidth (1 MiB messages) and an MPI_Allreduce (sum) of
// 64 MiB of doubles whose every element is checked. Rank 0 prints one JSON
// line; the exit status is 0 only when the data verified.
//
//   mpi_check [PINGPONGS [MESSAGES [ALLREDUCE_MIB]]]   (default 200 32 64)
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_check: needs exactly 2 ranks, not %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int pingpongs = argc > 1 ? atoi(argv[1]) : 200;
  const int messages = argc > 2 ? atoi(argv[2]) : 32;
  const long mib = argc > 3 ? atol(argv[3]) : 64;
  const int peer = 1 - rank;

  char small[8] = {0};
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < pingpongs; ++i) {
    if (rank == 0) {
      MPI_Send(small, sizeof small, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(small, sizeof small, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(small, sizeof small, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(small, sizeof small, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
    }
  }
  const double latency_us = (MPI_Wtime() - t0) / (2.0 * pingpongs) * 1e6;

  const size_t message = 1 << 20;
  char* buf = malloc(message);
  memset(buf, rank + 1, message);
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (int i = 0; i < messages; ++i) {
    if (rank == 0) MPI_Send(buf, (int)message, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
    else MPI_Recv(buf, (int)message, MPI_CHAR, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  if (rank == 1) MPI_Send(small, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
  else MPI_Recv(small, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const double bandwidth_mbps = (double)messages * (double)message * 8 / (MPI_Wtime() - t0) / 1e6;
  free(buf);

  const size_t count = (size_t)mib * (1 << 20) / sizeof(double);
  double* in = malloc(count * sizeof(double));
  double* out = malloc(count * sizeof(double));
  if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 3);
  for (size_t i = 0; i < count; ++i) in[i] = (double)((i % 1000) * (rank + 1) + rank);
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double allreduce_s = MPI_Wtime() - t0;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != (double)((i % 1000) * 3 + 1)) ++wrong;  // rank 0's + rank 1's
  size_t wrong_total = 0;
  MPI_Reduce(&wrong, &wrong_total, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  free(in);
  free(out);
  if (rank == 0)
    printf("{\"latency_us\":%.1f,\"bandwidth_mbps\":%.1f,\"allreduce_mib\":%ld,\"allreduce_s\":%.2f,\"verified\":%s}\n",
           latency_us, bandwidth_mbps, mib, allreduce_s, wrong_total == 0 ? "true" : "false");
  MPI_Finalize();
  return wrong_total == 0 ? 0 : 1;
}
