#!/usr/bin/env python3
"""Generate a synthetic node-classification graph and partition it for DistDGL.

dglrun runs this script in the partition phase (partitionMode DGL-API) with the
arguments the earlier Go operator used:

    partition.py --graph_name G --workspace W --rel_data_path dataset \
                 --num_parts N [--balance_train] [--balance_edges]

and expects ``W/<rel_data_path>/G.json`` plus ``W/<rel_data_path>/part<i>/``
for i in 0..N-1 (the layout of ``dgl.distributed.partition_graph``).

The graph is a stochastic-block-model-like random graph: every node belongs to
one of ``--num_classes`` communities, most of its edges stay inside its
community, and its features are a noisy copy of its community's centroid. The
label is the community, so a GNN that averages neighbour features learns it
better than a per-node classifier would: the loss visibly falls within a few
epochs, which is what the end-to-end tests look for. Everything is derived from
``--seed``, so the same arguments give the same graph and the same partition
assignment (the JSON and node_feat.dgl are byte-identical across runs;
graph.dgl is equal in content but not byte for byte).
"""

import argparse
import json
import os
import sys
import time

# Without this DGL prints a warning on import and writes ~/.dgl/config.json,
# which a pod with a read-only home directory may not allow.
os.environ.setdefault("DGLBACKEND", "pytorch")


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
        description=(
            "Generate a deterministic synthetic community graph and partition it "
            "with dgl.distributed.partition_graph. Output: "
            "WORKSPACE/REL_DATA_PATH/GRAPH_NAME.json and part<i>/ folders."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    # The four arguments dglrun always passes (same names as the Go operator).
    p.add_argument("--graph_name", required=True,
                   help="graph name; becomes the partition JSON's file name and 'graph_name' key")
    p.add_argument("--workspace", required=True,
                   help="workspace directory; the output goes below it")
    p.add_argument("--rel_data_path", default="dataset",
                   help="output folder, relative to --workspace")
    p.add_argument("--num_parts", type=positive_int, required=True,
                   help="number of partitions (= number of worker machines)")
    p.add_argument("--balance_train", action="store_true",
                   help="balance the training nodes across partitions (METIS balance_ntypes)")
    p.add_argument("--balance_edges", action="store_true",
                   help="balance the number of edges across partitions")
    # Optional knobs for the synthetic graph.
    p.add_argument("--num_nodes", type=positive_int, default=5000, help="number of nodes")
    p.add_argument("--avg_degree", type=positive_int, default=10,
                   help="average (undirected) degree before de-duplication")
    p.add_argument("--num_classes", type=positive_int, default=4,
                   help="number of communities = number of label classes")
    p.add_argument("--feat_dim", type=positive_int, default=16, help="node feature dimension")
    p.add_argument("--intra_prob", type=fraction, default=0.6,
                   help="probability that an edge stays inside its source's community")
    p.add_argument("--feat_noise", type=float, default=4.0,
                   help="std-dev of the Gaussian noise added to the class centroid "
                        "(higher = features alone are less informative)")
    p.add_argument("--train_frac", type=fraction, default=0.6, help="fraction of nodes in train_mask")
    p.add_argument("--val_frac", type=fraction, default=0.2, help="fraction of nodes in val_mask")
    p.add_argument("--seed", type=int, default=42, help="random seed (graph, features, split)")
    p.add_argument("--part_method", choices=["metis", "random"], default="metis",
                   help="partitioning algorithm")
    p.add_argument("--num_hops", type=positive_int, default=1,
                   help="number of HALO hops stored with each partition")
    p.add_argument("--output_format", choices=["partitions", "chunked"], default="partitions",
                   help="partitions: partition with dgl.distributed.partition_graph (partition "
                        "mode DGL-API); chunked: only write the graph in DGL's chunked format "
                        "(metadata.json) for dglrun's native pipeline (partition modes ParMETIS "
                        "and DistParMETIS)")
    p.add_argument("--num_chunks", type=positive_int, default=2,
                   help="chunks per node/edge type with --output_format chunked")
    p.add_argument("--use_graphbolt", action="store_true",
                   help="also write GraphBolt's fused_csc_sampling_graph.pt per partition "
                        "(partition_graph(..., use_graphbolt=True); dglrun --use-graphbolt)")
    args = p.parse_args(argv)

    if args.train_frac + args.val_frac > 1.0:
        p.error(f"--train_frac ({args.train_frac}) + --val_frac ({args.val_frac}) must be <= 1")
    if args.num_nodes < args.num_parts * args.num_classes:
        p.error(f"--num_nodes ({args.num_nodes}) is too small for --num_parts "
                f"({args.num_parts}) x --num_classes ({args.num_classes})")
    if args.feat_noise < 0:
        p.error(f"--feat_noise must be >= 0, got {args.feat_noise}")
    if os.path.isabs(args.rel_data_path):
        p.error(f"--rel_data_path must be relative to --workspace, got {args.rel_data_path!r}")
    return args


def make_graph(args):
    """Build the synthetic DGLGraph with features, labels and split masks."""
    import numpy as np
    import torch
    import dgl

    rng = np.random.default_rng(args.seed)
    n, k = args.num_nodes, args.num_classes

    # Balanced communities, randomly placed, so node ids carry no label signal.
    labels = rng.permutation(np.arange(n) % k)
    members = np.argsort(labels, kind="stable")          # node ids grouped by class
    counts = np.bincount(labels, minlength=k)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])

    # Each node draws avg_degree/2 edges; symmetrising below doubles them.
    per_node = max(1, args.avg_degree // 2)
    src = np.repeat(np.arange(n), per_node)
    intra = rng.random(src.size) < args.intra_prob
    cls = labels[src]
    pick_intra = members[offsets[cls] + (rng.random(src.size) * counts[cls]).astype(np.int64)]
    pick_any = rng.integers(0, n, size=src.size)
    dst = np.where(intra, pick_intra, pick_any)

    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
    # Undirected, simple, no self loops: message passing sees every neighbour both ways.
    g = dgl.to_bidirected(g)
    g = dgl.remove_self_loop(g)

    centroids = rng.normal(0.0, 1.0, size=(k, args.feat_dim))
    feats = centroids[labels] + rng.normal(0.0, args.feat_noise, size=(n, args.feat_dim))
    # Standardise per dimension, as one would real features: keeps the first
    # epoch's loss near ln(num_classes) whatever --feat_noise is.
    feats = (feats - feats.mean(axis=0)) / feats.std(axis=0)

    order = rng.permutation(n)
    n_train = int(n * args.train_frac)
    n_val = int(n * args.val_frac)
    train_mask = np.zeros(n, dtype=bool)
    val_mask = np.zeros(n, dtype=bool)
    test_mask = np.zeros(n, dtype=bool)
    train_mask[order[:n_train]] = True
    val_mask[order[n_train:n_train + n_val]] = True
    test_mask[order[n_train + n_val:]] = True

    # Names follow DGL's distributed examples (features/labels/*_mask).
    g.ndata["features"] = torch.from_numpy(feats.astype(np.float32))
    g.ndata["labels"] = torch.from_numpy(labels.astype(np.int64))
    g.ndata["train_mask"] = torch.from_numpy(train_mask)
    g.ndata["val_mask"] = torch.from_numpy(val_mask)
    g.ndata["test_mask"] = torch.from_numpy(test_mask)
    return g


def write_chunked(g, out_path, graph_name, num_chunks):
    """Write g in DGL's chunked graph format: metadata.json, edges as
    space-separated text (`src dst` per line), node data as .npy, each split
    into num_chunks files. Paths in metadata.json are relative to it."""
    import numpy as np

    n, m = g.num_nodes(), g.num_edges()
    node_chunks = np.array_split(np.arange(n), num_chunks)
    edge_chunks = np.array_split(np.arange(m), num_chunks)
    src, dst = (t.numpy() for t in g.edges())
    os.makedirs(os.path.join(out_path, "edges"), exist_ok=True)
    os.makedirs(os.path.join(out_path, "node_data"), exist_ok=True)
    edge_files = []
    for i, ids in enumerate(edge_chunks):
        rel = f"edges/_N:_E:_N-{i}.txt"
        np.savetxt(os.path.join(out_path, rel), np.stack([src[ids], dst[ids]], axis=1),
                   fmt="%d", delimiter=" ")
        edge_files.append(rel)
    node_data = {}
    for name, tensor in g.ndata.items():
        array = tensor.numpy()
        files = []
        for i, ids in enumerate(node_chunks):
            rel = f"node_data/{name}-{i}.npy"
            np.save(os.path.join(out_path, rel), array[ids])
            files.append(rel)
        node_data[name] = {"format": {"name": "numpy"}, "data": files}
    metadata = {
        "graph_name": graph_name,
        "node_type": ["_N"],
        "num_nodes_per_chunk": [[len(c) for c in node_chunks]],
        "edge_type": ["_N:_E:_N"],
        "num_edges_per_chunk": [[len(c) for c in edge_chunks]],
        "edges": {"_N:_E:_N": {"format": {"name": "csv", "delimiter": " "}, "data": edge_files}},
        "node_data": {"_N": node_data},
        "edge_data": {},
    }
    with open(os.path.join(out_path, "metadata.json"), "w") as f:
        json.dump(metadata, f, indent=1)
    return os.path.join(out_path, "metadata.json")


def main(argv=None):
    args = parse_args(argv)
    out_path = os.path.join(args.workspace, args.rel_data_path)
    try:
        os.makedirs(out_path, exist_ok=True)
    except OSError as e:
        print(f"partition.py: cannot create output directory {out_path!r} "
              f"(from --workspace/--rel_data_path): {e}", file=sys.stderr)
        return 2

    import dgl  # imported late so that --help works without DGL installed

    t0 = time.time()
    g = make_graph(args)
    t_gen = time.time() - t0
    print(f"generated graph {args.graph_name}: nodes={g.num_nodes()} edges={g.num_edges()} "
          f"classes={args.num_classes} feat_dim={args.feat_dim} "
          f"train={int(g.ndata['train_mask'].sum())} seconds={t_gen:.2f}", flush=True)

    if args.output_format == "chunked":
        path = write_chunked(g, out_path, args.graph_name, args.num_chunks)
        print(f"wrote the chunked graph {path} ({args.num_chunks} chunks per type)", flush=True)
        return 0

    # METIS and DGL's reshuffling draw from DGL's/torch's/numpy's global RNGs;
    # seed them all so equal arguments give byte-identical partitions.
    import numpy as np
    import torch
    dgl.seed(args.seed)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    t1 = time.time()
    dgl.distributed.partition_graph(
        g,
        args.graph_name,
        args.num_parts,
        out_path,
        num_hops=args.num_hops,
        part_method=args.part_method,
        balance_ntypes=g.ndata["train_mask"] if args.balance_train else None,
        balance_edges=args.balance_edges,
        use_graphbolt=args.use_graphbolt,
    )
    t_part = time.time() - t1

    # Check the contract dglrun relies on before declaring success.
    part_config = os.path.join(out_path, f"{args.graph_name}.json")
    if not os.path.isfile(part_config):
        print(f"partition.py: partition_graph did not write {part_config}", file=sys.stderr)
        return 1
    with open(part_config) as f:
        meta = json.load(f)
    for i in range(args.num_parts):
        part_dir = os.path.join(out_path, f"part{i}")
        if not os.path.isdir(part_dir):
            print(f"partition.py: missing partition folder {part_dir}", file=sys.stderr)
            return 1
    print(f"partitioned into {meta['num_parts']} parts with {meta['part_method']} "
          f"seconds={t_part:.2f} config={part_config}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
