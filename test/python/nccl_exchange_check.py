"""dmuon.nccl's unique-id exchange on every rank (mpirun -n 4).

    mpirun -n 4 python3 nccl_exchange_check.py --work DIR

Rank 0's NCCL unique id (dmuon.nccl.unique_id through libdmuon's NCCL
plugin; ncclGetUniqueId needs no GPU; without the plugin, random ids of its
size) must reach every rank byte for byte, over mpi4py, over a
torch.distributed FileStore and over a TCPStore; two keys on one store are
two exchanges; a failure on rank 0 must raise its error on
every rank instead of leaving them waiting; a key that holds something else
is refused. Then, on every rank, the communicator itself: on a machine
without a GPU NcclCommunicator raises ERROR_BACKEND saying there is no usable
CUDA device (without the plugin, that the NCCL backend is not available);
with enough GPUs (one per rank) it is made, a runtime-ready address, and
destroyed. Exits 77 (ctest's skip) without mpi4py or torch.
"""

import argparse
import datetime
import os
import sys

try:
    from mpi4py import MPI
    import torch.distributed as dist
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon
import dmuon.nccl

failures = []
comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()


def check(cond, what):
    # Every rank's verdict, reported once by rank 0 with the failing ranks.
    bad = [r for r, ok in enumerate(comm.allgather(bool(cond))) if not ok]
    if rank == 0:
        print(("ok   " if not bad else f"FAIL (ranks {bad}) ") + what)
    if bad:
        failures.append(what)


def same_as_rank0(value, made):
    """Every rank holds rank 0's `made` id."""
    reference = comm.bcast(made if rank == 0 else None, root=0)
    return len(value) == dmuon.nccl.UNIQUE_ID_BYTES and value == reference


def raises_everywhere(exc_type, needle, fn):
    try:
        fn()
    except exc_type as e:
        return needle in str(e), str(e)
    return False, "raised nothing"


def _has_plugin():
    try:
        dmuon.nccl.unique_id()
        return True
    except dmuon.Error as e:
        if e.status != dmuon.ERROR_UNSUPPORTED:
            raise
        print(f"-    {e}")
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    # Without the plugin (a build without CUDA and NCCL) the exchange is
    # still checked, with random ids of an NCCL id's size.
    plugin = comm.bcast(_has_plugin() if rank == 0 else None, root=0)
    make = dmuon.nccl.unique_id if plugin else lambda: os.urandom(dmuon.nccl.UNIQUE_ID_BYTES)
    made = make() if rank == 0 else None
    other = make() if rank == 0 else None  # a second id, to tell two exchanges apart
    if rank == 0:
        print(f"rank 0's {'NCCL unique id' if plugin else 'random id (no NCCL plugin)'}: "
              f"{made[:8].hex()}... ({len(made)} bytes)")
    check(rank != 0 or other != made, "two ids differ")

    got = dmuon.nccl.broadcast_unique_id(rank, mpi=comm, make=lambda: made)
    check(same_as_rank0(got, made), "over mpi4py: every rank holds rank 0's id")
    got = dmuon.nccl.broadcast_unique_id(rank, mpi=comm, make=make)
    check(len(got) == 128 and comm.allgather(got) == [got] * world,
          "over mpi4py, a fresh id: one id on every rank")

    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, "filestore")
    if rank == 0 and os.path.exists(path):
        os.remove(path)
    comm.Barrier()
    file_store = dist.FileStore(path, world)
    got = dmuon.nccl.broadcast_unique_id(rank, store=file_store, key="a", make=lambda: made)
    got2 = dmuon.nccl.broadcast_unique_id(rank, store=file_store, key="b", make=lambda: other)
    check(same_as_rank0(got, made), "over a FileStore: every rank holds rank 0's id")
    check(same_as_rank0(got2, other), "over the same FileStore, a second key: the second id")

    port = comm.bcast(None, root=0) if rank else None
    if rank == 0:
        # Not waiting for the workers: they learn the port from this rank after.
        tcp = dist.TCPStore("127.0.0.1", 0, world, True, datetime.timedelta(seconds=30),
                            wait_for_workers=False)
        comm.bcast(tcp.port, root=0)
    else:
        tcp = dist.TCPStore("127.0.0.1", port, world, False, datetime.timedelta(seconds=30))
    got = dmuon.nccl.broadcast_unique_id(rank, store=tcp, make=lambda: made)
    check(same_as_rank0(got, made), "over a TCPStore (rank 0 its server): every rank holds it")

    def failing():
        raise dmuon.Error(dmuon.ERROR_BACKEND, "no NCCL here")

    for name, channel in (("mpi4py", {"mpi": comm}), ("the FileStore", {"store": file_store})):
        ok, text = raises_everywhere(
            dmuon.Error, "rank 0 could not make the NCCL unique id: no NCCL here",
            lambda: dmuon.nccl.broadcast_unique_id(rank, key="fails", make=failing, **channel))
        check(ok, f"rank 0 failing over {name}: every rank raises its error ({text})")

    if rank == 0:
        file_store.set("garbage", b"not an id")
    comm.Barrier()
    ok, text = raises_everywhere(
        ValueError, "holds no NCCL unique id",
        lambda: dmuon.nccl.broadcast_unique_id(1, store=file_store, key="garbage"))
    check(ok, f"a key holding something else is refused ({text})")
    ok, text = raises_everywhere(
        ValueError, f"rank={rank + 1} but the mpi4py communicator says {rank}",
        lambda: dmuon.nccl.broadcast_unique_id(rank + 1, mpi=comm))
    check(ok, f"a rank other than the communicator's is refused ({text})")
    ok, text = raises_everywhere(TypeError, "exactly one of",
                                 lambda: dmuon.nccl.broadcast_unique_id(rank))
    check(ok, f"no channel is refused ({text})")

    uid = dmuon.nccl.broadcast_unique_id(rank, mpi=comm, make=make)
    gpus = len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
    if not plugin:
        ok, text = raises_everywhere(dmuon.Error, "the NCCL backend is not available",
                                     lambda: dmuon.nccl.NcclCommunicator(world, rank, uid))
        check(ok, f"no NCCL plugin: NcclCommunicator says so ({text})")
    elif not os.path.exists("/dev/nvidiactl"):
        ok, text = raises_everywhere(dmuon.Error, "no usable CUDA device",
                                     lambda: dmuon.nccl.NcclCommunicator(world, rank, uid))
        check(ok, f"no GPU: NcclCommunicator says so ({text})")
    elif gpus < world:
        if rank == 0:
            print(f"-    {gpus} GPU(s) for {world} ranks: no communicator made")
    else:
        try:
            with dmuon.nccl.NcclCommunicator(world, rank, uid, device=rank) as nccl:
                made_ok = nccl.address != 0 and nccl.rank == rank
            closed = True
        except dmuon.Error as e:
            made_ok, closed = False, str(e)
        check(made_ok and closed is True, f"GPUs: a {world}-rank communicator is made and "
              f"destroyed ({closed})")

    if failures:
        if rank == 0:
            print(f"{len(failures)} check(s) failed")
        return 1
    if rank == 0:
        print("nccl_exchange_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
