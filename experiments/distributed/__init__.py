"""MPI memory and bytes studies: ``python -m experiments.distributed.comm_and_memory``, ..."""
