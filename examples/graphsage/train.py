#!/usr/bin/env python3
"""Distributed GraphSAGE node classification with DistDGL (DGL 2.1.0, CPU, gloo).

One script plays both DistDGL roles; the environment decides which:

* ``DGL_ROLE=server``: ``dgl.distributed.initialize()`` loads this machine's
  partition (``DGL_CONF_PATH``), serves it to the trainers and never returns;
  the process exits 0 once every trainer has disconnected.
* ``DGL_ROLE=client`` (started through ``python -m torch.distributed.run``):
  connects to all servers, joins a gloo process group and trains with
  DistributedDataParallel.

dglrun passes the arguments of the earlier Go operator:

    train.py --graph_name G --ip_config FILE --num_epochs E --batch_size B --num_workers S

Output contract (parsed by dglrun and the tests), one line per epoch and rank:

    epoch=<i> loss=<mean batch loss> rank=<torch rank> train_acc=<..> steps=<n> seconds=<..>

then ``eval rank=<r> val_acc=<..> test_acc=<..>`` and ``training done rank=<r>``.
Rank 0 also prints dglrun's progress line after each epoch (``report_progress``),
which ``kubectl get dgljobs`` shows as ``epoch <n>/<E>``.
The exit status is 0 only if training finished; any exception exits 1.

Failure injection for tests (off unless set):
    DGL_EXAMPLE_CRASH_AT_EPOCH=N   the trainer whose rank is DGL_EXAMPLE_CRASH_RANK
                                   (default 0) exits with status 3 when epoch N starts.
"""

import argparse
import os
import sys
import time
import traceback

# Without this DGL prints a warning on import and writes ~/.dgl/config.json,
# which a pod with a read-only home directory may not allow.
os.environ.setdefault("DGLBACKEND", "pytorch")

CRASH_EXIT_CODE = 3


def report_progress(epoch, epochs=None, loss=None, throughput=None, unit=None):
    """Print dglrun's progress line (docs/user-guide.md, "Live progress").

    Only ``epoch`` is required; a number that is not finite is left out
    (JSON has no NaN). Scripts that print nothing of the kind work as before.
    """
    import json
    import math
    fields = {"epoch": epoch, "epochs": epochs, "loss": loss,
              "throughput": throughput, "unit": unit}
    fields = {k: v for k, v in fields.items() if v is not None
              and not (isinstance(v, float) and not math.isfinite(v))}
    print("DGLRUN_PROGRESS " + json.dumps(fields, separators=(",", ":")), flush=True)


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parse_fanout(text):
    try:
        fanouts = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise argparse.ArgumentTypeError(f"each fan-out must be >= 1 or -1 (all), got {text!r}")
    return fanouts


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Distributed GraphSAGE trainer/server for DistDGL. The DGL_* environment "
                    "(set by dglrun) selects the role; see README.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--graph_name", required=True,
                   help="graph name used by partition.py (the partition JSON's 'graph_name')")
    p.add_argument("--ip_config", default=None,
                   help="DistDGL ip_config file: one 'IP [PORT]' line per machine, in partition "
                        "order. Required unless DGL_DIST_MODE=standalone")
    p.add_argument("--part_config", default=os.environ.get("DGL_CONF_PATH"),
                   help="partition JSON (G.json); defaults to $DGL_CONF_PATH. Needed by servers "
                        "and in standalone mode")
    p.add_argument("--num_epochs", type=positive_int, default=3, help="training epochs")
    p.add_argument("--batch_size", type=positive_int, default=100, help="seed nodes per mini-batch")
    p.add_argument("--num_workers", type=non_negative_int, default=None,
                   help="sampler processes per trainer. DGL 2.x takes this from DGL_NUM_SAMPLER "
                        "(set by the launcher); the flag is accepted for the Go operator's "
                        "command line and must agree with it when both are given")
    p.add_argument("--num_hidden", type=positive_int, default=32, help="hidden layer width")
    p.add_argument("--fan_out", type=parse_fanout, default=[10, 10],
                   help="neighbours sampled per layer, comma separated; its length is the "
                        "number of GraphSAGE layers")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    p.add_argument("--dropout", type=float, default=0.2, help="dropout between layers")
    p.add_argument("--seed", type=int, default=0, help="torch seed for model initialisation")
    p.add_argument("--eval_batch_size", type=positive_int, default=1000,
                   help="seed nodes per mini-batch during the final evaluation")
    p.add_argument("--no_eval", action="store_true", help="skip the final val/test evaluation")
    p.add_argument("--use_graphbolt", action="store_true",
                   help="servers load GraphBolt partitions (fused_csc_sampling_graph.pt) and "
                        "sample with GraphBolt (dgl.distributed.initialize(use_graphbolt=True))")
    # torch.distributed.launch passes --local_rank / --local-rank; torchrun sets LOCAL_RANK.
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    mode = os.environ.get("DGL_DIST_MODE", "standalone")
    role = os.environ.get("DGL_ROLE", "client")
    if mode != "standalone" and not args.ip_config:
        p.error("--ip_config is required when DGL_DIST_MODE is not 'standalone'")
    if args.ip_config and not os.path.isfile(args.ip_config):
        p.error(f"--ip_config: file not found: {args.ip_config}")
    if (role == "server" or mode == "standalone") and not args.part_config:
        p.error("--part_config (or DGL_CONF_PATH) is required for servers and in standalone mode")
    if args.part_config and (role == "server" or mode == "standalone") \
            and not os.path.isfile(args.part_config):
        p.error(f"--part_config: file not found: {args.part_config}")
    env_samplers = os.environ.get("DGL_NUM_SAMPLER")
    if args.num_workers is not None and env_samplers is not None \
            and int(env_samplers) != args.num_workers:
        p.error(f"--num_workers={args.num_workers} disagrees with DGL_NUM_SAMPLER={env_samplers}; "
                "DGL starts DGL_NUM_SAMPLER sampler processes and DGL_NUM_CLIENT counts them")
    return args


def crash_epoch_from_env():
    """Return (epoch, rank) of the injected crash, or (None, None) when not requested."""
    raw = os.environ.get("DGL_EXAMPLE_CRASH_AT_EPOCH")
    if raw in (None, ""):
        return None, None
    try:
        epoch = int(raw)
        rank = int(os.environ.get("DGL_EXAMPLE_CRASH_RANK", "0"))
    except ValueError:
        raise SystemExit(f"DGL_EXAMPLE_CRASH_AT_EPOCH/DGL_EXAMPLE_CRASH_RANK must be integers, "
                         f"got {raw!r}/{os.environ.get('DGL_EXAMPLE_CRASH_RANK')!r}")
    return epoch, rank


def build_model(in_feats, n_hidden, n_classes, n_layers, dropout):
    import torch.nn as nn
    import torch.nn.functional as F
    import dgl.nn.pytorch as dglnn

    class SAGE(nn.Module):
        def __init__(self):
            super().__init__()
            dims = [in_feats] + [n_hidden] * (n_layers - 1) + [n_classes]
            self.layers = nn.ModuleList(
                dglnn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(n_layers))
            self.dropout = nn.Dropout(dropout)

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)
                if i != len(self.layers) - 1:
                    h = self.dropout(F.relu(h))
            return h

    return SAGE()


def evaluate(model, g, nids, sampler, batch_size):
    """Sampled-neighbour accuracy on `nids`; returns (correct, total) for this rank."""
    import torch
    import dgl

    correct, total = 0, 0
    if len(nids) == 0:
        return correct, total
    loader = dgl.dataloading.DistNodeDataLoader(
        g, nids, sampler, batch_size=batch_size, shuffle=False, drop_last=False)
    model.eval()
    with torch.no_grad():
        for input_nodes, seeds, blocks in loader:
            x = g.ndata["features"][input_nodes]
            y = g.ndata["labels"][seeds].long()
            pred = model(blocks, x).argmax(dim=1)
            correct += int((pred == y).sum())
            total += len(y)
    model.train()
    return correct, total


def run(args):
    import numpy as np
    import torch
    import torch.nn as nn
    import dgl

    crash_epoch, crash_rank = crash_epoch_from_env()

    # Servers stay inside initialize() until all trainers are gone, then exit 0.
    # use_graphbolt matters to the servers (they load the partition); the
    # trainers ask server 0 which format it serves.
    dgl.distributed.initialize(args.ip_config, use_graphbolt=args.use_graphbolt)

    distributed = os.environ.get("DGL_DIST_MODE", "standalone") != "standalone"
    if distributed:
        # Rendezvous through torchrun's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE.
        torch.distributed.init_process_group(backend="gloo")
        rank = torch.distributed.get_rank()
        world = torch.distributed.get_world_size()
    else:
        rank, world = 0, 1
    torch.manual_seed(args.seed)

    g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
    pb = g.get_partition_book()
    for key in ("features", "labels", "train_mask", "val_mask", "test_mask"):
        if key not in g.ndata:
            raise KeyError(f"graph {args.graph_name!r} has no node data {key!r}; "
                           f"was it made by partition.py?")

    # force_even gives every trainer the same number of seeds, hence the same
    # number of mini-batches, so DDP's all-reduces line up across ranks.
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    val_nid = dgl.distributed.node_split(g.ndata["val_mask"], pb, force_even=True)
    test_nid = dgl.distributed.node_split(g.ndata["test_mask"], pb, force_even=True)

    labels = g.ndata["labels"][np.arange(g.num_nodes())]
    n_classes = int(labels.max()) + 1
    in_feats = g.ndata["features"].shape[1]
    print(f"setup rank={rank} world={world} part={pb.partid} nodes={g.num_nodes()} "
          f"edges={g.num_edges()} train={len(train_nid)} val={len(val_nid)} "
          f"test={len(test_nid)} classes={n_classes} feat_dim={in_feats}", flush=True)

    sampler = dgl.dataloading.NeighborSampler(args.fan_out)
    loader = dgl.dataloading.DistNodeDataLoader(
        g, train_nid, sampler, batch_size=args.batch_size, shuffle=True, drop_last=False)

    model = build_model(in_feats, args.num_hidden, n_classes, len(args.fan_out), args.dropout)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(args.num_epochs):
        if crash_epoch is not None and epoch == crash_epoch and rank == crash_rank:
            print(f"injected crash epoch={epoch} rank={rank} exit={CRASH_EXIT_CODE}", flush=True)
            sys.stderr.flush()
            # _exit without any cleanup: die like a killed process (no DGL
            # shutdown handshake; sampler processes, if any, are left behind
            # as they would be after a SIGKILL or an OOM kill).
            os._exit(CRASH_EXIT_CODE)
        tic = time.time()
        loss_sum, correct, seen, steps = 0.0, 0, 0, 0
        for input_nodes, seeds, blocks in loader:
            x = g.ndata["features"][input_nodes]
            y = g.ndata["labels"][seeds].long()
            logits = model(blocks, x)
            loss = loss_fn(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            correct += int((logits.argmax(dim=1) == y).sum())
            seen += len(y)
            steps += 1
            if epoch == 0 and steps == 1:
                # `cargo xtask bench latency` times apply -> this line.
                print(f"first step rank={rank}", flush=True)
        mean_loss = loss_sum / max(steps, 1)
        train_acc = correct / max(seen, 1)
        seconds = time.time() - tic
        print(f"epoch={epoch} loss={mean_loss:.4f} rank={rank} train_acc={train_acc:.4f} "
              f"steps={steps} seconds={seconds:.2f}", flush=True)
        if rank == 0:
            report_progress(epoch + 1, args.num_epochs, mean_loss,
                            seen / max(seconds, 1e-9), "samples/s")

    if not args.no_eval:
        module = model.module if distributed else model
        vc, vt = evaluate(module, g, val_nid, sampler, args.eval_batch_size)
        tc, tt = evaluate(module, g, test_nid, sampler, args.eval_batch_size)
        counts = torch.tensor([vc, vt, tc, tt], dtype=torch.float64)
        if distributed:
            torch.distributed.all_reduce(counts)  # accuracy over all ranks' nodes
        vc, vt, tc, tt = counts.tolist()
        print(f"eval rank={rank} val_acc={vc / max(vt, 1):.4f} test_acc={tc / max(tt, 1):.4f}",
              flush=True)

    if distributed:
        # Leave together: the last client's exit tells the DGL servers to shut down.
        torch.distributed.barrier()
    print(f"training done rank={rank}", flush=True)


def kill_own_children():
    """Kill this process's descendants (DGL's sampler processes).

    They would outlive an os._exit() of the trainer: torchrun puts each trainer
    in its own session and only signals trainers that are still running.
    """
    try:
        import psutil
        for child in psutil.Process().children(recursive=True):
            child.kill()
    except Exception as e:  # best effort on the way out
        print(f"warning: could not kill sampler processes: {e}", file=sys.stderr)


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        kill_own_children()
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip atexit handlers: DGL's client shutdown waits on the other
        # trainers and would keep a failed process alive.
        os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
