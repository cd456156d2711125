"""Communicators for staging, as NVIDIA's DeepCAM stager builds them (comm.init_split).

The job's ranks form instances (independent training jobs) of `instance_size` consecutive
ranks. Each instance keeps its own full copy of the dataset on node-local storage, written by
the instance's ranks on that node: the p-th of the P instance ranks on a node writes every P-th
file. All ranks with the same p - in every instance and on every node - need exactly the same
files, so they form the "orthogonal" communicator: each member reads 1/S of those files from
the global directory and the members exchange the bytes. Each source file is read once.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass


def node_name() -> str:
    """This rank's node. HARNESS_NODE overrides it so tests can lay several "nodes" on one host."""
    return os.environ.get("HARNESS_NODE") or socket.gethostname()


@dataclass
class Layout:
    world: object          # MPI communicator over all ranks (a dup of COMM_WORLD)
    instance: int          # which instance this rank belongs to
    instance_rank: int
    node: str
    node_rank: int         # p: index among this instance's ranks on this node
    node_ranks: int        # P: this instance's ranks on this node (the same on every node)
    node_comm: object      # this instance's ranks on this node
    orth: object           # ranks with the same p across instances and nodes (size S)


def build(comm, instance_size: int) -> Layout:
    from workloads.errors import BadInput

    world = comm.Dup()
    if instance_size < 1 or world.size % instance_size:
        raise BadInput(f"instance size {instance_size} does not divide the {world.size} ranks")
    instance, irank = divmod(world.rank, instance_size)
    inst = world.Split(color=instance, key=irank)
    node = node_name()
    names = inst.allgather(node)
    node_comm = inst.Split(color=sorted(set(names)).index(node), key=irank)
    counts = set(world.allgather(node_comm.size))
    inst.Free()
    if len(counts) != 1:
        raise BadInput(f"instances have {sorted(counts)} ranks per node; staging needs the same count on every node")
    orth = world.Split(color=node_comm.rank, key=world.rank)
    return Layout(world, instance, irank, node, node_comm.rank, node_comm.size, node_comm, orth)
