#!/usr/bin/env python3
"""Writes the bundled real-model manifests in examples/models/ (except the
hand-written gpt2-small.toml and llama-3.1-8b.toml) from the public config
facts in MODELS.md. Checkpoint names and shapes; linear weights are [out, in].

  scripts/gen-model-manifests.py [outdir]      # default examples/models
"""
import os
import sys


class W:
    def __init__(self):
        self.lines = []

    def top(self, name, shape, extra=None):
        self.lines += ["", "[[param]]", f'name = "{name}"', f"shape = {list(shape)}"]
        for k, v in (extra or {}).items():
            self.lines.append(f"{k} = {v}")

    def block(self, depth, repeat, prefix, params, start=0, index=None, extra=None):
        """params: list of (name, shape) or ('block', kwargs) nested."""
        ind = "  " * (depth - 1)
        tbl = "[[" + ".".join(["param"] * depth) + "]]"
        self.lines += ["", ind + tbl, f"{ind}repeat = {repeat}"]
        if start:
            self.lines.append(f"{ind}start = {start}")
        if index:
            self.lines.append(f'{ind}index = "{index}"')
        self.lines.append(f'{ind}prefix = "{prefix}"')
        for k, v in (extra or {}).items():
            self.lines.append(f"{ind}{k} = {v}")
        self.nested(depth + 1, params)

    def nested(self, depth, params):
        ind = "  " * (depth - 1)
        tbl = "[[" + ".".join(["param"] * depth) + "]]"
        for item in params:
            if item[0] == "block":
                kw = item[1]
                self.block(depth, **kw)
                continue
            name, shape = item[0], item[1]
            self.lines += [ind + tbl, f'{ind}name = "{name}"', f"{ind}shape = {list(shape)}"]
            if len(item) > 2:
                for k, v in item[2].items():
                    self.lines.append(f"{ind}{k} = {v}")


def header(w, comment, name, dtype="bf16"):
    w.lines += [f"# {c}" for c in comment] + ["[model]", f'name = "{name}"', f'dtype = "{dtype}"']


def llama(name, H, L, heads, kv, hd, I, V, comment, tp=False):
    """tp: Megatron-style tensor parallelism on a mesh dim 'tp': column-parallel
    q/k/v/gate/up (Shard(0)), row-parallel o/down (Shard(1)), vocab-parallel
    embedding and LM head (Shard(0))."""
    col = {"placements": '{ tp = "Shard(0)" }'} if tp else {}
    row = {"placements": '{ tp = "Shard(1)" }'} if tp else {}
    w = W()
    header(w, comment, name)
    w.top("model.embed_tokens.weight", [V, H], col)
    w.block(1, L, "model.layers.{i}.", [
        ("input_layernorm.weight", [H]),
        ("self_attn.q_proj.weight", [heads * hd, H], col),
        ("self_attn.k_proj.weight", [kv * hd, H], col),
        ("self_attn.v_proj.weight", [kv * hd, H], col),
        ("self_attn.o_proj.weight", [H, heads * hd], row),
        ("post_attention_layernorm.weight", [H]),
        ("mlp.gate_proj.weight", [I, H], col),
        ("mlp.up_proj.weight", [I, H], col),
        ("mlp.down_proj.weight", [H, I], row),
    ])
    w.top("model.norm.weight", [H])
    w.top("lm_head.weight", [V, H], col)
    return w


def qwen3_moe(name, fused, comment):
    H, L, heads, kv, hd, E, I, V = 2048, 48, 32, 4, 128, 128, 768, 151936
    w = W()
    header(w, comment, name)
    w.top("model.embed_tokens.weight", [V, H])
    attn = [
        ("input_layernorm.weight", [H]),
        ("self_attn.q_proj.weight", [heads * hd, H]),
        ("self_attn.k_proj.weight", [kv * hd, H]),
        ("self_attn.v_proj.weight", [kv * hd, H]),
        ("self_attn.o_proj.weight", [H, heads * hd]),
        ("self_attn.q_norm.weight", [hd]),
        ("self_attn.k_norm.weight", [hd]),
        ("post_attention_layernorm.weight", [H]),
        ("mlp.gate.weight", [E, H]),
    ]
    if fused:
        ep = {"placements": '{ ep = "Shard(0)" }'}
        experts = [
            ("mlp.experts.gate_proj", [E, I, H], ep),
            ("mlp.experts.up_proj", [E, I, H], ep),
            ("mlp.experts.down_proj", [E, H, I], ep),
        ]
    else:
        experts = [("block", dict(repeat=E, index="e", prefix="mlp.experts.{e}.", params=[
            ("gate_proj.weight", [I, H]),
            ("up_proj.weight", [I, H]),
            ("down_proj.weight", [H, I]),
        ]))]
    w.block(1, L, "model.layers.{i}.", attn + experts)
    w.top("model.norm.weight", [H])
    w.top("lm_head.weight", [V, H])
    return w


def mla_moe(name, H, L, dense, heads, q_lora, dense_I, E, I, shared_I, V, bias, comment,
            fused=False):
    kv_lora, nope, rope, vh = 512, 128, 64, 128
    w = W()
    header(w, comment, name)
    w.top("model.embed_tokens.weight", [V, H])
    attn = [("input_layernorm.weight", [H])]
    if q_lora:
        attn += [
            ("self_attn.q_a_proj.weight", [q_lora, H]),
            ("self_attn.q_a_layernorm.weight", [q_lora]),
            ("self_attn.q_b_proj.weight", [heads * (nope + rope), q_lora]),
        ]
    else:
        attn += [("self_attn.q_proj.weight", [heads * (nope + rope), H])]
    attn += [
        ("self_attn.kv_a_proj_with_mqa.weight", [kv_lora + rope, H]),
        ("self_attn.kv_a_layernorm.weight", [kv_lora]),
        ("self_attn.kv_b_proj.weight", [heads * (nope + vh), kv_lora]),
        ("self_attn.o_proj.weight", [H, heads * vh]),
        ("post_attention_layernorm.weight", [H]),
    ]
    if dense:
        w.block(1, dense, "model.layers.{i}.", attn + [
            ("mlp.gate_proj.weight", [dense_I, H]),
            ("mlp.up_proj.weight", [dense_I, H]),
            ("mlp.down_proj.weight", [H, dense_I]),
        ])
    moe = [("mlp.gate.weight", [E, H])]
    if bias:
        moe.append(("mlp.gate.e_score_correction_bias", [E]))
    if fused:
        ep = {"placements": '{ ep = "Shard(0)" }'}
        moe += [
            ("mlp.experts.gate_proj", [E, I, H], ep),
            ("mlp.experts.up_proj", [E, I, H], ep),
            ("mlp.experts.down_proj", [E, H, I], ep),
        ]
    else:
        moe += [("block", dict(repeat=E, index="e", prefix="mlp.experts.{e}.", params=[
            ("gate_proj.weight", [I, H]),
            ("up_proj.weight", [I, H]),
            ("down_proj.weight", [H, I]),
        ]))]
    moe += [
        ("mlp.shared_experts.gate_proj.weight", [shared_I, H]),
        ("mlp.shared_experts.up_proj.weight", [shared_I, H]),
        ("mlp.shared_experts.down_proj.weight", [H, shared_I]),
    ]
    w.block(1, L - dense, "model.layers.{i}.", attn + moe, start=dense)
    w.top("model.norm.weight", [H])
    w.top("lm_head.weight", [V, H])
    return w


MODELS = {
    "llama-3.1-70b": lambda: llama("llama-3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256, [
        "Llama 3.1 70B: hidden 8192, 80 layers, 64 query / 8 KV heads of 128,",
        "FFN 28672, vocab 128256, untied LM head. Checkpoint names and shapes.",
        "Generated by scripts/gen-model-manifests.py."]),
    "llama-3.1-405b": lambda: llama("llama-3.1-405b", 16384, 126, 128, 8, 128, 53248, 128256, [
        "Llama 3.1 405B: hidden 16384, 126 layers, 128 query / 8 KV heads of 128,",
        "FFN 53248, vocab 128256, untied LM head. Checkpoint names and shapes.",
        "Generated by scripts/gen-model-manifests.py."]),
    "llama-3.1-70b-tp": lambda: llama("llama-3.1-70b-tp", 8192, 80, 64, 8, 128, 28672, 128256, [
        "Llama 3.1 70B with Megatron-style tensor parallelism over a mesh dim 'tp':",
        "column-parallel q/k/v/gate/up (Shard(0)), row-parallel o/down (Shard(1)),",
        "vocab-parallel embedding and LM head (Shard(0)). The TP-sharded matrices",
        "are comm params: NS gathers each over tp. Compile with a mesh that has a",
        "tp dim dividing 8 (the KV heads), e.g. --mesh dp_shard=8,tp=8 or",
        "--mesh dp_replicate=2,dp_shard=4,tp=4. Same parameters as llama-3.1-70b.",
        "Generated by scripts/gen-model-manifests.py."], tp=True),
    "qwen3-30b-a3b": lambda: qwen3_moe("qwen3-30b-a3b", False, [
        "Qwen3-30B-A3B: hidden 2048, 48 MoE layers, 32 query / 4 KV heads of 128",
        "with q_norm/k_norm, 128 routed experts of width 768 per layer (no shared",
        "expert), router mlp.gate, vocab 151936, untied LM head. Per-expert 2-D",
        "weights as in the checkpoint. Generated by scripts/gen-model-manifests.py."]),
    "qwen3-30b-a3b-ep": lambda: qwen3_moe("qwen3-30b-a3b-ep", True, [
        "Qwen3-30B-A3B with fused 3-D expert tensors [E, m, n] (128 experts per",
        "tensor), sharded Shard(0) over an expert-parallel mesh dim 'ep'. Compile",
        "with a mesh that has an ep dim, e.g. --mesh dp_shard=8,ep=8 or",
        "--mesh dp_replicate=2,dp_shard=4,ep=2. Same parameters as qwen3-30b-a3b.",
        "Generated by scripts/gen-model-manifests.py."]),
    "deepseek-v3": lambda: mla_moe("deepseek-v3", 7168, 61, 3, 128, 1536, 18432, 256, 2048,
                                   2048, 129280, True, [
        "DeepSeek-V3 (671B): hidden 7168, 61 layers (0-2 dense FFN 18432), MLA",
        "attention (128 heads, q LoRA 1536, kv LoRA 512), 256 routed + 1 shared",
        "expert of width 2048, router gate + e_score_correction_bias, vocab",
        "129280, untied LM head. The MTP layer 61 is not part of the main model.",
        "Generated by scripts/gen-model-manifests.py."]),
    "deepseek-v3-ep": lambda: mla_moe("deepseek-v3-ep", 7168, 61, 3, 128, 1536, 18432, 256,
                                      2048, 2048, 129280, True, [
        "DeepSeek-V3 with fused 3-D expert tensors [256, m, n] per MoE layer, sharded",
        "Shard(0) over an expert-parallel mesh dim 'ep' (the V3 report trains with",
        "64-way EP: e.g. --mesh dp_shard=16,ep=64). Same parameters as deepseek-v3.",
        "Generated by scripts/gen-model-manifests.py."], fused=True),
    "moonlight-16b-a3b": lambda: mla_moe("moonlight-16b-a3b", 2048, 27, 1, 16, 0, 11264, 64,
                                         1408, 2816, 163840, True, [
        "Moonlight-16B-A3B: hidden 2048, 27 layers (layer 0 dense FFN 11264),",
        "MLA attention without q LoRA (16 heads), 64 routed experts of width 1408",
        "+ 2 shared (one MLP of width 2816), vocab 163840, untied LM head.",
        "Generated by scripts/gen-model-manifests.py."]),
    "kimi-k2": lambda: mla_moe("kimi-k2", 7168, 61, 1, 64, 1536, 18432, 384, 2048, 2048,
                               163840, True, [
        "Kimi K2 (1T): hidden 7168, 61 layers (layer 0 dense FFN 18432), MLA",
        "attention (64 heads, q LoRA 1536, kv LoRA 512), 384 routed + 1 shared",
        "expert of width 2048, vocab 163840, untied LM head.",
        "Generated by scripts/gen-model-manifests.py."]),
    "kimi-k2-ep": lambda: mla_moe("kimi-k2-ep", 7168, 61, 1, 64, 1536, 18432, 384, 2048, 2048,
                                  163840, True, [
        "Kimi K2 with fused 3-D expert tensors [384, m, n] per MoE layer, sharded",
        "Shard(0) over an expert-parallel mesh dim 'ep' (the K2 report trains with",
        "16-way EP: e.g. --mesh dp_shard=64,ep=16). Same parameters as kimi-k2.",
        "Generated by scripts/gen-model-manifests.py."], fused=True),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "examples", "models")
    for name, make in MODELS.items():
        w = make()
        with open(os.path.join(out, name + ".toml"), "w") as f:
            f.write("\n".join(w.lines).strip() + "\n")


if __name__ == "__main__":
    main()
