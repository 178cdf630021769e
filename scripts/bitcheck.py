"""Bit-identical check for issue 71 (attention config refactor): forward + 3 Adam steps of tiny
Transformers (fixed seed, CPU fp32), plus a convert_impl round trip of one layer. Saves every tensor.
Usage: python bitcheck.py OUT.pt"""

import sys

import torch

from headsweep.model import Transformer, TransformerConfig, convert_impl

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

CASES = {
    "base": dict(),
    "dk_dv": dict(heads=4, d_k=6, d_v=10, attn_dropout=0.1, head_dropout=0.2),
    "kv_xavier": dict(heads=4, kv_heads=2, init="xavier", init_kv_gain=0.5, kernel="math"),
    "fixed_gates": dict(fixed_heads={"enc_self": 2, "dec_self": 1}, concrete_gates=True, norm_first=True),
    "per_head": dict(impl="per_head", heads=2, d_k=8, d_v=4, init_wo="mup", init_wo_base=64, init_wo_gain=0.5),
    "identical": dict(init_heads="identical", init_heads_noise=0.01, init_ff2_gain=0.0, tie_embeddings=False),
}
out = {}
for name, kw in CASES.items():
    torch.manual_seed(0)
    cfg = TransformerConfig(**{**dict(vocab_size=50, d_model=16, n_layers=2, heads=4, d_ff=32, max_len=16), **kw})
    net = Transformer(cfg)
    out[f"{name}/keys"] = list(net.state_dict())
    for k, v in net.state_dict().items():
        out[f"{name}/init/{k}"] = v.clone()
    src = torch.randint(1, 50, (3, 7))
    src[0, 5:] = 0
    tgt = torch.randint(1, 50, (3, 6))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    net.train()
    for step in range(3):
        logits = net(src, tgt[:, :-1])
        loss = (
            torch.nn.functional.cross_entropy(logits.reshape(-1, 50), tgt[:, 1:].reshape(-1))
            + 0.01 * net.expected_open_heads()
        )
        out[f"{name}/logits{step}"] = logits.detach().clone()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for k, v in net.state_dict().items():
        out[f"{name}/final/{k}"] = v.clone()
    net.eval()
    with torch.no_grad():
        out[f"{name}/eval"] = net(src, tgt[:, :-1]).clone()
        layer = net.encoder[0].self_attn
        other = convert_impl(layer, "per_head" if layer.impl == "fused" else "fused").eval()
        x = torch.randn(3, 7, 16)
        out[f"{name}/layer"] = layer(x)[0].clone()
        out[f"{name}/converted"] = other(x)[0].clone()
        out[f"{name}/converted_keys"] = list(other.state_dict())
torch.save(out, sys.argv[1])
print(len(out), "entries saved to", sys.argv[1])
out["default_keys"] = list(Transformer(TransformerConfig()).state_dict())
torch.save(out, sys.argv[1])
print(out["default_keys"])
