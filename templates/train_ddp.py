"""A DDP training program to copy: torch, the standard library and scikit-learn's digits, nothing else.

Launch:  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc-per-node=2 --max-restarts=1 \
             train_ddp.py --out runs/digits
(the variable gives each restart a fresh rendezvous store: pytorch/pytorch#135712, notebook 03.)
         torchrun --standalone --nproc-per-node=4 train_ddp.py --out runs/big --precision bf16 --accumulate 2
It resumes by itself from the newest <out>/ckpt_<optimizer steps>.pt, so a torchrun restart (--max-restarts)
or a new launch after a preemption continues where the last checkpoint left off; with another process count
add --allow-resize (it continues from the last epoch's end). Replace the DATA and MODEL sections with your own;
the rest is the distributed machinery (see templates/README.md).
Test hooks (environment): FAULT=kill|term, FAULT_AT_STEP=<optimizer steps done>, FAULT_RANK=<rank, default 1>:
that rank SIGKILLs (or SIGTERMs) itself before that step, on torchrun's first attempt only.
"""
import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import random
import re
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  clean exit: imported before the group exists, it never holds it
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset


@dataclasses.dataclass
class Config:  # saved as <out>/config.json; a resume must use the same values (--allow-resize: but world_size)
    epochs: int = 6
    global_batch: int = 64      # samples per optimizer step, whatever the number of processes and micro-batches
    accumulate: int = 1         # micro-batches per optimizer step: one gradient all-reduce per step
    precision: str = "fp32"     # fp32 | bf16 (autocast, CPU and CUDA) | fp16 (autocast and GradScaler, CUDA only)
    lr: float = 3e-3            # OneCycle's peak learning rate
    weight_decay: float = 1e-4
    clip: float = 1.0           # max gradient norm
    workers: int = 2            # DataLoader worker processes per rank (0: load in the training process)
    seed: int = 0
    log_every: int = 10         # optimizer steps between log lines
    checkpoint_every: int = 50  # optimizer steps between checkpoints (0: at the end of each epoch only)
    keep_last: int = 3          # checkpoints kept, and the newest at an epoch's end (a resize starts there)
    world_size: int = 1         # filled in from torchrun's WORLD_SIZE


def parse_config() -> tuple[Config, argparse.Namespace, torch.device, str]:
    """Flags for every Config field; bad values stop every rank before anything starts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="run folder: config, checkpoints, log, final weights")
    parser.add_argument("--allow-resize", action="store_true",
                        help="resume with another process count, from the newest checkpoint at an epoch's end")
    for f in dataclasses.fields(Config):
        if f.name != "world_size":
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=f.type, default=f.default,
                                choices=("fp32", "bf16", "fp16") if f.name == "precision" else None)
    args = parser.parse_args()
    cfg = Config(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Config) if f.name != "world_size"},
                 world_size=int(os.environ.get("WORLD_SIZE", 1)))
    if min(cfg.epochs, cfg.accumulate, cfg.log_every, cfg.keep_last) < 1 or cfg.lr <= 0 or cfg.clip <= 0 \
            or min(cfg.workers, cfg.weight_decay, cfg.checkpoint_every) < 0:
        parser.error("need --epochs, --accumulate, --log-every and --keep-last >= 1, --lr > 0, --clip > 0, "
                     "--workers, --weight-decay and --checkpoint-every >= 0")
    per_step = cfg.world_size * cfg.accumulate  # micro-batches per optimizer step, over all processes
    if cfg.global_batch % per_step:
        fits = [str(k) for k in range(1, cfg.global_batch + 1) if cfg.global_batch % (cfg.world_size * k) == 0]
        parser.error(f"--global-batch {cfg.global_batch} is not divisible by {cfg.world_size} processes x "
                     f"--accumulate {cfg.accumulate}: choose a multiple of {per_step}"
                     + (f", or --accumulate {', '.join(fits)}" if fits else ""))
    device, why = choose_device(int(os.environ.get("LOCAL_RANK", 0)))
    if cfg.precision == "fp16" and device.type != "cuda":
        parser.error(f"--precision fp16 needs a GPU per process (its GradScaler works on CUDA), and this process "
                     f"runs on the CPU{why}: use --precision bf16 (no scaler needed) or fp32")
    return cfg, args, device, why


def write_json(obj: object, path: str) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)  # readers see the old file or the new one


def check_config(cfg: Config, out: str, allow_resize: bool) -> int | None:
    """Write config.json for a new run; refuse to resume a run made with other values. Returns the saved
    process count when --allow-resize accepts another one, else None."""
    path = os.path.join(out, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        changed = [f"{k}: saved {saved.get(k)}, now {v}" for k, v in dataclasses.asdict(cfg).items()
                   if saved.get(k) != v and k != "world_size"]
        if changed:
            sys.exit(f"{path} holds another configuration ({', '.join(changed)}). Resume with the saved values, "
                     "or give a new --out to start a new run.")
        if saved["world_size"] != cfg.world_size and not allow_resize:
            sys.exit(f"{path}: the run was made by {saved['world_size']} processes, this launch has "
                     f"{cfg.world_size}. Relaunch with {saved['world_size']} processes in all to continue where it "
                     f"stopped, or add --allow-resize to continue with {cfg.world_size} from its newest checkpoint "
                     "at an epoch's end (later steps run again).")
        return saved["world_size"] if saved["world_size"] != cfg.world_size else None
    if int(os.environ.get("RANK", 0)) == 0:
        os.makedirs(out, exist_ok=True)
        write_json(dataclasses.asdict(cfg), path)
    return None


# --- DATA: scikit-learn's 1797 digits, upsampled to MNIST's 1x28x28, split stratified -----------------
class Digits(Dataset):
    def __init__(self, images: torch.Tensor, labels: torch.Tensor, augment: bool) -> None:
        self.images, self.labels, self.augment = images, labels, augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[i]
        if self.augment:  # a random shift of up to 2 pixels: draws from this process's torch RNG
            image = torch.roll(image, shifts=torch.randint(-2, 3, (2,)).tolist(), dims=(1, 2))
        return image, self.labels[i]


def load_splits(seed: int) -> tuple[Digits, Digits, Digits]:
    digits = load_digits()  # bundled with scikit-learn: no download
    images = F.interpolate(torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16, size=(28, 28),
                           mode="bilinear", align_corners=False)
    labels = torch.tensor(digits.target)
    rest, test = train_test_split(range(len(labels)), test_size=359, stratify=labels, random_state=seed)
    train, val = train_test_split(rest, test_size=180, stratify=labels[rest], random_state=seed)
    mean, std = images[train].mean(), images[train].std()  # training statistics only: no leak
    images = (images - mean) / std
    return tuple(Digits(images[idx], labels[idx], augment=augment)
                 for idx, augment in ((train, True), (val, False), (test, False)))


# --- MODEL ------------------------------------------------------------------------------------------
def make_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


# --- the distributed machinery ----------------------------------------------------------------------
def init_worker(worker_id: int) -> None:
    """In each DataLoader worker. torch already seeds the worker's torch, random and NumPy from
    base_seed + worker_id; seed any other library your augmentation uses here, from that number.
    A preemption's SIGTERM reaches the workers too (torchrun signals each rank's process group): they
    ignore it, and the training process finishes its step, saves, and shuts them down."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # held since start_workers: now dropped
    random.seed(torch.initial_seed() % 2**32)  # the same as torch's own seeding; shown for the pattern


def start_workers(loader: DataLoader) -> object:
    """The epoch's iterator, its workers started with SIGTERM held until init_worker ignores it. Until
    then torch's handler in a worker (torch/csrc/DataLoader.cpp, handler_SIGTERM) dies of a SIGTERM
    that its parent did not send, and the rank with it: a preemption as an epoch starts crashed the run."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # children inherit the mask
    try:
        return iter(loader)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # here a held SIGTERM now sets stop_requested


@torch.no_grad()
def evaluate(model: nn.Module, ds: Dataset, rank: int, world: int, device: torch.device,
             amp: object) -> tuple[float, float]:
    """Exact: rank r scores items r, r+world, ...; every item once, no padding, sums all-reduced."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    for x, y in DataLoader(Subset(ds, range(rank, len(ds), world)), batch_size=256):
        y = y.to(device)
        with amp():
            logits = model(x.to(device)).float()
        sums[0] += F.cross_entropy(logits, y, reduction="sum").double()
        sums[1] += (logits.argmax(1) == y).sum()
        sums[2] += len(y)
    dist.all_reduce(sums)
    model.train()
    loss_sum, correct, count = sums.tolist()
    return loss_sum / count, correct / count


def atomic_save(obj: object, path: str) -> None:
    """Readers see the old file or the new one, never half a file, even after a power cut."""
    with open(path + ".tmp", "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the file
    os.replace(path + ".tmp", path)
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(folder)  # and the rename itself is on disk
    finally:
        os.close(folder)


CHECKPOINT = re.compile(r"ckpt_(\d{8})\.pt")  # named by the optimizer steps done


def checkpoints(out: str) -> list[int]:
    """The optimizer-step counts of out's checkpoints, oldest first; a .tmp is never one (atomic_save)."""
    return sorted(int(m[1]) for m in map(CHECKPOINT.fullmatch, os.listdir(out) if os.path.isdir(out) else []) if m)


def checkpoint_path(out: str, steps: int) -> str:
    return os.path.join(out, f"ckpt_{steps:08d}.pt")


def prune(out: str, keep_last: int, steps_per_epoch: int) -> None:
    """Keep the newest keep_last checkpoints and the newest at an epoch's end; called once the newest is on disk."""
    steps = checkpoints(out)
    boundary = [s for s in steps if s % steps_per_epoch == 0][-1:]
    for s in steps[:-keep_last]:
        if s not in boundary:
            os.remove(checkpoint_path(out, s))


def resume_point(out: str, steps_per_epoch: int | None, device: torch.device) -> int:
    """The checkpoint every rank loads (optimizer steps done; -1: none): the newest, or with steps_per_epoch the
    newest at an epoch's end. Rank 0 decides and every rank follows: on node-local disks the ranks could see
    different files, and ranks that disagree about resuming would wait for each other in different collectives."""
    steps = [s for s in checkpoints(out) if not steps_per_epoch or s % steps_per_epoch == 0]
    found = torch.tensor([steps[-1] if steps and dist.get_rank() == 0 else -1], device=device)
    dist.broadcast(found, src=0)
    return int(found.item())


def choose_device(local_rank: int) -> tuple[torch.device, str]:
    """This process's GPU when the node has one for every local process, else the CPU (gloo), and why. Two
    processes on one GPU (a laptop, a Colab T4) run on the CPU: NCCL refuses two ranks on one device."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if gpus >= local:
        return torch.device("cuda", local_rank), ""
    return torch.device("cpu"), f": {gpus} GPU for {local} processes on this node, NCCL needs one each" if gpus else ""


def restore(snap: dict, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: object,
            scaler: torch.amp.GradScaler) -> dict:
    """Load a checkpoint into the plain model (before the DDP wrap) and its companions; returns its state."""
    model.load_state_dict(snap["model"])
    optimizer.load_state_dict(snap["optimizer"])
    scheduler.load_state_dict(snap["scheduler"])  # the LR continues where it was
    scaler.load_state_dict(snap["scaler"])  # fp16: the loss scale continues too (a no-op when disabled)
    return snap["state"]


stop_requested = False  # set by SIGTERM (preemption: Slurm, Kubernetes, torchrun passing it on)


def on_sigterm(signum: int, frame: object) -> None:  # only a flag: the step in progress finishes first
    global stop_requested
    stop_requested = True


@record  # a failing rank's traceback goes into torchrun's error report
def main() -> None:
    cfg, args, device, why = parse_config()
    out, saved_world = args.out, check_config(cfg, args.out, args.allow_resize)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this process to its own GPU
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    signal.signal(signal.SIGTERM, on_sigterm)
    world, K = dist.get_world_size(), cfg.accumulate

    train_ds, val_ds, test_ds = load_splits(cfg.seed)  # the same splits on every rank
    sampler = DistributedSampler(train_ds, shuffle=True, seed=cfg.seed)  # same seed everywhere
    generator = torch.Generator()  # reseeded every epoch below: it decides the workers' seeds
    micro = cfg.global_batch // (world * K)  # per rank and micro-batch
    loader = DataLoader(train_ds, batch_size=micro, sampler=sampler, num_workers=cfg.workers, generator=generator,
                        worker_init_fn=init_worker, pin_memory=device.type == "cuda")  # pinned: see x.to below
    steps_per_epoch = math.ceil(len(loader) / K)  # optimizer steps; the last one may have fewer micro-batches
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = make_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=cfg.lr, total_steps=cfg.epochs * steps_per_epoch)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")  # bf16 has fp32's range: no scaler
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
    amp = functools.partial(torch.autocast, device.type, dtype=half, enabled=half is not None)

    # auto-resume: load into the plain model BEFORE wrapping (DDP broadcasts rank 0's weights once)
    state = {"epoch": 0, "step": 0, "sums": [], "history": []}
    found = resume_point(out, steps_per_epoch if saved_world else None, device)
    how = "new run"
    if found >= 0:  # every rank reads it: the folder must be shared (or copied to every node)
        snap = torch.load(checkpoint_path(out, found), map_location=device, weights_only=True)
        if snap["scheduler"]["total_steps"] != scheduler.total_steps:  # a resize changed the steps per epoch
            sys.exit(f"{checkpoint_path(out, found)} plans {snap['scheduler']['total_steps']} optimizer steps, "
                     f"this launch {scheduler.total_steps}: relaunch with the process count that made it")
        state = restore(snap, model, optimizer, scheduler, scaler)
        how = f"resumed at epoch {state['epoch']} step {state['step']} ({os.path.basename(checkpoint_path(out, found))})"
    if saved_world:  # --allow-resize: later checkpoints were made by the old process count; they go
        later = [s for s in checkpoints(out) if s > found]
        how += f", made by {saved_world} processes; {len(later)} later checkpoints removed"
        dist.barrier()  # every rank has read the folder before rank 0 changes it
        if rank == 0:
            for s in later:
                os.remove(checkpoint_path(out, s))
            write_json(dataclasses.asdict(cfg), os.path.join(out, "config.json"))
    if rank == 0:
        print(f"attempt {attempt}: {how}; {world} processes x {K} micro-batches of {micro} = global batch "
              f"{cfg.global_batch}, {cfg.precision} on {device} ({'nccl' if device.type == 'cuda' else 'gloo'}{why}), "
              f"{cfg.workers} loader workers per process")
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)

    def save(epoch: int, step: int, sums: torch.Tensor) -> None:  # every rank calls it
        per_rank = [torch.zeros_like(sums) for _ in range(world)]
        if step:  # mid-epoch: each rank's partial loss sums, for each to continue its own
            dist.all_gather(per_rank, sums)
        if rank == 0:  # one writer
            atomic_save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                         "state": {"epoch": epoch, "step": step, "sums": [s.tolist() for s in per_rank] if step else [],
                                   "history": state["history"]}}, checkpoint_path(out, epoch * steps_per_epoch + step))
            prune(out, cfg.keep_last, steps_per_epoch)  # only now: the new checkpoint is on disk
        dist.barrier()  # the checkpoint exists before any rank goes on, exits or is killed

    fault, fault_step = os.environ.get("FAULT"), int(os.environ.get("FAULT_AT_STEP", -1))
    for epoch in range(state["epoch"], cfg.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        epoch_seed = cfg.seed + 10_000 * epoch + rank  # differs per rank and epoch; a resume recomputes it
        generator.manual_seed(epoch_seed)
        torch.manual_seed(epoch_seed)  # augmentation in this process when workers == 0
        step = state["step"] if epoch == state["epoch"] else 0  # optimizer steps done in this epoch
        sums = torch.tensor(state["sums"][rank] if step else [0.0] * 3, dtype=torch.float64, device=device)
        logged, logged_step, logged_at = sums.clone(), step, time.perf_counter()  # loss, samples, norm sums
        start, seen, stop = logged_at, 0, False
        for i, (x, y) in enumerate(start_workers(loader)):
            if i < step * K:
                continue  # replayed, not trained on: the data and RNG draws stay those of the first run
            done = epoch * steps_per_epoch + step  # optimizer steps done before this micro-batch
            if fault and attempt == 0 and rank == int(os.environ.get("FAULT_RANK", 1)) and done == fault_step \
                    and i % K == 0:
                os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGTERM)
            last = i % K == K - 1 or i == len(loader) - 1  # the optimizer step's last micro-batch
            group = min(K, len(loader) - i // K * K)  # micro-batches in this optimizer step
            # pinned memory and non_blocking: the copy does not wait for the GPU (a pageable one does:
            # aten/src/ATen/native/cuda/Copy.cu, copy_kernel_cuda, memcpy_and_sync)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with contextlib.nullcontext() if last else model.no_sync():  # no_sync: gradients wait in .grad
                with amp():
                    loss = F.cross_entropy(model(x), y)
                scaler.scale(loss / group).backward()  # the last micro-batch's backward all-reduces the sum
            sums[0] += loss.detach().double() * len(y)  # summed on the device: no host sync
            sums[1] += len(y)
            seen += len(y) * world
            if not last:
                continue
            scaler.unscale_(optimizer)  # fp16: the true gradients, before clipping (no-op otherwise)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)  # the norm before clipping
            scaler.step(optimizer)  # fp16: skips a step whose gradients overflowed (it reads found_inf: a sync)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            sums[2] += grad_norm.detach().double()  # the same on every rank: DDP averaged the gradients
            step += 1
            log_now = (done + 1) % cfg.log_every == 0
            save_now = cfg.checkpoint_every and (done + 1) % cfg.checkpoint_every == 0 and step < steps_per_epoch
            # The host waits for the device only at log and checkpoint steps and at the epoch's end, and only
            # there do the ranks learn of a SIGTERM: the run stops up to that many steps late, which must take
            # less than the grace period before SIGKILL (Slurm's KillWait, Kubernetes' 30 s); reading the flag
            # every step would stall the GPU queue every step.
            sync_now = log_now or save_now or step == steps_per_epoch
            if sync_now:
                window = torch.cat([sums - logged, torch.tensor([float(stop_requested)], device=device)])
                dist.all_reduce(window)  # the window's sums over the ranks; > 0 at the end: a rank got SIGTERM
                loss_sum, count, norm_sum, stop = window.tolist()
                if log_now:
                    now = time.perf_counter()
                    if rank == 0:
                        print(f"step {done + 1}: loss {loss_sum / count:.4f}  grad norm "
                              f"{norm_sum / (world * (step - logged_step)):.3f}  lr {scheduler.get_last_lr()[0]:.3e}  "
                              f"samples/s {count / (now - logged_at):.1f}")
                    logged, logged_step, logged_at = sums.clone(), step, now
                if step < steps_per_epoch and (save_now or stop):
                    save(epoch, step, sums)
                    if stop:
                        break
        else:  # the epoch ran to its end (no break)
            dist.all_reduce(sums)
            val_loss, val_acc = evaluate(model.module, val_ds, rank, world, device, amp)  # plain module
            loss_sum, count, norm_sum = sums.tolist()  # norm_sum: every rank's (equal) norms, all-reduced
            row = {"epoch": epoch, "attempt": attempt, "train_loss": loss_sum / count,
                   "grad_norm": norm_sum / (world * steps_per_epoch), "val_loss": val_loss, "val_accuracy": val_acc,
                   "lr": scheduler.get_last_lr()[0], "samples_per_s": seen / (time.perf_counter() - start)}
            state["history"].append(row)
            if rank == 0:
                print(f"epoch {epoch}: train loss {row['train_loss']:.4f}  grad norm {row['grad_norm']:.3f}  val loss "
                      f"{val_loss:.4f}  val accuracy {val_acc:.4f}  lr {row['lr']:.3e}  samples/s {row['samples_per_s']:.1f}")
                write_json(state["history"], os.path.join(out, "log.json"))
            save(epoch + 1, 0, sums)
        if stop:
            at = (epoch, step) if step < steps_per_epoch else (epoch + 1, 0)  # where the next launch goes on
            if rank == 0:
                print(f"SIGTERM: stopped at epoch {at[0]} step {at[1]}, "
                      f"{os.path.basename(checkpoint_path(out, at[0] * steps_per_epoch + at[1]))} saved")
            break  # exit code 0: the scheduler may relaunch; the run resumes from the checkpoint
    else:
        test_loss, test_acc = evaluate(model.module, test_ds, rank, world, device, amp)
        if rank == 0:
            atomic_save(model.module.state_dict(), os.path.join(out, "final.pt"))
            write_json({"test_loss": test_loss, "test_accuracy": test_acc, "test_count": len(test_ds)},
                       os.path.join(out, "result.json"))
            print(f"test: accuracy {test_acc:.4f} on {len(test_ds)} images")
    dist.barrier()  # clean exit: every rank is done (its files written) before any rank ends the group
    model = None  # nothing may hold the group when it is destroyed (the DDP model does; save() sees it: no del)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
