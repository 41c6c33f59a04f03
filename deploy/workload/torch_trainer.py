"""A data-parallel PyTorch trainer that survives world restarts (fedgate
recovery: replace). gloo on CPU, NCCL where CUDA is there.

Fixed seeds; the batch of step t on rank r is drawn from a generator seeded
by (seed, t, r), so a run resumed from a checkpoint sees exactly the data an
uninterrupted run saw. Every --every steps, global rank 0 writes model and
optimizer state to FEDGATE_CHECKPOINT_DIR/step-<N> (written under a hidden
name, then renamed: complete when it appears); fedgate copies it to the
job's other sites. On start every rank resumes from the newest step-<N> in
its own FEDGATE_CHECKPOINT_DIR. Rank 0 prints the SHA-256 of the final
weights: an interrupted run must print the same digest as an uninterrupted
one.

--fail-rank R --fail-at-step T: rank R exits 1 at step T in world 0 only
(FEDGATE_RESTART=0), to test recovery from a failing rank.
"""
import argparse
import hashlib
import io
import os
import re
import sys
import time

import torch
import torch.distributed as dist


def newest_checkpoint(ckdir):
    if not ckdir or not os.path.isdir(ckdir):
        return None
    steps = [int(m.group(1)) for n in os.listdir(ckdir) if (m := re.fullmatch(r"step-(\d+)", n))]
    return max(steps) if steps else None


def batch(seed, step, rank, device):
    g = torch.Generator().manual_seed(seed * 1000003 + step * 1009 + rank)
    x = torch.randn(16, 32, generator=g)
    y = (x[:, :8].sum(dim=1, keepdim=True) * 0.25).tanh()
    return x.to(device), y.to(device)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--step-seconds", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-at-step", type=int, default=-1)
    args = ap.parse_args()

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    restart = int(os.environ.get("FEDGATE_RESTART", "0"))
    ckdir = os.environ.get("FEDGATE_CHECKPOINT_DIR", "")

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    newest = newest_checkpoint(ckdir)
    if newest is not None:
        state = torch.load(os.path.join(ckdir, f"step-{newest}"), map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
    print(f"trainer rank {rank}/{world}: world {restart}, starting at step {start}"
          f" (site {os.environ.get('FEDGATE_SITE', '?')}, master "
          f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')})", flush=True)

    for step in range(start, args.steps):
        if restart == 0 and rank == args.fail_rank and step == args.fail_at_step:
            print(f"trainer rank {rank}: failing at step {step} as asked", flush=True)
            os._exit(1)
        x, y = batch(args.seed, step, rank, device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        done = step + 1
        if rank == 0 and ckdir and done % args.every == 0 and done < args.steps:
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": done}, buf)
            tmp = os.path.join(ckdir, f".trainer-tmp-{done}")
            with open(tmp, "wb") as f:
                f.write(buf.getvalue())
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, os.path.join(ckdir, f"step-{done}"))
        time.sleep(args.step_seconds)

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    if rank == 0:
        print(f"trainer final weights sha256 {digest.hexdigest()} after {args.steps} steps, "
              f"world {restart}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
