"""The models of the torch zoo test (torch_zoo_check.py): torchvision's own
classes (weights=None, small widths where the class takes them) and
transformer stacks written in torch with the module names of the Hugging
Face models they imitate (GPT-2 with its tied head and Conv1D c_attn, BERT,
T5), a timm-style ViT with root params and a fused qkv, and a partly frozen
model. Each entry: a builder, a batch maker and a loss."""

import torch
import torch.nn.functional as F
import torchvision
from torchvision.models.convnext import CNBlockConfig, ConvNeXt
from torchvision.models.swin_transformer import SwinTransformer
from torchvision.models.vision_transformer import VisionTransformer

VOCAB, CONTEXT, WIDTH, HEADS = 64, 8, 32, 2


# ------------------------------------------------------------ GPT-2 style

class Conv1D(torch.nn.Module):
    """transformers' Conv1D: a Linear whose weight is stored [in, out]."""

    def __init__(self, out_features, in_features):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(in_features, out_features) * 0.02)
        self.bias = torch.nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(
            *x.shape[:-1], -1)


def causal_attention(q, k, v):
    b, t, e = q.shape
    q, k, v = (z.view(b, t, HEADS, e // HEADS).transpose(1, 2) for z in (q, k, v))
    scores = q @ k.transpose(-1, -2) / (e // HEADS) ** 0.5
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    y = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
    return y.transpose(1, 2).reshape(b, t, e)


class GPT2Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = Conv1D(3 * WIDTH, WIDTH)
        self.c_proj = Conv1D(WIDTH, WIDTH)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(WIDTH, dim=-1)
        return self.c_proj(causal_attention(q, k, v))


class GPT2MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(4 * WIDTH, WIDTH)
        self.c_proj = Conv1D(WIDTH, 4 * WIDTH)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class GPT2Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(WIDTH)
        self.attn = GPT2Attention()
        self.ln_2 = torch.nn.LayerNorm(WIDTH)
        self.mlp = GPT2MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(torch.nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, WIDTH)
        self.wpe = torch.nn.Embedding(CONTEXT, WIDTH)
        self.h = torch.nn.ModuleList(GPT2Block() for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(WIDTH)
        for e in (self.wte, self.wpe):
            torch.nn.init.normal_(e.weight, std=0.02)  # GPT-2's initializer_range

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1)))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(torch.nn.Module):
    """tie_word_embeddings=True: lm_head.weight is transformer.wte.weight."""

    def __init__(self):
        super().__init__()
        self.transformer = GPT2Model()
        self.lm_head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, tokens):
        return self.lm_head(self.transformer(tokens))


def gpt2_frozen():
    """The GPT-2 stack with its embeddings and first block frozen."""
    m = GPT2LMHeadModel()
    m.transformer.wpe.requires_grad_(False)
    m.transformer.h[0].requires_grad_(False)
    return m


# ------------------------------------------------------------- BERT style

class BertSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.query = torch.nn.Linear(WIDTH, WIDTH)
        self.key = torch.nn.Linear(WIDTH, WIDTH)
        self.value = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = (f(x).view(b, t, HEADS, e // HEADS).transpose(1, 2)
                   for f in (self.query, self.key, self.value))
        y = (q @ k.transpose(-1, -2) / (e // HEADS) ** 0.5).softmax(-1) @ v
        return y.transpose(1, 2).reshape(b, t, e)


class BertSelfOutput(torch.nn.Module):
    def __init__(self, width_in):
        super().__init__()
        self.dense = torch.nn.Linear(width_in, WIDTH)
        self.LayerNorm = torch.nn.LayerNorm(WIDTH)

    def forward(self, h, x):
        return self.LayerNorm(self.dense(h) + x)


class BertAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.self = BertSelfAttention()
        self.output = BertSelfOutput(WIDTH)

    def forward(self, x):
        return self.output(self.self(x), x)


class BertIntermediate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(WIDTH, 4 * WIDTH)

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = BertAttention()
        self.intermediate = BertIntermediate()
        self.output = BertSelfOutput(4 * WIDTH)

    def forward(self, x):
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class BertEmbeddings(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(VOCAB, WIDTH)
        self.position_embeddings = torch.nn.Embedding(CONTEXT, WIDTH)
        self.token_type_embeddings = torch.nn.Embedding(2, WIDTH)
        self.LayerNorm = torch.nn.LayerNorm(WIDTH)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1))
        x = self.word_embeddings(tokens) + self.position_embeddings(positions)
        return self.LayerNorm(x + self.token_type_embeddings(torch.zeros_like(tokens)))


class BertEncoder(torch.nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.layer = torch.nn.ModuleList(BertLayer() for _ in range(layers))

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class BertModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = BertEmbeddings()
        self.encoder = BertEncoder()


class BertForTokenClassification(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = BertModel()
        self.classifier = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        return self.classifier(self.bert.encoder(self.bert.embeddings(tokens)))


# --------------------------------------------------------------- T5 style

class T5LayerNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(WIDTH))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class T5Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(WIDTH, WIDTH, bias=False)
                                          for _ in range(4))

    def forward(self, x):
        return self.o(causal_attention(self.q(x), self.k(x), self.v(x)))


class T5LayerSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.SelfAttention = T5Attention()
        self.layer_norm = T5LayerNorm()

    def forward(self, x):
        return x + self.SelfAttention(self.layer_norm(x))


class T5DenseActDense(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wi = torch.nn.Linear(WIDTH, 4 * WIDTH, bias=False)
        self.wo = torch.nn.Linear(4 * WIDTH, WIDTH, bias=False)

    def forward(self, x):
        return self.wo(F.relu(self.wi(x)))


class T5LayerFF(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.DenseReluDense = T5DenseActDense()
        self.layer_norm = T5LayerNorm()

    def forward(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


class T5Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.ModuleList([T5LayerSelfAttention(), T5LayerFF()])

    def forward(self, x):
        for sub in self.layer:
            x = sub(x)
        return x


class T5Stack(torch.nn.Module):
    def __init__(self, shared, blocks=2):
        super().__init__()
        self.embed_tokens = shared
        self.block = torch.nn.ModuleList(T5Block() for _ in range(blocks))
        self.final_layer_norm = T5LayerNorm()

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        for block in self.block:
            x = block(x)
        return self.final_layer_norm(x)


class T5ForCausalLM(torch.nn.Module):
    """T5's decoder-side names, its embedding shared with the stack and tied
    to lm_head (T5's tie_word_embeddings)."""

    def __init__(self):
        super().__init__()
        self.shared = torch.nn.Embedding(VOCAB, WIDTH)
        torch.nn.init.normal_(self.shared.weight, std=WIDTH ** -0.5)
        self.decoder = T5Stack(self.shared)
        self.lm_head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.shared.weight

    def forward(self, tokens):
        return self.lm_head(self.decoder(tokens) * WIDTH ** -0.5)


# ------------------------------------------------- timm-style ViT (root params)

class TimmAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, e // HEADS).permute(2, 0, 3, 1, 4)
        y = (q @ k.transpose(-1, -2) / (e // HEADS) ** 0.5).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, e))


class TimmBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(WIDTH)
        self.attn = TimmAttention()
        self.norm2 = torch.nn.LayerNorm(WIDTH)
        self.mlp = torch.nn.Sequential()
        self.mlp.fc1 = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.mlp.act = torch.nn.GELU()
        self.mlp.fc2 = torch.nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TimmVit(torch.nn.Module):
    """timm's VisionTransformer layout: cls_token and pos_embed on the root."""

    def __init__(self, image=16, patch=4, classes=10):
        super().__init__()
        self.patch_embed = torch.nn.Module()
        self.patch_embed.proj = torch.nn.Conv2d(3, WIDTH, patch, stride=patch)
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, WIDTH) * 0.02)
        self.pos_embed = torch.nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, WIDTH) * .02)
        self.blocks = torch.nn.Sequential(*(TimmBlock() for _ in range(2)))
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, classes)

    def forward(self, images):
        x = self.patch_embed.proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


# ------------------------------------------------- ParameterList, never called

class MixerWithParameterList(torch.nn.Module):
    """Token mixing matrices kept in an nn.ParameterList, which no forward
    calls: the model reads its params (the hooks go on its parent)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.mixers = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(CONTEXT, CONTEXT) / CONTEXT) for _ in range(2))
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for m in self.mixers:
            x = x + torch.tanh(m @ x)
        return self.head(self.proj(x))


# ------------------------------------------------------------- the zoo

def image_batch(generator, n, size=32):
    return (torch.randn(n, 3, size, size, generator=generator),
            torch.randint(0, 10, (n,), generator=generator))


def token_batch(generator, n):
    window = torch.randint(0, VOCAB, (n, CONTEXT + 1), generator=generator)
    return window[:, :-1], window[:, 1:]


def classification_loss(logits, labels):
    return F.cross_entropy(logits, labels)


def token_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def _image(size):
    return lambda g, n: image_batch(g, n, size)


# name -> (builder, batch(generator, n) -> (inputs, targets), loss)
ZOO = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), _image(32),
                 classification_loss),
    "vit": (lambda: VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=2,
                                      hidden_dim=WIDTH, mlp_dim=2 * WIDTH, num_classes=10),
            _image(16), classification_loss),
    "convnext": (lambda: ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 2)],
                                  num_classes=10), _image(16), classification_loss),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(num_classes=10), _image(32),
                        classification_loss),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10),
                           _image(32), classification_loss),
    "swin": (lambda: SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[2, 2],
                                     num_heads=[2, 2], window_size=[2, 2], num_classes=10),
             _image(16), classification_loss),
    "gpt2_tied": (GPT2LMHeadModel, token_batch, token_loss),
    "bert": (BertForTokenClassification, token_batch, token_loss),
    "t5_tied": (T5ForCausalLM, token_batch, token_loss),
    "timm_vit_root_params": (TimmVit, _image(16), classification_loss),
    "gpt2_partly_frozen": (gpt2_frozen, token_batch, token_loss),
    "parameter_list": (MixerWithParameterList, token_batch, token_loss),
}
