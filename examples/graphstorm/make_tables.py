#!/usr/bin/env python3
"""Write the example's table graph: nodes.parquet and edges.parquet.

GraphStorm's users start from tables, not from a DGL graph: one table of
nodes (an id, features, a label) and one of edges (source id, destination
id). This script writes such tables for a small community graph, in the
public Parquet format that GraphStorm's graph construction (gconstruct,
gconstruct.json) reads:

    nodes.parquet  node_id: int64, feat: list<float32>[FEAT_DIM], label: int64
    edges.parquet  src: int64, dst: int64   (each undirected edge once;
                   gconstruct's --add-reverse-edges adds the other direction)

Every node belongs to one of --num-classes communities; most of its edges
stay inside it and its features are a noisy copy of the community's
centroid. The label is the community: features alone are a weak signal and
neighbour averaging a strong one, so a GNN's loss falls clearly within a few
epochs. Everything derives from --seed: the same arguments write the same
rows.
"""

import argparse
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def fraction(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Write a deterministic community graph as nodes.parquet and edges.parquet.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--output", required=True, help="folder the two tables are written to")
    p.add_argument("--num-nodes", type=positive_int, default=3000, help="number of nodes")
    p.add_argument("--avg-degree", type=positive_int, default=10,
                   help="average undirected degree before de-duplication")
    p.add_argument("--num-classes", type=positive_int, default=4,
                   help="number of communities = label classes")
    p.add_argument("--feat-dim", type=positive_int, default=16, help="feature dimension")
    p.add_argument("--intra-prob", type=fraction, default=0.7,
                   help="probability that an edge stays inside its source's community")
    p.add_argument("--feat-noise", type=float, default=3.0,
                   help="standard deviation of the per-node feature noise")
    p.add_argument("--seed", type=int, default=42, help="seed of every random draw")
    args = p.parse_args(argv)
    if args.num_classes > args.num_nodes:
        p.error(f"--num-classes ({args.num_classes}) exceeds --num-nodes ({args.num_nodes})")
    return args


def make_edges(rng, labels, args):
    """Each undirected edge once (src < dst), no self loops, no duplicates."""
    n = len(labels)
    members = [np.flatnonzero(labels == c) for c in range(args.num_classes)]
    draws = n * max(1, args.avg_degree // 2)
    src = rng.integers(0, n, size=draws)
    inside = rng.random(draws) < args.intra_prob
    dst = rng.integers(0, n, size=draws)
    for c in range(args.num_classes):
        # Sources in community c that keep their edge inside it.
        pick = inside & (labels[src] == c)
        dst[pick] = rng.choice(members[c], size=int(pick.sum()))
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    keep = lo != hi
    pairs = np.unique(np.stack([lo[keep], hi[keep]], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def make_features(rng, labels, args):
    centroids = rng.normal(0.0, 1.0, size=(args.num_classes, args.feat_dim))
    noise = rng.normal(0.0, args.feat_noise, size=(len(labels), args.feat_dim))
    feat = centroids[labels] + noise
    # Standardised per dimension, as a feature pipeline would hand them over.
    feat = (feat - feat.mean(axis=0)) / feat.std(axis=0)
    return feat.astype(np.float32)


def write(output, name, table):
    path = os.path.join(output, name)
    pq.write_table(table, path)
    return path


def main(argv=None):
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    labels = rng.permutation(np.arange(args.num_nodes) % args.num_classes).astype(np.int64)
    src, dst = make_edges(rng, labels, args)
    feat = make_features(rng, labels, args)
    os.makedirs(args.output, exist_ok=True)
    feat_type = pa.list_(pa.float32(), args.feat_dim)
    nodes = pa.table({
        "node_id": pa.array(np.arange(args.num_nodes, dtype=np.int64)),
        "feat": pa.FixedSizeListArray.from_arrays(pa.array(feat.reshape(-1)), type=feat_type),
        "label": pa.array(labels),
    })
    edges = pa.table({"src": pa.array(src), "dst": pa.array(dst)})
    n_path = write(args.output, "nodes.parquet", nodes)
    e_path = write(args.output, "edges.parquet", edges)
    print(f"wrote {n_path} ({args.num_nodes} nodes, {args.num_classes} classes, "
          f"{args.feat_dim} features) and {e_path} ({len(src)} undirected edges)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
