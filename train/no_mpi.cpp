// A build without MPI (SHAMN_MPI off, or libopenmpi-dev missing): every run is a
// world of one.
#include <cstdlib>

#include "core/check.h"
#include "train/mpi_world.h"

namespace shamn {

bool mpi_available() { return false; }

Communicator* mpi_world_if_launched() {
  SHAMN_INPUT_CHECK(std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr,
                    "this shamn was built without MPI (install libopenmpi-dev and rebuild with "
                    "-DSHAMN_MPI=ON) but was started by an MPI launcher");
  return nullptr;
}

Communicator* mpi_world_if_started() { return nullptr; }

}  // namespace shamn
