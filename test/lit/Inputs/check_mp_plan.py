#!/usr/bin/env python3
"""Recomputes the model-parallel fields of a complete plan (dmuonc --emit=json)
from the rules in docs/plan-format.md, independently of dmuonc, and compares.

Checks, for every param: local_shape (the shape chunked as torch.chunk does
by the non-ownership mesh dims that shard it: the largest slice) and, for an
uneven split, smallest_local_shape, bytes / reduce_bytes (local numel), group and gather
(mesh dim, tensor dim) of comm params, the NS cost (local batch x NS flops of
the local matrix for no_comm, of the full matrix for comm params), and the
compute_index (LPT per owner and gather mesh dim); for a sharded param
its flat shard (ceil(local / G) elements); data_dims (the data-carrying dims
it is Replicate on) and, for an owner, that its data index has coordinates
on those only. For every rank: owned_elements, master_bytes, momentum_bytes,
ns_flops, allreduce_bytes, the replicate broadcast over each owner's column
(dp_replicate x the param's data dims), the gather/scatter and
all-gather/reduce-scatter figures (routes: docs/dmuonc.md). Prints a summary, then `ok`, or the first
mismatches and exits 1.

  check_mp_plan.py < plan.json
"""
import json
import sys

DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8}


def ns_form(m, n):
    """The rule of kernels/NsForms.h, as docs/partition.md states it."""
    s, l = min(m, n), max(m, n)
    if s < 32:
        return "three_gemm"
    return "gram" if l >= 2 * s else "symmetric"


def ns_flops(m, n, steps):
    """Flops of the form the rule picks (docs/partition.md)."""
    s, l = float(min(m, n)), float(max(m, n))
    form = ns_form(m, n)
    if form == "symmetric":
        return steps * (3 * s * s * l + s ** 3)
    if form == "gram":  # re-formed every 3 iterations
        total, left = 0.0, steps
        while left > 0:
            k = min(3, left)
            left -= k
            total += 3 * s * s * l + (1 if k == 1 else 6 * k - 5) * s ** 3
        return total
    return steps * (4.0 * s * s * l + 2.0 * s * s * s)


def matrix_view(shape, conv):
    if len(shape) < 2:
        return 1, (1 if shape else 0), (shape[0] if shape else 0)
    if conv:
        cols = 1
        for d in shape[1:]:
            cols *= d
        return 1, shape[0], cols
    batch = 1
    for d in shape[:-2]:
        batch *= d
    return batch, shape[-2], shape[-1]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def parse_placement(s):
    if s.startswith("Shard("):
        return "shard", int(s[6:-1])
    if s.startswith("StridedShard("):
        return "strided", int(s[13:].split(",")[0])
    if s.startswith("Partial"):
        return "partial", None
    return "replicate", None


def main():
    plan = json.load(sys.stdin)
    mesh = plan["mesh"]
    dims = [d["size"] for d in mesh["dims"]]
    names = [d["name"] for d in mesh["dims"]]
    own = {mesh["shard_dim"], mesh["replicate_dim"]} - {-1}
    G, R = mesh["shards"], mesh["replicas"]
    carrying = [m for m, d in enumerate(mesh["dims"]) if d.get("carries_data", False)]
    expect_dp = G * R
    for m in carrying:
        expect_dp *= dims[m]

    def data_coords(d):
        """Coordinates (mesh dim -> coord) of data index d."""
        c = {}
        for m in reversed(carrying):
            c[m] = d % dims[m]
            d //= dims[m]
        return c
    steps = plan["options"]["optimizer"]["ns_steps"]
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append("%s: got %r, expected %r" % (what, got, want))

    params = plan["params"]
    comm = []
    for i, p in enumerate(params):
        who = "param '%s'" % p["name"]
        shape, conv = p["shape"], p.get("conv", False)
        pls = [parse_placement(s) for s in p["placements"]]
        # torch.chunk over each sharding mesh dim in mesh order: coordinate 0
        # holds the largest chunk, ceil(n / k); the last coordinate the
        # smallest, what is left after k - 1 chunks of ceil(n / k).
        local, sizes = list(shape), [{n} for n in shape]
        for m, (kind, d) in enumerate(pls):
            if kind in ("shard", "strided") and m not in own:
                k = dims[m]
                local[d] = -(-local[d] // k)
                sizes[d] = {max(0, min(-(-n // k), n - i * -(-n // k)))
                            for n in sizes[d] for i in range(k)}
        smallest = [min(s) for s in sizes]
        expect(who + " local_shape", p["local_shape"], local)
        expect(who + " smallest_local_shape", p.get("smallest_local_shape", local),
               smallest)
        # Averaged also along the data-carrying dims it is Replicate on.
        along = 1
        for m in carrying:
            if pls[m][0] == "replicate":
                along *= dims[m]
        p["_along"] = along
        p["_local"] = local
        p["_pls"] = pls
        p["_data_dims"] = [m for m in carrying if pls[m][0] == "replicate"]
        expect(who + " data_dims", p.get("data_dims", []), p["_data_dims"])
        route = p.get("route", "owner" if p["role"] == "muon" else "replicated")
        p["_route"] = route
        if route == "sharded":
            shard = -(-numel(local) // G)
            p["_shard"] = shard
            expect(who + " shard_elements", p["shard_elements"], shard)
            expect(who + " bytes", p["bytes"], shard * G * DTYPE_BYTES[p["dtype"]])
            expect(who + " reduce_bytes", p["reduce_bytes"], shard * G * 4)
            continue
        expect(who + " bytes", p["bytes"], numel(local) * DTYPE_BYTES[p["dtype"]])
        if route == "owner":
            expect(who + " reduce_bytes", p["reduce_bytes"], numel(local) * 4)
            slot = p["owner_slot"]
            p["_slot"] = slot["replicate"] * G + slot["shard"]
            p["_data"] = p.get("owner_data_index", 0)
            for m, c in data_coords(p["_data"]).items():
                if m not in p["_data_dims"]:
                    expect(who + " owner coordinate on %s, which shards it" % names[m], c, 0)
        if p["role"] != "muon":
            continue
        nd = len(shape)
        matrix = [m for m, (kind, d) in enumerate(pls)
                  if kind in ("shard", "strided") and (conv or d >= nd - 2)]
        expect(who + " group", p["group"], "comm" if matrix else "no_comm")
        b, r, c = matrix_view(shape, conv)
        lb, lr, lc = matrix_view(local, conv)
        if matrix:
            assert len(matrix) == 1 and matrix[0] not in own, who
            expect(who + " gather", (p["gather"]["mesh_dim"], p["gather"]["tensor_dim"]),
                   (matrix[0], pls[matrix[0]][1]))
            expect(who + " cost", p["cost"], lb * ns_flops(r, c, steps))
            expect(who + " ns_form", p["ns_form"], ns_form(r, c))
            comm.append(i)
        else:
            expect(who + " gather", "gather" in p, False)
            expect(who + " cost", p["cost"], lb * ns_flops(lr, lc, steps))
            expect(who + " ns_form", p["ns_form"], ns_form(lr, lc))

    # compute_index: LPT per (owner, gather mesh dim), cost desc then name.
    loads = {}
    order = sorted(comm, key=lambda i: (-params[i]["cost"], params[i]["name"], i))
    for i in order:
        p = params[i]
        g = p["gather"]["mesh_dim"]
        l = loads.setdefault((p["_slot"], p["_data"], g), [0.0] * dims[g])
        best = min(range(len(l)), key=lambda k: (l[k], k))
        l[best] += p["cost"]
        expect("param '%s' compute_index" % p["name"], p["gather"]["compute_index"], best)

    expect("mesh data_parallel_size", mesh.get("data_parallel_size", G * R), expect_dp)
    replicated = [p for p in params if p["_route"] == "replicated"]
    sharded = [p for p in params if p["_route"] == "sharded"]
    unshards = 2 if plan["options"]["mode"] == "z3" else 1
    allreduce = sum((numel(p["_local"]) * 4 if G * R > 1 else 0) +
                    (numel(p["_local"]) * 4 if p["_along"] > 1 else 0) for p in replicated)
    allreduce += sum((p["_shard"] * 4 if R > 1 else 0) + (p["_shard"] * 4 if p["_along"] > 1 else 0)
                     for p in sharded)
    allgather = sum(unshards * (G - 1) * p["_shard"] * DTYPE_BYTES[p["dtype"]] for p in sharded)
    reduce_scatter = sum((G - 1) * p["_shard"] * 4 for p in sharded)
    for f in plan["stats"]["ranks"]:
        rank = f["rank"]
        coord, x = [], rank
        for size in reversed(dims):
            coord.append(x % size)
            x //= size
        coord.reverse()
        s = coord[mesh["shard_dim"]] if mesh["shard_dim"] >= 0 else 0
        r = coord[mesh["replicate_dim"]] if mesh["replicate_dim"] >= 0 else 0
        want = dict(owned_elements=0, master_bytes=0, momentum_bytes=0, ns_flops=0.0,
                    gather_send_bytes=0, gather_recv_bytes=0, scatter_send_bytes=0,
                    scatter_recv_bytes=0, data_allreduce_bytes=0, replicate_send_bytes=0,
                    replicate_recv_bytes=0)
        for p in params:
            if p["_route"] != "owner":
                continue
            ps, pr = p["_slot"] % G, p["_slot"] // G
            n = numel(p["_local"])
            if ps != s:
                continue
            want["master_bytes"] += 4 * n
            # The owner's column: dp_replicate and the param's data dims.
            owner_data = data_coords(p["_data"])
            owner = pr == r and all(coord[m] == owner_data[m] for m in p["_data_dims"])
            column = R * p["_along"]
            if column > 1:
                if owner:
                    want["replicate_send_bytes"] += (column - 1) * 4 * n
                else:
                    want["replicate_recv_bytes"] += 4 * n
            if not owner:
                continue
            want["owned_elements"] += n
            if p["role"] != "muon":
                continue
            want["momentum_bytes"] += 4 * n
            # NS on this rank's own matrices (fewer where a batch split is uneven).
            mine = list(p["shape"])
            for m, (kind, d) in enumerate(p["_pls"]):
                if kind in ("shard", "strided") and m not in own:
                    c = -(-mine[d] // dims[m])
                    mine[d] = max(0, min(c, mine[d] - coord[m] * c))
            conv = p.get("conv", False)
            flops = (p["cost"] * matrix_view(mine, conv)[0] /
                     matrix_view(p["_local"], conv)[0])
            if "gather" not in p:
                want["ns_flops"] += flops
                continue
            g = p["gather"]["mesh_dim"]
            k, payload = dims[g], 4 * n
            if coord[g] == p["gather"]["compute_index"]:
                want["ns_flops"] += flops
                want["gather_recv_bytes"] += (k - 1) * payload
                want["scatter_send_bytes"] += (k - 1) * payload
            else:
                want["gather_send_bytes"] += payload
                want["scatter_recv_bytes"] += payload
        for key, value in want.items():
            got = f[key]
            if key == "ns_flops":
                ok = abs(got - value) <= 1e-9 * max(1.0, abs(value))
            else:
                ok = got == value
            if not ok:
                errors.append("rank %d %s: got %r, expected %r" % (rank, key, got, value))
        expect("rank %d allreduce_bytes" % rank, f["allreduce_bytes"], allreduce)
        expect("rank %d allgather_send_bytes" % rank, f.get("allgather_send_bytes", 0), allgather)
        expect("rank %d reduce_scatter_send_bytes" % rank, f.get("reduce_scatter_send_bytes", 0),
               reduce_scatter)

    ranks = plan["stats"]["ranks"]
    total = {k: sum(f[k + "_bytes"] for f in ranks)
             for k in ("gather_send", "gather_recv", "scatter_send", "scatter_recv")}
    expect("total gather sent vs received", total["gather_send"], total["gather_recv"])
    expect("total scatter sent vs received", total["scatter_send"], total["scatter_recv"])
    print("params %d comm %d ranks %d gather %d scatter %d"
          % (len(params), len(comm), len(ranks), total["gather_send"], total["scatter_send"]))
    if errors:
        print("\n".join(errors[:20]))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
