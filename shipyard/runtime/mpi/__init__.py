"""The `mpi` strategy's processes inside the instances (runtime/launchers/mpi.py plans them): the leader's
mpirun wrapper (leader.py) and its output reader (output.py), mpirun's remote agent in place of ssh
(rsh.py), the workers' side that starts orted (worker.py), and the files where they meet
(rendezvous.py)."""
