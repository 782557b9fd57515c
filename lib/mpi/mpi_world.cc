// implicit::mpi::World(): Communicator over MPI_COMM_WORLD.
#include <implicit/core/mpi.h>

#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace mpi {
namespace {

// MPI counts are int: larger buffers go in pieces.
constexpr Index kChunk = std::numeric_limits<int>::max() / 2;

void Check(int status, const char* what) {
  if (status != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(status, text, &length);
    throw std::runtime_error(std::string("MPI ") + what + " failed: " + std::string(text, length));
  }
}

class WorldCommunicator final : public Communicator {
 public:
  WorldCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      Check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    // Errors come back as return codes (turned into exceptions) instead of aborting.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void SumInPlace(double* data, Index count) const override {
    Reduce(data, count, MPI_DOUBLE, MPI_SUM);
  }
  void SumInPlace(float* data, Index count) const override {
    Reduce(data, count, MPI_FLOAT, MPI_SUM);
  }
  void MaxInPlace(double* data, Index count) const override {
    Reduce(data, count, MPI_DOUBLE, MPI_MAX);
  }
  void Broadcast(double* data, Index count, int root) const override {
    Bcast(data, count, MPI_DOUBLE, root);
  }
  void Broadcast(char* data, Index count, int root) const override {
    Bcast(data, count, MPI_CHAR, root);
  }
  void AllGather(const std::vector<double>& local, std::vector<double>* all) const override {
    if (local.size() > size_t(kChunk)) throw std::length_error("mpi::World().AllGather: too large");
    const int mine = static_cast<int>(local.size());
    std::vector<int> counts(size_), offsets(size_, 0);
    Check(MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD),
          "MPI_Allgather");
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[r] = static_cast<int>(total);
      total += counts[r];
    }
    if (total > kChunk) throw std::length_error("mpi::World().AllGather: too large");
    all->assign(static_cast<size_t>(total), 0.0);
    Check(MPI_Allgatherv(local.data(), mine, MPI_DOUBLE, all->data(), counts.data(),
                         offsets.data(), MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }

 private:
  template <typename T>
  void Reduce(T* data, Index count, MPI_Datatype type, MPI_Op op) const {
    for (Index done = 0; done < count; done += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, count - done));
      Check(MPI_Allreduce(MPI_IN_PLACE, data + done, n, type, op, MPI_COMM_WORLD),
            "MPI_Allreduce");
    }
  }
  template <typename T>
  void Bcast(T* data, Index count, MPI_Datatype type, int root) const {
    for (Index done = 0; done < count; done += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, count - done));
      Check(MPI_Bcast(data + done, n, type, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

bool Available(std::string* reason) {
  if (reason != nullptr) reason->clear();
  return true;
}

const Communicator& World() {
  static const WorldCommunicator world;
  return world;
}

}  // namespace mpi
}  // namespace implicit
