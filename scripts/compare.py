import sys

import torch

a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert a.keys() == b.keys(), set(a) ^ set(b)
bad = [k for k in a if (not torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] != b[k])]
print(f"{len(a)} entries compared, {len(bad)} differ", bad[:10])
sys.exit(1 if bad else 0)
