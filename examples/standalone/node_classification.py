#!/usr/bin/env python3
"""Single-process node classification with DGL, in the manner of DGL's
node-classification tutorial (a two-layer GCN trained on the whole graph),
for a DGLJob without workers: the launcher pod runs it alone, and its exit
status is the job's (examples/standalone/dgljob.yaml).

The tutorial trains on Cora, which it downloads; this runs without internet,
so the graph is generated: nodes in communities, the label is the community,
features a noisy copy of the community's centroid (a GCN, which averages
neighbours, learns it better than a per-node classifier).

Prints ``epoch=<i> loss=<training loss> val_acc=<..> test_acc=<..>`` every
--log_every epochs and ``training done`` at the end. Exits 0 only if the
loss fell; any error exits non-zero.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("DGLBACKEND", "pytorch")


def parse_args():
    p = argparse.ArgumentParser(description="Single-process GCN node classification.")
    p.add_argument("--num_epochs", type=int, default=50, help="full-graph training epochs")
    p.add_argument("--num_nodes", type=int, default=2000, help="nodes of the generated graph")
    p.add_argument("--num_classes", type=int, default=4, help="communities = label classes")
    p.add_argument("--hidden", type=int, default=16, help="hidden layer width")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    p.add_argument("--log_every", type=int, default=5, help="print every N epochs")
    p.add_argument("--seed", type=int, default=0, help="seed of the graph and the model")
    args = p.parse_args()
    if args.num_epochs < 2 or args.num_nodes < 10 * args.num_classes or args.log_every < 1:
        p.error("need --num_epochs >= 2, --log_every >= 1 and --num_nodes >= 10 x --num_classes")
    return args


def community_graph(args):
    import numpy as np
    import torch
    import dgl

    rng = np.random.default_rng(args.seed)
    n, k = args.num_nodes, args.num_classes
    labels = rng.integers(0, k, n)
    src = np.repeat(np.arange(n), 4)
    dst = rng.integers(0, n, src.size)
    for c in range(k):
        members = np.flatnonzero(labels == c)
        pick = (rng.random(src.size) < 0.7) & (labels[src] == c)
        dst[pick] = rng.choice(members, pick.sum())
    g = dgl.to_bidirected(dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n))
    g = dgl.add_self_loop(dgl.remove_self_loop(g))  # GraphConv wants no zero in-degree
    feats = rng.normal(0, 1, (k, 16))[labels] + rng.normal(0, 3.0, (n, 16))
    split = rng.random(n)
    g.ndata["feat"] = torch.tensor(feats, dtype=torch.float32)
    g.ndata["label"] = torch.from_numpy(labels)
    g.ndata["train_mask"] = torch.from_numpy(split < 0.3)
    g.ndata["val_mask"] = torch.from_numpy((split >= 0.3) & (split < 0.6))
    g.ndata["test_mask"] = torch.from_numpy(split >= 0.6)
    return g


def gcn(in_feats, hidden, classes):
    import torch.nn as nn
    import torch.nn.functional as F
    from dgl.nn import GraphConv

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GraphConv(in_feats, hidden)
            self.conv2 = GraphConv(hidden, classes)

        def forward(self, g, x):
            return self.conv2(g, F.relu(self.conv1(g, x)))

    return GCN()


def main():
    args = parse_args()
    import torch
    import torch.nn.functional as F

    torch.manual_seed(args.seed)
    g = community_graph(args)
    print(f"graph: {g.num_nodes()} nodes, {g.num_edges()} edges, {args.num_classes} classes",
          flush=True)
    model = gcn(g.ndata["feat"].shape[1], args.hidden, args.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    x, y = g.ndata["feat"], g.ndata["label"]
    masks = [g.ndata[m] for m in ("train_mask", "val_mask", "test_mask")]
    first = last = None
    tic = time.time()
    for epoch in range(args.num_epochs):
        logits = model(g, x)
        loss = F.cross_entropy(logits[masks[0]], y[masks[0]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
        if epoch % args.log_every == 0 or epoch == args.num_epochs - 1:
            pred = logits.argmax(1)
            val, test = ((pred[m] == y[m]).float().mean().item() for m in masks[1:])
            print(f"epoch={epoch} loss={last:.4f} val_acc={val:.4f} test_acc={test:.4f}",
                  flush=True)
            report_progress(epoch + 1, args.num_epochs, last)
    print(f"training done: loss {first:.4f} -> {last:.4f} in {time.time() - tic:.1f} s",
          flush=True)
    if not last < first:
        print("the loss did not fall", file=sys.stderr)
        return 1
    return 0


def report_progress(epoch, epochs=None, loss=None):
    """Print dglrun's progress line (docs/user-guide.md, "Live progress"):
    ``kubectl get dgljobs`` shows it as ``epoch <n>/<E>``."""
    import json
    import math
    fields = {"epoch": epoch, "epochs": epochs, "loss": loss}
    fields = {k: v for k, v in fields.items() if v is not None
              and not (isinstance(v, float) and not math.isfinite(v))}
    print("DGLRUN_PROGRESS " + json.dumps(fields, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    sys.exit(main())
