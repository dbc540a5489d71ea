"""The binding's calls and error paths, in one process (mpirun -n 1).

    python3 test_binding.py PLAN STRUCT_SIZES_EXE

PLAN is a 1-rank plan with hook groups (hosts/tiny's tiny-1.plan). Every
failing call must raise dmuon.Error with the library's own status and
message. Exits 77 (ctest's skip) without numpy or mpi4py.
"""

import ctypes
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from mpi4py import MPI
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon
from dmuon import _capi

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def raises(status, needle, fn, *args, **kw):
    """fn(*args) raises dmuon.Error with `status` and `needle` in its message."""
    try:
        fn(*args, **kw)
    except dmuon.Error as e:
        check(e.status == status and needle in e.message and needle in str(e),
              f"{getattr(fn, '__name__', fn)} raises {e.status_name}: {e}")
        return e
    check(False, f"{getattr(fn, '__name__', fn)} raised nothing (expected '{needle}')")
    return None


def check_struct_sizes(exe):
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, size = line.split()
        struct_type, _ = _capi.VERSIONED_STRUCTS[name]
        check(ctypes.sizeof(struct_type) == int(size),
              f"sizeof {name}: C {size}, ctypes {ctypes.sizeof(struct_type)}")


def check_plan(path):
    plan = dmuon.Plan(path)
    with open(path, "rb") as f:
        data = f.read()
    check(dmuon.Plan(data).fingerprint == plan.fingerprint, "a plan from bytes = from the file")
    check(plan.world_size == 1 and plan.num_hook_groups > 1, "world size 1, hook groups")
    mesh = plan.mesh()
    check(mesh.world_size == 1 and mesh.dim_names == ["dp_shard"], f"mesh {mesh}")
    muon = [p for p in plan.params if p.role == dmuon.ROLE_MUON]
    check(bool(muon) and all(p.hook_group >= 0 for p in muon), "Muon params have hook groups")
    check(plan.find_param(muon[0].name) == muon[0].index, "find_param by name")
    raises(dmuon.ERROR_INVALID_ARGUMENT, "no.such.param", plan.find_param, "no.such.param")
    check(plan.num_stages == 1 and plan.rank_stage(0) == 0 and plan.param_stage(0) == 0
          and plan.hook_group_stage(0) == 0, "one stage, 0, without a pp dim")
    raises(dmuon.ERROR_INVALID_ARGUMENT, "rank 1 is out of range", plan.rank_stage, 1)
    raises(dmuon.ERROR_INVALID_PLAN, "too small", dmuon.Plan, b"garbage")
    corrupt = bytearray(data)
    corrupt[len(corrupt) // 2] ^= 0xFF
    raises(dmuon.ERROR_INVALID_PLAN, "", dmuon.Plan, bytes(corrupt))
    missing = os.path.join(tempfile.gettempdir(), "dmuon-no-such.plan")
    raises(dmuon.ERROR_IO, missing, dmuon.Plan, missing)
    return plan


def check_runtime(plan):
    try:
        dmuon.Runtime(plan, MPI.COMM_WORLD, no_such_option=1)
        check(False, "an unknown option raises")
    except TypeError as e:
        check("no_such_option" in str(e), f"unknown option: {e}")
    raises(dmuon.ERROR_INVALID_ARGUMENT, "options.replicate_async", dmuon.Runtime, plan,
           MPI.COMM_WORLD, replicate_async=7)
    rt = dmuon.Runtime(plan, MPI.COMM_WORLD, mode=dmuon.MODE_Z3)
    first = plan.params[0]
    try:
        rt.bind_param(first.name, np.zeros(first.numel, np.complex64))
        check(False, "bind_param takes complex values")
    except TypeError as e:
        check("complex values" in str(e), f"bind_param refuses complex values: {e}")
    raises(dmuon.ERROR_INVALID_ARGUMENT, "got 3 values", rt.bind_param, first.name,
           np.zeros(3, np.float32))
    initial = {}
    for i, p in enumerate(plan.params):
        initial[p.name] = np.full(rt.local_shape(p.index), 0.01 * (i + 1), np.float32)
        rt.bind_param(p.name, initial[p.name])
    raises(dmuon.ERROR_INVALID_STATE, "pre_backward(0) before post_forward", rt.pre_backward, 0)
    groups = range(plan.num_hook_groups)
    in_group = {g: [p for p in plan.params if p.hook_group == g] for g in groups}
    for g in groups:
        rt.pre_forward(g)
        for p in in_group[g]:
            view = rt.param_view(p.index)
            check(np.array_equal(view, initial[p.name]), f"view of {p.name} = its bound values")
            check(rt.param_view(p.index, "torch").data_ptr() == view.ctypes.data
                  if _has_torch() else True, f"torch view of {p.name} is the same memory")
        rt.post_forward(g)
    muon = next(p for p in plan.params if p.role == dmuon.ROLE_MUON)
    raises(dmuon.ERROR_INVALID_STATE, "", rt.param_view, muon.index)  # Z3: freed
    raises(dmuon.ERROR_INVALID_STATE, "", rt.step)  # before every post_backward
    for g in reversed(groups):
        rt.pre_backward(g)
        for p in in_group[g]:
            rt.grad_view(p.index)[...] += 1.0  # zero-copy: the runtime sees it
        rt.post_backward(g)
    norm = rt.grad_norm()
    total = sum(p.numel for p in plan.params if p.hook_group >= 0)
    check(norm.finite and abs(norm.total - total ** 0.5) < 1e-3 * total ** 0.5,
          f"grad norm {norm.total:.4f} = sqrt({total}) of the written ones")
    check(rt.step() is True and rt.step_counts() == (1, 0), "one step applied")
    after = rt.gather_param(muon.name)
    check(not np.array_equal(after, initial[muon.name]), f"{muon.name} moved by the step")
    state = rt.param_state(muon.name)
    check(state.is_owner and state.has_owned_data and state.has_momentum, f"I1-I2: {state}")
    rt.set_hyper_params(lr=0.5)
    check(abs(rt.hyper_params()["lr"] - 0.5) < 1e-7, "set_hyper_params / hyper_params")
    raises(dmuon.ERROR_INVALID_ARGUMENT, "no-match*", rt.set_param_group_scale, "no-match*",
           1.0, 1.0)
    counters = rt.comm_counters()
    check(set(counters) == set(dmuon.COLLECTIVES), "a counter per collective kind")
    memory, planned = rt.memory(), rt.planned_memory()
    check(all(memory[k].peak == planned[k].peak for k in memory),
          f"memory peaks = the plan's: {memory} vs {planned}")
    with tempfile.TemporaryDirectory() as d:
        rt.save_checkpoint(d, 1)
        check(rt.load_checkpoint(d) == 1, "checkpoint save / load")
    del view
    rt.pre_forward(groups[0])
    raises(dmuon.ERROR_INVALID_STATE, "called twice", rt.pre_forward, groups[0])
    rt.abandon_step()  # the step given up: the same hook may start it again
    check(rt.step_counts() == (1, 0), "abandon_step applies nothing")
    check_views_outlive_nothing(rt, plan, groups[0], in_group[groups[0]][0], initial)


def check_views_outlive_nothing(rt, plan, g, p, initial):
    """A view keeps its Runtime from being collected, and close() refuses
    to leave one dangling (either segfaulted on the next read)."""
    rt.pre_forward(g)
    kept = rt.param_view(p.index)
    tensor = rt.param_view(p.index, "torch") if _has_torch() else None
    raises(dmuon.ERROR_INVALID_STATE, "view(s) of its memory", rt.close)
    del kept, tensor
    rt.close()
    check(not rt.handle, "close() once its views are gone")

    orphan = dmuon.Runtime(plan, MPI.COMM_WORLD)
    for q in plan.params:
        orphan.bind_param(q.name, initial[q.name])
    orphan.pre_forward(g)
    view = orphan.param_view(p.index)
    del orphan
    import gc
    gc.collect()
    check(np.array_equal(view, initial[p.name]),
          "a view of a Runtime nobody else holds still reads its memory")
    del view
    gc.collect()


def _has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def check_version():
    out = subprocess.run([sys.executable, "-m", "dmuon", "--version"], capture_output=True,
                         text=True, check=True).stdout
    major, minor, patch = dmuon.library_version()
    fmajor, fminor = dmuon.plan_format_version()
    check(out.startswith(f"dmuon {major}.{minor}.{patch} ") and
          f"plan format {fmajor}.{fminor}" in out, f"python3 -m dmuon --version: {out.strip()}")


def check_zero_element_param():
    """A 0-element initializer (ONNX allows a 0 dim) is a param whose values
    may be a null pointer: bind_param(name, NULL, 0) binds it, and the run
    trains around it."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        print("skipped the 0-element param check: no onnx")
        return
    from dmuon.torch._manifest import run_dmuonc
    with tempfile.TemporaryDirectory() as d:
        inits = [numpy_helper.from_array(np.ones([4, 4], np.float32), "fc.weight"),
                 numpy_helper.from_array(np.ones([0, 4], np.float32), "empty.weight")]
        nodes = [helper.make_node("MatMul", ["x", "fc.weight"], ["h"], name="/fc/MatMul"),
                 helper.make_node("MatMul", ["e", "empty.weight"], ["z"], name="/empty/MatMul")]
        graph = helper.make_graph(
            nodes, "zero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                            helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 0])],
            [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4])], initializer=inits)
        onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                        os.path.join(d, "zero.onnx"))
        run_dmuonc([os.path.join(d, "zero.onnx"), "--mesh", "1", "-o", os.path.join(d, "z.plan")])
        plan = dmuon.Plan(os.path.join(d, "z.plan"))
        empty = plan.params[plan.find_param("empty.weight")]
        check(empty.numel == 0, f"empty.weight has 0 elements: {empty}")
        rt = dmuon.Runtime(plan, MPI.COMM_WORLD)
        status = _capi.lib.dmuon_runtime_bind_param(rt._handle, b"empty.weight", None, 0)
        check(status == 0, f"bind_param(empty.weight, NULL, 0) succeeds: status {status}")
        raises(dmuon.ERROR_INVALID_ARGUMENT, "values is null",
               lambda: rt._call(_capi.lib.dmuon_runtime_bind_param(rt._handle, b"fc.weight",
                                                                   None, 16)))
        rt.bind_param("fc.weight", np.ones(16, np.float32))
        for g in range(plan.num_hook_groups):
            rt.pre_forward(g)
            rt.post_forward(g)
        for g in reversed(range(plan.num_hook_groups)):
            rt.pre_backward(g)
            for p in plan.params:
                if p.hook_group == g:
                    rt.grad_view(p.index)[...] += 1.0
            rt.post_backward(g)
        check(rt.step() is True, "a step with a 0-element param applies")
        check(rt.gather_param("empty.weight").size == 0, "its gathered values are empty")
        rt.close()


def main():
    plan_path, sizes_exe = sys.argv[1], sys.argv[2]
    check_struct_sizes(sizes_exe)
    check_version()
    check_runtime(check_plan(plan_path))
    check_zero_element_param()
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("test_binding: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
