#!/usr/bin/env python3
"""Partition a graph for DistDGL, with the command line of DGL's own example
(examples/distributed/graphsage/partition_graph.py):

    python3 partition_graph.py --dataset NAME --num_parts N [--balance_train]
        [--balance_edges] [--undirected] [--part_method metis] [--output data]

It writes ``<output>/<NAME>.json`` and ``<output>/part<i>/``, the graph name
being the dataset's name, as DGL's script does. DGL's script downloads Reddit
or an OGB graph; this machine has no internet, so the only dataset here is
``synthetic-<nodes>`` (e.g. ``synthetic-5000``): a random graph of communities
whose label is the community, with node data named as in DGL's example
(features, labels, train_mask, val_mask, test_mask). Arguments are parsed
strictly: an argument this script does not declare is an error.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("DGLBACKEND", "pytorch")


def parse_args():
    p = argparse.ArgumentParser("Partition graph")
    p.add_argument("--dataset", type=str, default="synthetic-5000",
                   help="synthetic-<number of nodes>; also the graph's name")
    p.add_argument("--num_parts", type=int, default=4, help="number of partitions")
    p.add_argument("--part_method", type=str, default="metis", help="metis or random")
    p.add_argument("--balance_train", action="store_true",
                   help="balance the training nodes across partitions")
    p.add_argument("--undirected", action="store_true",
                   help="turn the graph into an undirected graph")
    p.add_argument("--balance_edges", action="store_true",
                   help="balance the number of edges across partitions")
    p.add_argument("--num_trainers_per_machine", type=int, default=1,
                   help="trainers per machine; their ids go into node data 'trainer_id'")
    p.add_argument("--output", type=str, default="data", help="output folder")
    args = p.parse_args()
    name, _, size = args.dataset.partition("-")
    if name != "synthetic" or not size.isdigit() or int(size) < 100:
        p.error(f"--dataset: unknown dataset {args.dataset!r}; this image has only "
                "synthetic-<nodes> (at least 100 nodes) and no internet to download others")
    if args.num_parts < 1:
        p.error(f"--num_parts must be at least 1, got {args.num_parts}")
    return args, int(size)


def community_graph(num_nodes, num_classes=4, feat_dim=16, seed=42):
    """Nodes in `num_classes` communities; 60 % of edges stay inside one;
    features are a noisy copy of the community's centroid."""
    import numpy as np
    import torch
    import dgl

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num_nodes)
    by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
    src = np.repeat(np.arange(num_nodes), 5)
    inside = rng.random(src.size) < 0.6
    dst = rng.integers(0, num_nodes, src.size)
    for c, members in enumerate(by_class):
        pick = inside & (labels[src] == c)
        dst[pick] = rng.choice(members, pick.sum())
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes)
    centroids = rng.normal(0, 1, (num_classes, feat_dim))
    feats = centroids[labels] + rng.normal(0, 4.0, (num_nodes, feat_dim))
    feats = (feats - feats.mean(0)) / feats.std(0)
    split = rng.random(num_nodes)
    g.ndata["features"] = torch.tensor(feats, dtype=torch.float32)
    g.ndata["labels"] = torch.from_numpy(labels)
    g.ndata["train_mask"] = torch.from_numpy(split < 0.6)
    g.ndata["val_mask"] = torch.from_numpy((split >= 0.6) & (split < 0.8))
    g.ndata["test_mask"] = torch.from_numpy(split >= 0.8)
    return g


def main():
    args, num_nodes = parse_args()
    import dgl
    import torch

    start = time.time()
    g = community_graph(num_nodes)
    if args.undirected:
        sym = dgl.to_bidirected(g)
        for key in g.ndata:
            sym.ndata[key] = g.ndata[key]
        g = sym
    print(f"Load {args.dataset} takes {time.time() - start:.3f} seconds")
    print(f"|V|={g.num_nodes()}, |E|={g.num_edges()}")
    print("train: {}, valid: {}, test: {}".format(
        int(g.ndata["train_mask"].sum()), int(g.ndata["val_mask"].sum()),
        int(g.ndata["test_mask"].sum())))
    dgl.seed(0)
    torch.manual_seed(0)
    dgl.distributed.partition_graph(
        g,
        args.dataset,
        args.num_parts,
        args.output,
        part_method=args.part_method,
        balance_ntypes=g.ndata["train_mask"] if args.balance_train else None,
        balance_edges=args.balance_edges,
        num_trainers_per_machine=args.num_trainers_per_machine,
    )
    print(f"partitioned {args.dataset} into {args.num_parts} parts in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
