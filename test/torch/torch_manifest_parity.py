"""dmuon::torch's manifest (manifest_zoo.cpp) equals dmuon.torch's for the
same models written in Python, and says what both must: conv views, the
frozen layer on the host route, the tied embedding once, the fused qkv and
c_attn split. Exits 77 without torch."""

import os
import subprocess
import sys

try:
    import torch
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon.torch


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3)
        self.blocks = torch.nn.ModuleList(torch.nn.Conv2d(8, 8, 3) for _ in range(2))
        self.frozen = torch.nn.Linear(8, 8).requires_grad_(False)
        self.head = torch.nn.Linear(8, 10)


class Conv1D(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = torch.nn.Parameter(torch.zeros(n_out))


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)
        self.c_attn = Conv1D(32, 96)


class TiedLm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(64, 32)
        self.attn = Attention()
        self.lm_head = torch.nn.Linear(32, 64, bias=False)
        self.lm_head.weight = self.wte.weight


EXPECTED = {
    "convnet": ['name = "stem.weight"\nshape = [8, 3, 3, 3]\ndtype = "f32"\nconv = true',
                'name = "frozen.weight"\nshape = [8, 8]\ndtype = "f32"\noptimizer = "adamw"\n'
                'route = "host"'],
    "tiedlm": ['name = "attn.qkv.weight"\nshape = [96, 32]\ndtype = "f32"\nns_split = 3\n',
               'name = "attn.c_attn.weight"\nshape = [32, 96]\ndtype = "f32"\nns_split = 3\n'
               'ns_split_dim = "cols"'],
}


def main():
    exe, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    subprocess.run([exe, out], check=True)
    for name, model in (("convnet", ConvNet()), ("tiedlm", TiedLm())):
        with open(os.path.join(out, f"{name}.toml")) as f:
            cpp = f.read()
        python = dmuon.torch.manifest_toml(model, name)
        if cpp != python:
            print(f"--- C++\n{cpp}\n--- Python\n{python}")
            raise AssertionError(f"{name}: the hosts write different manifests")
        for needle in EXPECTED[name]:
            if needle not in python:
                raise AssertionError(f"{name}: the manifest lacks\n{needle}\n---\n{python}")
    if "lm_head" in python:
        raise AssertionError("the tied head is written as a param of its own")
    print("torch_manifest_parity: the C++ and Python manifests are the same text")


if __name__ == "__main__":
    main()
