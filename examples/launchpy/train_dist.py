#!/usr/bin/env python3
"""Distributed GraphSAGE node classification, written as DGL users write
their DistDGL scripts: the command line of DGL's own example
(examples/distributed/graphsage/node_classification.py), parsed strictly
(argparse's parse_args(): any argument it does not declare is an error), the
DGL servers and trainers told apart by DGL's environment (DGL_ROLE, ...), as
DGL's tools/launch.py starts them:

    python3 train_dist.py --graph_name G --ip_config ip_config.txt --num_epochs 30 --batch_size 1000

dglrun runs it the same way with `--train-command` (examples/launchpy/dgljob.yaml).

Besides DGL's progress lines it prints one line per epoch and rank,
``epoch=<i> loss=<mean batch loss> rank=<rank> steps=<n> seconds=<s>``, which
the tests read.
"""

import argparse
import os
import socket
import time

os.environ.setdefault("DGLBACKEND", "pytorch")


def parse_args():
    p = argparse.ArgumentParser(description="Distributed GraphSAGE.")
    p.add_argument("--graph_name", type=str, help="graph name")
    p.add_argument("--ip_config", type=str, help="the file for IP configuration")
    p.add_argument("--part_config", type=str, help="the path to the partition config file")
    p.add_argument("--n_classes", type=int, default=0, help="the number of classes (0: count)")
    p.add_argument("--backend", type=str, default="gloo", help="pytorch distributed backend")
    p.add_argument("--num_gpus", type=int, default=0, help="GPUs; 0 for CPU training")
    p.add_argument("--num_epochs", type=int, default=20)
    p.add_argument("--num_hidden", type=int, default=16)
    p.add_argument("--num_layers", type=int, default=2)
    p.add_argument("--fan_out", type=str, default="10,25")
    p.add_argument("--batch_size", type=int, default=1000)
    p.add_argument("--batch_size_eval", type=int, default=100000)
    p.add_argument("--log_every", type=int, default=20)
    p.add_argument("--eval_every", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--local_rank", type=int, help="rank of the process (torch.distributed.launch)")
    p.add_argument("--pad-data", default=False, action="store_true",
                   help="pad the training ids to the same length on every machine")
    return p.parse_args()


def sage(in_feats, n_hidden, n_classes, n_layers, dropout):
    import torch.nn as nn
    import torch.nn.functional as F
    import dgl.nn.pytorch as dglnn

    class DistSAGE(nn.Module):
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

    return DistSAGE()


def accuracy(model, g, nids, fanouts, batch_size):
    """Correct and total predictions over `nids`, neighbours sampled."""
    import torch as th
    import dgl

    correct, total = 0, 0
    if len(nids) == 0:
        return correct, total
    loader = dgl.dataloading.DistNodeDataLoader(
        g, nids, dgl.dataloading.NeighborSampler(fanouts),
        batch_size=batch_size, shuffle=False, drop_last=False)
    model.eval()
    with th.no_grad():
        for input_nodes, seeds, blocks in loader:
            pred = model(blocks, g.ndata["features"][input_nodes]).argmax(1)
            correct += int((pred == g.ndata["labels"][seeds].long()).sum())
            total += len(seeds)
    model.train()
    return correct, total


def train(args, g, train_nid, val_nid, test_nid, n_classes):
    import numpy as np
    import torch as th
    import dgl

    fanouts = [int(f) for f in args.fan_out.split(",")]
    loader = dgl.dataloading.DistNodeDataLoader(
        g, train_nid, dgl.dataloading.NeighborSampler(fanouts),
        batch_size=args.batch_size, shuffle=True, drop_last=False)
    model = sage(g.ndata["features"].shape[1], args.num_hidden, n_classes,
                 args.num_layers, args.dropout)
    model = th.nn.parallel.DistributedDataParallel(model)
    loss_fn = th.nn.CrossEntropyLoss()
    opt = th.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.num_epochs):
        tic = time.time()
        losses = []
        # join(): ranks with fewer mini-batches do not stall the all-reduce.
        with model.join():
            for step, (input_nodes, seeds, blocks) in enumerate(loader):
                x = g.ndata["features"][input_nodes]
                y = g.ndata["labels"][seeds].long()
                pred = model(blocks, x)
                loss = loss_fn(pred, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                if (step + 1) % args.log_every == 0:
                    acc = float((pred.argmax(1) == y).float().mean())
                    print(f"Part {g.rank()} | Epoch {epoch:05d} | Step {step:05d} | "
                          f"Loss {loss.item():.4f} | Train Acc {acc:.4f}", flush=True)
        print(f"epoch={epoch} loss={np.mean(losses):.4f} rank={g.rank()} "
              f"steps={len(losses)} seconds={time.time() - tic:.2f}", flush=True)
        if (epoch + 1) % args.eval_every == 0 or epoch + 1 == args.num_epochs:
            counts = th.tensor(accuracy(model.module, g, val_nid, fanouts, args.batch_size_eval)
                               + accuracy(model.module, g, test_nid, fanouts,
                                          args.batch_size_eval), dtype=th.float64)
            th.distributed.all_reduce(counts)
            vc, vt, tc, tt = counts.tolist()
            print(f"Part {g.rank()}, Val Acc {vc / max(vt, 1):.4f}, "
                  f"Test Acc {tc / max(tt, 1):.4f}", flush=True)


def main():
    args = parse_args()
    import numpy as np
    import torch as th
    import dgl

    host = socket.gethostname()
    print(f"{host}: Initializing DistDGL.", flush=True)
    # A DGL server serves its partition inside initialize() and exits there.
    dgl.distributed.initialize(args.ip_config)
    th.distributed.init_process_group(backend=args.backend)
    g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
    pb = g.get_partition_book()
    split = {}
    for kind in ("train", "val", "test"):
        split[kind] = dgl.distributed.node_split(g.ndata[f"{kind}_mask"], pb, force_even=True)
    n_classes = args.n_classes
    if n_classes == 0:
        n_classes = len(th.unique(g.ndata["labels"][np.arange(g.num_nodes())]))
    print(f"part {g.rank()}, train: {len(split['train'])}, val: {len(split['val'])}, "
          f"test: {len(split['test'])}, classes: {n_classes}", flush=True)
    train(args, g, split["train"], split["val"], split["test"], n_classes)
    # Leave together: the last trainer's exit lets the DGL servers go.
    th.distributed.barrier()
    print(f"training done rank={g.rank()}", flush=True)


if __name__ == "__main__":
    main()
