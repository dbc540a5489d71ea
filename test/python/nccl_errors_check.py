"""dmuon.nccl's refusals, in one process; no GPU needed.

    python3 nccl_errors_check.py

Bad arguments are refused by libdmuon before the NCCL plugin is loaded, each
naming the value. Then a copy of libdmuon with no libdmuon-nccl.so beside it
(a build without CUDA and NCCL, as far as the library can tell): making a
unique id, a communicator or an NCCL runtime raises ERROR_UNSUPPORTED saying
the NCCL backend is not available, and over a store every rank gets rank
0's error.
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

import dmuon
import dmuon.nccl
from dmuon import _capi

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def raises(exc_type, needle, fn, *args, status=None, **kw):
    try:
        fn(*args, **kw)
    except exc_type as e:
        ok = needle in str(e) and (status is None or e.status == status)
        check(ok, f"{getattr(fn, '__name__', fn)}: {type(e).__name__}: {e}")
        return
    check(False, f"{getattr(fn, '__name__', fn)} raised nothing (expected '{needle}')")


def check_arguments():
    uid = bytes(dmuon.nccl.UNIQUE_ID_BYTES)
    invalid = dmuon.ERROR_INVALID_ARGUMENT
    make = dmuon.nccl.NcclCommunicator
    raises(dmuon.Error, "rank 4 is outside [0, 4) for world_size 4", make, 4, 4, uid,
           status=invalid)
    raises(dmuon.Error, "rank -1 is outside [0, 2)", make, 2, -1, uid, status=invalid)
    raises(dmuon.Error, "world_size is 0", make, 0, 0, uid, status=invalid)
    raises(dmuon.Error, "device is -2", make, 1, 0, uid, device=-2, status=invalid)
    raises(ValueError, "is 127 bytes, not the 128 bytes", make, 1, 0, bytes(127))
    raises(ValueError, "is str, not the 128 bytes", make, 1, 0, "x" * 128)
    raises(TypeError, "rank must be an int", make, 1, 0.0, uid)

    # The C ABI's own size checks, under the binding's.
    buffer = ctypes.create_string_buffer(200)
    st = _capi.lib.dmuon_nccl_unique_id(buffer, 127)
    message = _capi.lib.dmuon_last_error().decode()
    check(st == invalid and "id_size is 127" in message and "(128) bytes" in message,
          f"dmuon_nccl_unique_id(id_size 127): {message}")
    st = _capi.lib.dmuon_nccl_unique_id(None, 128)
    check(st == invalid and "out_id is null" in _capi.lib.dmuon_last_error().decode(),
          "dmuon_nccl_unique_id(null): refused")
    st = _capi.lib.dmuon_nccl_comm_destroy(None)
    check(st == invalid, "dmuon_nccl_comm_destroy(null): refused")
    never_made = ctypes.c_void_p()
    st = _capi.lib.dmuon_nccl_comm_destroy(ctypes.byref(never_made))
    check(st == dmuon.SUCCESS, "dmuon_nccl_comm_destroy of a null communicator: nothing to do")

    plan = None  # Runtime checks its NCCL arguments before touching the plan's handle
    raises(TypeError, "the NCCL backend takes a dmuon.nccl.NcclCommunicator", dmuon.Runtime,
           plan, "comm", backend=dmuon.BACKEND_NCCL)
    raises(TypeError, "the NCCL backend takes stream=", dmuon.Runtime, plan, 1234, rank=0,
           backend=dmuon.BACKEND_NCCL)


# Run in a child whose libdmuon has no plugin beside it.
_WITHOUT_PLUGIN = r"""
import sys, torch.distributed as dist, dmuon, dmuon.nccl
print(dmuon.library_path)
out = []
for what, fn in (("unique_id", dmuon.nccl.unique_id),
                 ("NcclCommunicator", lambda: dmuon.nccl.NcclCommunicator(1, 0, bytes(128))),
                 ("broadcast_unique_id over a HashStore",
                  lambda: dmuon.nccl.broadcast_unique_id(0, store=dist.HashStore()))):
    try:
        fn()
        print(f"{what}: no error")
    except dmuon.Error as e:
        print(f"{what}: status {e.status}: {e.message}")
"""


def check_without_plugin():
    library = os.path.realpath(_capi.library_path)
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "libdmuon.so")
        shutil.copy(library, copy)
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        env["DMUON_LIBRARY"] = copy
        run = subprocess.run([sys.executable, "-c", _WITHOUT_PLUGIN], capture_output=True,
                             text=True, env=env, cwd=tmp, timeout=60)
    lines = run.stdout.splitlines()
    check(run.returncode == 0 and lines and lines[0] == copy,
          f"the child loads the plugin-less copy ({run.stdout.strip()} {run.stderr.strip()})")
    unsupported = f"status {dmuon.ERROR_UNSUPPORTED}: "
    for line in lines[1:]:
        check(unsupported in line and "the NCCL backend is not available: cannot load "
              "libdmuon-nccl.so" in line and "build dmuon with CUDA and NCCL" in line, line)
    check(len(lines) == 4 and "rank 0 could not make the NCCL unique id" in lines[3],
          "over a store, rank 0's failure is every rank's error")


def main():
    check_arguments()
    try:
        import torch.distributed  # noqa: F401
        check_without_plugin()
    except ImportError as e:
        print(f"-    no torch.distributed ({e}): the plugin-less check is not run")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("nccl_errors_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
