// launch_hello_mpi: the MPI side of "launch to first allreduce" (bench/peers/compare.py):
// MPI_Init, one MPI_Allreduce of one int (each rank's rank + 1), a check of the sum,
// MPI_Finalize. launch_hello_hvd.cc does exactly the same through hvd.
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int v = rank + 1;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (v != n * (n + 1) / 2) {
    std::fprintf(stderr, "launch_hello_mpi: rank %d: allreduce gave %d (want %d)\n", rank, v,
                 n * (n + 1) / 2);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
