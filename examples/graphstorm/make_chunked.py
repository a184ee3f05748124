#!/usr/bin/env python3
"""Write the example's table graph in DGL's chunked graph format.

The same tables that gconstruct reads (make_tables.py: data/nodes.parquet,
data/edges.parquet), written as the input of dglrun's native partition
pipeline (partition mode ParMETIS, docs/partition-pipeline.md):

    <out>/metadata.json           graph_name, node_type ["_N"], edge_type
                                  ["_N:_E:_N"], num_*_per_chunk, file lists
    <out>/edges/_E-<i>.parquet    two non-null int64 columns: src, dst
                                  (per-type ids; each undirected edge in
                                  both directions, as gconstruct's
                                  --add-reverse-edges gives GraphStorm)
    <out>/node_data/<name>-<i>.npy  feat (float32 [n, 16]), label (int64),
                                  train_mask / val_mask / test_mask (int8,
                                  a seeded 60/20/20 split, as gconstruct.json)

The node and feature names are the ones gconstruct writes, so nc.yaml runs
unchanged on either partitioning. Run as dglrun's partition entry point
(`--partition-entry-point make_chunked.py`), it is called with DGL's loader
flags (--graph_name, --workspace, --rel_data_path, --num_parts) and writes
<workspace>/<rel_data_path>/metadata.json; `--output DIR` writes there
instead. The tables are read from --tables (default: data, relative to the
working directory, as gconstruct.json's paths are).
"""

import argparse
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

NTYPE = "_N"
ETYPE = "_N:_E:_N"
# gconstruct.json's split_pct.
SPLIT = (0.6, 0.2, 0.2)


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Write the example's tables in DGL's chunked graph format "
                    "(dglrun's partition mode ParMETIS reads it).")
    p.add_argument("--tables", default="data",
                   help="folder of nodes.parquet and edges.parquet (make_tables.py's --output)")
    p.add_argument("--output", help="folder to write metadata.json and its chunks to "
                                    "(default: <workspace>/<rel_data_path>)")
    p.add_argument("--graph_name", default="gsexample", help="graph_name in metadata.json")
    p.add_argument("--workspace", help="dglrun's workspace (loader convention)")
    p.add_argument("--rel_data_path", default="chunked",
                   help="folder below --workspace to write to (loader convention)")
    p.add_argument("--num_parts", type=positive_int,
                   help="partitions dglrun will make (loader convention; the chunks do not "
                        "depend on it)")
    p.add_argument("--num_chunks", type=positive_int, default=2,
                   help="files per node feature and per edge type")
    p.add_argument("--seed", type=int, default=42, help="seed of the train/val/test split")
    args, unknown = p.parse_known_args(argv)
    # dglrun passes --balance_train/--balance_edges and --partition-arg
    # values to loaders; they do not change the chunked graph.
    if unknown:
        print(f"make_chunked.py: ignoring {unknown}", flush=True)
    if args.output is None and args.workspace is None:
        p.error("give --output, or --workspace (with --rel_data_path) as dglrun does")
    return args


def read_table(path, columns):
    if not os.path.isfile(path):
        raise SystemExit(f"make_chunked.py: {path} does not exist (write it with make_tables.py)")
    table = pq.read_table(path)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SystemExit(f"make_chunked.py: {path} has no column {missing[0]!r} "
                         f"(expected {columns}, found {table.column_names})")
    return table


def read_nodes(tables):
    path = os.path.join(tables, "nodes.parquet")
    t = read_table(path, ["node_id", "feat", "label"])
    ids = t.column("node_id").to_numpy()
    # Per-type ids in the chunked format are row numbers: the table's ids
    # must be exactly 0..n-1 (make_tables.py writes them so).
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(ids[order], np.arange(len(ids))):
        raise SystemExit(f"make_chunked.py: {path}: node_id must be 0..{len(ids) - 1}, each once")
    feat = np.stack(t.column("feat").to_numpy(zero_copy_only=False)).astype(np.float32)
    label = t.column("label").to_numpy().astype(np.int64)
    return feat[order], label[order]


def read_edges(tables, num_nodes):
    path = os.path.join(tables, "edges.parquet")
    t = read_table(path, ["src", "dst"])
    src = t.column("src").to_numpy().astype(np.int64)
    dst = t.column("dst").to_numpy().astype(np.int64)
    for name, ids in (("src", src), ("dst", dst)):
        if len(ids) and (ids.min() < 0 or ids.max() >= num_nodes):
            raise SystemExit(f"make_chunked.py: {path}: column {name} has an id outside "
                             f"0..{num_nodes - 1}")
    # Both directions, as gconstruct's --add-reverse-edges.
    return np.concatenate([src, dst]), np.concatenate([dst, src])


def split_masks(num_nodes, seed):
    perm = np.random.default_rng(seed).permutation(num_nodes)
    n_train = int(num_nodes * SPLIT[0])
    n_val = int(num_nodes * SPLIT[1])
    bounds = {"train_mask": perm[:n_train], "val_mask": perm[n_train:n_train + n_val],
              "test_mask": perm[n_train + n_val:]}
    masks = {}
    for name, ids in bounds.items():
        m = np.zeros(num_nodes, dtype=np.int8)
        m[ids] = 1
        masks[name] = m
    return masks


def write_edges(out, src, dst, num_chunks):
    os.makedirs(os.path.join(out, "edges"), exist_ok=True)
    schema = pa.schema([pa.field("src", pa.int64(), nullable=False),
                        pa.field("dst", pa.int64(), nullable=False)])
    files, counts = [], []
    for i, ids in enumerate(np.array_split(np.arange(len(src)), num_chunks)):
        rel = f"edges/_E-{i}.parquet"
        table = pa.table({"src": src[ids], "dst": dst[ids]}, schema=schema)
        pq.write_table(table, os.path.join(out, rel))
        files.append(rel)
        counts.append(len(ids))
    return files, counts


def write_node_data(out, data, num_chunks):
    os.makedirs(os.path.join(out, "node_data"), exist_ok=True)
    n = len(next(iter(data.values())))
    chunks = np.array_split(np.arange(n), num_chunks)
    meta = {}
    for name, array in data.items():
        files = []
        for i, ids in enumerate(chunks):
            rel = f"node_data/{name}-{i}.npy"
            np.save(os.path.join(out, rel), array[ids])
            files.append(rel)
        meta[name] = {"format": {"name": "numpy"}, "data": files}
    return meta, [len(c) for c in chunks]


def main(argv=None):
    args = parse_args(argv)
    out = args.output or os.path.join(args.workspace, args.rel_data_path)
    feat, label = read_nodes(args.tables)
    src, dst = read_edges(args.tables, len(label))
    data = {"feat": feat, "label": label, **split_masks(len(label), args.seed)}
    os.makedirs(out, exist_ok=True)
    edge_files, edge_counts = write_edges(out, src, dst, args.num_chunks)
    node_data, node_counts = write_node_data(out, data, args.num_chunks)
    metadata = {
        "graph_name": args.graph_name,
        "node_type": [NTYPE],
        "num_nodes_per_chunk": [node_counts],
        "edge_type": [ETYPE],
        "num_edges_per_chunk": [edge_counts],
        "edges": {ETYPE: {"format": {"name": "parquet"}, "data": edge_files}},
        "node_data": {NTYPE: node_data},
        "edge_data": {},
    }
    path = os.path.join(out, "metadata.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(metadata, f, indent=1)
    print(f"wrote {path}: {len(label)} nodes, {len(src)} edges (both directions), "
          f"node data {sorted(data)}, {args.num_chunks} chunks per type", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
