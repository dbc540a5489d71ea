"""The zoo's models: torchvision's own classes (small configurations, so an
export takes a fraction of a second and the files stay small; the module
names, which are what dmuonc must get right, are those of the full models)
and Hugging Face-style stacks written here with their real module names
(BERT, T5, GPT-2), so no download and no transformers package is needed.

Each entry: name -> (build(), example input, block classes). The block
classes are what a host wraps as one FSDP-style unit: the test expects one
hook group per instance of them, plus a few roots.
"""
import math

import torch
from torch import nn
import torchvision
from torchvision.models import convnext, efficientnet, mobilenetv3, resnet
from torchvision.models import swin_transformer, vision_transformer


def _no_stochastic_depth(model):
    # torch 1.13 cannot export StochasticDepth in training mode (it draws a
    # random mask); it holds no params, so the identity exports the same
    # params and buffers.
    for name, child in model.named_children():
        if isinstance(child, torchvision.ops.StochasticDepth):
            setattr(model, name, nn.Identity())
        else:
            _no_stochastic_depth(child)
    return model


def vit():
    return vision_transformer.VisionTransformer(
        image_size=32, patch_size=8, num_layers=3, num_heads=2, hidden_dim=32,
        mlp_dim=64, num_classes=10)


def swin():
    return swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4],
        window_size=[4, 4], stochastic_depth_prob=0.2, num_classes=10)


def convnext_t():
    cfg = convnext.CNBlockConfig
    return convnext.ConvNeXt(
        [cfg(16, 32, 2), cfg(32, 64, 2), cfg(64, 128, 3), cfg(128, None, 2)],
        stochastic_depth_prob=0.1, num_classes=10)


def resnet50():
    # ResNet-50's stages ([3, 4, 6, 3] bottlenecks) at a quarter of its width.
    return resnet.ResNet(resnet.Bottleneck, [3, 4, 6, 3], width_per_group=16, num_classes=10)


def efficientnet_b0():
    return torchvision.models.efficientnet_b0(weights=None, num_classes=10)


def mobilenet_v3_small():
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10)


# --- Hugging Face-style stacks ------------------------------------------------

class BertSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        return (a @ v).transpose(1, 2).reshape(b, t, d)


class BertSelfOutput(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dense = nn.Linear(d, d)
        self.LayerNorm = nn.LayerNorm(d)

    def forward(self, h, x):
        return self.LayerNorm(self.dense(h) + x)


class BertAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.self = BertSelfAttention(d, heads)
        self.output = BertSelfOutput(d)

    def forward(self, x):
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.dense = nn.Linear(d, ff)

    def forward(self, x):
        return torch.nn.functional.gelu(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.dense = nn.Linear(ff, d)
        self.LayerNorm = nn.LayerNorm(d)

    def forward(self, h, x):
        return self.LayerNorm(self.dense(h) + x)


class BertLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.attention = BertAttention(d, heads)
        self.intermediate = BertIntermediate(d, ff)
        self.output = BertOutput(d, ff)

    def forward(self, x):
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, d, positions):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(positions, d)
        self.token_type_embeddings = nn.Embedding(2, d)
        self.LayerNorm = nn.LayerNorm(d)
        # An int64 buffer, as BERT's.
        self.register_buffer("position_ids", torch.arange(positions).expand((1, -1)))

    def forward(self, ids):
        pos = self.position_ids[:, : ids.shape[1]]
        e = self.word_embeddings(ids) + self.position_embeddings(pos)
        return self.LayerNorm(e + self.token_type_embeddings(torch.zeros_like(ids)))


class BertEncoder(nn.Module):
    def __init__(self, n, d, heads, ff):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(d, heads, ff) for _ in range(n)])

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dense = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class Bert(nn.Module):
    def __init__(self, vocab=100, d=32, n=3, heads=2, ff=64, positions=16):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, d, positions)
        self.encoder = BertEncoder(n, d, heads, ff)
        self.pooler = BertPooler(d)

    def forward(self, ids):
        return self.pooler(self.encoder(self.embeddings(ids)))


class T5LayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class T5Attention(nn.Module):
    def __init__(self, d, heads, has_bias, buckets=8):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.buckets = buckets
        if has_bias:  # T5's relative position bias, in the first block only
            self.relative_attention_bias = nn.Embedding(buckets, heads)

    def forward(self, x):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        s = split(self.q(x)) @ split(self.k(x)).transpose(-1, -2)
        if hasattr(self, "relative_attention_bias"):
            rel = torch.arange(t)[None, :] - torch.arange(t)[:, None]
            rel = rel.clamp(0, self.buckets - 1)
            s = s + self.relative_attention_bias(rel).permute(2, 0, 1)[None]
        a = torch.softmax(s, dim=-1) @ split(self.v(x))
        return self.o(a.transpose(1, 2).reshape(b, t, d))


class T5LayerSelfAttention(nn.Module):
    def __init__(self, d, heads, has_bias):
        super().__init__()
        self.SelfAttention = T5Attention(d, heads, has_bias)
        self.layer_norm = T5LayerNorm(d)

    def forward(self, x):
        return x + self.SelfAttention(self.layer_norm(x))


class T5DenseActDense(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.wi = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.wo(torch.relu(self.wi(x)))


class T5LayerFF(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.DenseReluDense = T5DenseActDense(d, ff)
        self.layer_norm = T5LayerNorm(d)

    def forward(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


class T5Block(nn.Module):
    def __init__(self, d, heads, ff, has_bias):
        super().__init__()
        self.layer = nn.ModuleList([T5LayerSelfAttention(d, heads, has_bias), T5LayerFF(d, ff)])

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class T5Stack(nn.Module):
    def __init__(self, n, d, heads, ff):
        super().__init__()
        self.block = nn.ModuleList([T5Block(d, heads, ff, i == 0) for i in range(n)])
        self.final_layer_norm = T5LayerNorm(d)

    def forward(self, x):
        for block in self.block:
            x = block(x)
        return self.final_layer_norm(x)


class T5Encoder(nn.Module):
    def __init__(self, vocab=100, d=32, n=3, heads=2, ff=64):
        super().__init__()
        self.shared = nn.Embedding(vocab, d)
        self.encoder = T5Stack(n, d, heads, ff)

    def forward(self, ids):
        return self.encoder(self.shared(ids))


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight [in, out], y = x @ W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight).view(shape)


class GPT2Attention(nn.Module):
    def __init__(self, d, heads, positions):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(3 * d, d)
        self.c_proj = Conv1D(d, d)
        # The causal mask, a float buffer as older GPT-2 code keeps it.
        self.register_buffer("bias", torch.tril(torch.ones(positions, positions))[None, None])

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        s = split(q) @ split(k).transpose(-1, -2)
        s = s.masked_fill(self.bias[:, :, :t, :t] == 0, -1e4)
        a = torch.softmax(s, dim=-1) @ split(v)
        return self.c_proj(a.transpose(1, 2).reshape(b, t, d))


class GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Conv1D(4 * d, d)
        self.c_proj = Conv1D(d, 4 * d)

    def forward(self, x):
        return self.c_proj(torch.nn.functional.gelu(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, d, heads, positions):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = GPT2Attention(d, heads, positions)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = GPT2MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, vocab=100, d=32, n=3, heads=2, positions=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(positions, d)
        self.h = nn.ModuleList([GPT2Block(d, heads, positions) for _ in range(n)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # the tied head


def _image(size):
    return lambda: torch.randn(2, 3, size, size)


def _tokens():
    return torch.randint(0, 100, (2, 8))


# name -> (build, input, the block classes a host wraps).
ZOO = {
    "vit_b_16": (vit, _image(32), (vision_transformer.EncoderBlock,)),
    "swin_t": (swin, _image(64), (swin_transformer.SwinTransformerBlock,)),
    "convnext_tiny": (convnext_t, _image(64), (convnext.CNBlock,)),
    "resnet50": (resnet50, _image(64), (resnet.Bottleneck,)),
    "efficientnet_b0": (efficientnet_b0, _image(64), (efficientnet.MBConv,)),
    "mobilenet_v3_small": (mobilenet_v3_small, _image(64), (mobilenetv3.InvertedResidual,)),
    "bert": (Bert, _tokens, (BertLayer,)),
    "t5": (T5Encoder, _tokens, (T5Block,)),
    "gpt2": (GPT2, _tokens, (GPT2Block,)),
}


def build(name):
    make, example, blocks = ZOO[name]
    torch.manual_seed(0)
    return _no_stochastic_depth(make()), example(), blocks
