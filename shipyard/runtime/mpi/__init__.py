"""The `mpi` strategy's processes inside the instances (runtime/launchers/mpi.py plans them): the leader's
mpirun wrapper (leader.py) and its output reader (output.py), mpirun's remote agent in place of ssh
(rsh.py), the workers' side that starts orted (worker.py), the leader's files where mpi.rsh leaves its
requests (rendezvous.py) and the mailbox that serves them to the workers over the network (mailbox.py)."""

# A secret the instances of one job share, which they inherit from the job's controller (control/controller.py
# sets it; on Ray it travels to the nodes with the other SHIPYARD_* variables): the mpi mailbox's key.
SECRET_ENV = "SHIPYARD_JOB_SECRET"
# The leader's mailbox port, which the mpi launcher chooses in the job's span.
PORT_ENV = "SHIPYARD_MPI_MAILBOX_PORT"
