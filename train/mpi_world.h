#pragma once
// The MPI back end of train/communicator.h. With SHAMN_MPI off, or when no
// launcher (mpirun, srun) started this process, there is no MPI world.
#include "train/communicator.h"

namespace shamn {

// MPI_COMM_WORLD, initialised on the first call, when a launcher started this
// process; null otherwise.
Communicator* mpi_world_if_launched();
// The MPI world if mpi_world_if_launched() created one, else null (never initialises).
Communicator* mpi_world_if_started();

}  // namespace shamn
