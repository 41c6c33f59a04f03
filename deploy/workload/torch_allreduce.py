"""A real torch.distributed program for fedgate: gloo over env://, nothing else set.

Every rank contributes rank + 1; after all_reduce every element must equal
world * (world + 1) / 2. Exits non-zero otherwise.
"""
import sys

import torch
import torch.distributed as dist


def main() -> int:
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((4096,), float(rank + 1))
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    ok = bool(torch.all(t == want))
    print(f"torch rank {rank}/{world}: gloo all_reduce {'OK' if ok else 'WRONG'}, "
          f"every element = {t[0].item():.0f}", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
