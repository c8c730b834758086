"""A DDP training program to copy: torch, the standard library and scikit-learn's digits, nothing else.

Launch:  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc-per-node=2 --max-restarts=1 \
             train_ddp.py --out runs/digits
(the variable gives each restart a fresh rendezvous store: pytorch/pytorch#135712, notebook 03.)
It resumes by itself when <out>/snapshot.pt exists, so a torchrun restart (--max-restarts) or a new
launch after a preemption continues where the last snapshot left off. Replace the DATA and MODEL
sections with your own; the rest is the distributed machinery (see templates/README.md).
Test hooks (environment): FAULT=kill|term, FAULT_AT_STEP=<global step>, FAULT_RANK=<rank, default 1>:
that rank SIGKILLs (or SIGTERMs) itself before that step, on torchrun's first attempt only.
"""
import argparse
import dataclasses
import json
import os
import random
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group, or it holds the group at exit (notebook 04)
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset


@dataclasses.dataclass
class Config:  # saved as <out>/config.json; a resume must use the same values
    epochs: int = 6
    global_batch: int = 64   # what the optimiser sees per step, whatever the number of processes
    lr: float = 3e-3         # OneCycle's peak learning rate
    weight_decay: float = 1e-4
    clip: float = 1.0        # max gradient norm
    workers: int = 2         # DataLoader worker processes per rank (0: load in the training process)
    seed: int = 0
    world_size: int = 1      # filled in from torchrun's WORLD_SIZE


def parse_config() -> tuple[Config, str]:
    """Flags for every Config field; bad values stop every rank before anything starts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="run folder: config, snapshot, log, final weights")
    for f in dataclasses.fields(Config):
        if f.name != "world_size":
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=f.type, default=f.default)
    args = parser.parse_args()
    cfg = Config(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Config) if f.name != "world_size"},
                 world_size=int(os.environ.get("WORLD_SIZE", 1)))
    if cfg.epochs < 1 or cfg.lr <= 0 or cfg.clip <= 0 or cfg.workers < 0 or cfg.weight_decay < 0:
        parser.error("need --epochs >= 1, --lr > 0, --clip > 0, --workers >= 0 and --weight-decay >= 0")
    if cfg.global_batch % cfg.world_size:
        parser.error(f"--global-batch {cfg.global_batch} is not divisible by {cfg.world_size} processes: "
                     "choose a multiple of the process count")
    return cfg, args.out


def check_config(cfg: Config, out: str) -> None:
    """Write config.json for a new run; refuse to resume a run made with other values."""
    path = os.path.join(out, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        changed = [f"{k}: saved {saved.get(k)}, now {v}" for k, v in dataclasses.asdict(cfg).items() if saved.get(k) != v]
        if changed:
            sys.exit(f"{path} holds another configuration ({', '.join(changed)}). Resume with the saved values, "
                     "or give a new --out to start a new run.")
    elif int(os.environ.get("RANK", 0)) == 0:
        os.makedirs(out, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(dataclasses.asdict(cfg), f, indent=1)
        os.replace(path + ".tmp", path)


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
def evaluate(model: nn.Module, ds: Dataset, rank: int, world: int, device: torch.device) -> tuple[float, float]:
    """Exact: rank r scores items r, r+world, ...; every item once, no padding, sums all-reduced."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    for x, y in DataLoader(Subset(ds, range(rank, len(ds), world)), batch_size=256):
        logits = model(x.to(device))
        y = y.to(device)
        sums += torch.stack([F.cross_entropy(logits, y, reduction="sum").double(),
                             (logits.argmax(1) == y).sum().double(), torch.tensor(len(y), device=device).double()])
    dist.all_reduce(sums)
    model.train()
    return (sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()


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


def choose_device(local_rank: int) -> torch.device:
    """This process's GPU when the node has one for every local process, else the CPU (gloo). Two
    processes on one GPU (a laptop, a Colab T4) run on the CPU: NCCL refuses two ranks on one device."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def snapshot_exists(path: str, device: torch.device) -> bool:
    """Rank 0 decides and every rank follows: on node-local disks the ranks could see different files,
    and ranks that disagree about resuming would wait for each other in different collectives."""
    found = torch.tensor([float(dist.get_rank() == 0 and os.path.exists(path))], device=device)
    dist.broadcast(found, src=0)
    return bool(found.item())


stop_requested = False  # set by SIGTERM (preemption: Slurm, Kubernetes, torchrun passing it on)


def on_sigterm(signum: int, frame: object) -> None:  # only a flag: the step in progress finishes first
    global stop_requested
    stop_requested = True


@record  # a failing rank's traceback goes into torchrun's error report
def main() -> None:
    cfg, out = parse_config()
    check_config(cfg, out)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    device = choose_device(local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this process to its own GPU
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    signal.signal(signal.SIGTERM, on_sigterm)
    world = dist.get_world_size()

    train_ds, val_ds, test_ds = load_splits(cfg.seed)  # the same splits on every rank
    sampler = DistributedSampler(train_ds, shuffle=True, seed=cfg.seed)  # same seed everywhere
    generator = torch.Generator()  # reseeded every epoch below: it decides the workers' seeds
    loader = DataLoader(train_ds, batch_size=cfg.global_batch // world, sampler=sampler,
                        num_workers=cfg.workers, generator=generator, worker_init_fn=init_worker)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = make_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=cfg.lr, total_steps=cfg.epochs * len(loader))

    # auto-resume: load into the plain model BEFORE wrapping (DDP broadcasts rank 0's weights once)
    state = {"epoch": 0, "step": 0, "sums": [], "history": []}
    snapshot_path = os.path.join(out, "snapshot.pt")
    resume = snapshot_exists(snapshot_path, device)
    if resume:  # every rank reads it: the folder must be shared (or copied to every node)
        snap = torch.load(snapshot_path, map_location=device, weights_only=True)
        model.load_state_dict(snap["model"])
        optimizer.load_state_dict(snap["optimizer"])
        scheduler.load_state_dict(snap["scheduler"])  # the LR continues where it was
        state = snap["state"]
    if rank == 0:
        how = f"resumed at epoch {state['epoch']} step {state['step']}" if resume else "new run"
        print(f"attempt {attempt}: {how}; {world} processes x batch {cfg.global_batch // world} = "
              f"global batch {cfg.global_batch}, {cfg.workers} loader workers per process")
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)

    def save(epoch: int, step: int, sums: list) -> None:  # every rank calls it
        if rank == 0:  # one writer
            atomic_save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "state": {"epoch": epoch, "step": step, "sums": sums,
                                                                        "history": state["history"]}}, snapshot_path)
        dist.barrier()  # the snapshot exists before any rank goes on, exits or is killed

    fault, fault_step = os.environ.get("FAULT"), int(os.environ.get("FAULT_AT_STEP", -1))
    for epoch in range(state["epoch"], cfg.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        epoch_seed = cfg.seed + 10_000 * epoch + rank  # differs per rank and epoch; a resume recomputes it
        generator.manual_seed(epoch_seed)
        torch.manual_seed(epoch_seed)  # augmentation in this process when workers == 0
        skip = state["step"] if epoch == state["epoch"] else 0  # batches done before a preemption
        sums = torch.tensor(state["sums"][rank] if skip else [0.0, 0.0, 0.0], dtype=torch.float64, device=device)
        start, seen = time.perf_counter(), 0
        for step, (x, y) in enumerate(start_workers(loader)):
            if step < skip:
                continue  # replayed, not trained on: the data and RNG draws stay those of the first run
            global_step = epoch * len(loader) + step
            if fault and attempt == 0 and rank == int(os.environ.get("FAULT_RANK", 1)) and global_step == fault_step:
                os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGTERM)
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP averages the gradients here: the norm below is the same on every rank
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)  # the norm before clipping
            optimizer.step()
            scheduler.step()
            sums += torch.stack([loss.detach().double() * len(y), torch.tensor(len(y), device=device).double(),
                                 grad_norm.detach().double()])  # summed on the device: no host sync per step
            seen += len(y) * world
            flag = torch.tensor([float(stop_requested)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # one rank's SIGTERM stops every rank at this step
            if flag.item():
                per_rank = [torch.zeros_like(sums) for _ in range(world)]
                dist.all_gather(per_rank, sums)  # each rank's partial loss sums: each continues its own
                save(epoch, step + 1, [s.tolist() for s in per_rank])
                if rank == 0:
                    print(f"SIGTERM: stopped after epoch {epoch} step {step + 1}, snapshot saved")
                model = None  # nothing may hold the group when it is destroyed (notebook 04, "Ending the group")
                dist.destroy_process_group()
                return  # exit code 0: the scheduler may relaunch; the run resumes from the snapshot
        dist.all_reduce(sums)
        val_loss, val_acc = evaluate(model.module, val_ds, rank, world, device)  # plain module: no collectives
        # sums[2] is each rank's sum of the (equal) per-step norms, all-reduced: divide by world x steps
        row = {"epoch": epoch, "attempt": attempt, "train_loss": (sums[0] / sums[1]).item(),
               "grad_norm": (sums[2] / (world * len(loader))).item(), "val_loss": val_loss,
               "val_accuracy": val_acc, "lr": scheduler.get_last_lr()[0],
               "samples_per_s": seen / (time.perf_counter() - start)}
        state["history"].append(row)
        if rank == 0:
            print(f"epoch {epoch}: train loss {row['train_loss']:.4f}  grad norm {row['grad_norm']:.3f}  val loss "
                  f"{val_loss:.4f}  val accuracy {val_acc:.4f}  lr {row['lr']:.3e}  samples/s {row['samples_per_s']:.1f}")
            with open(os.path.join(out, "log.json.tmp"), "w") as f:
                json.dump(state["history"], f, indent=1)
            os.replace(os.path.join(out, "log.json.tmp"), os.path.join(out, "log.json"))
        save(epoch + 1, 0, [])

    test_loss, test_acc = evaluate(model.module, test_ds, rank, world, device)
    if rank == 0:
        atomic_save(model.module.state_dict(), os.path.join(out, "final.pt"))
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump({"test_loss": test_loss, "test_accuracy": test_acc, "test_count": len(test_ds)}, f)
        print(f"test: accuracy {test_acc:.4f} on {len(test_ds)} images")
    dist.barrier()  # every rank is done with the group before any rank frees it
    model = None  # the DDP model holds the group: drop it first
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
