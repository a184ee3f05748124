#!/usr/bin/env python3
"""The Python half of `cargo xtask bench partition` (runs in the DGL venv).

  gen  --nodes N --edges M --feat F --seed S --out DIR
       R-MAT graph (a=.57 b=.19 c=.19), made undirected with dgl.to_bidirected,
       F float32 features, labels, a 60% train_mask. Writes DIR/graph.dgl (for
       DGL's partition_graph) and the same graph in DGL's chunked format
       DIR/chunked/metadata.json (edges and features as .npy, 4 chunks each)
       for dglrun's native pipeline.
  dgl  --graph DIR/graph.dgl --parts K --out OUT
       dgl.distributed.partition_graph(METIS, balance_ntypes=train_mask,
       balance_edges=True); prints the seconds of that call alone.
  eval --config OUT/<graph>.json --graph DIR/graph.dgl|DIR/chunked/metadata.json
       Edge cut and balance of a partition output, counted the same way for
       every tool: the cut is the number of undirected edges whose endpoints
       are in different partitions (from each part's inner nodes);
       balance = max/mean of nodes, train nodes and edges per part.
Every command prints one JSON line on stdout.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("DGLBACKEND", "pytorch")


def rmat(n, m, seed, a=0.57, b=0.19, c=0.19):
    import numpy as np
    rng = np.random.default_rng(seed)
    scale = int(np.ceil(np.log2(n)))
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(m)
        right = (r >= a) & (r < a + b) | (r >= a + b + c)
        down = r >= a + b
        src = (src << 1) | down
        dst = (dst << 1) | right
    # Fold the 2^scale id space onto n nodes and scatter the hubs.
    perm = rng.permutation(1 << scale) % n
    return perm[src], perm[dst]


def gen(args):
    import numpy as np
    import torch
    import dgl
    t = time.time()
    src, dst = rmat(args.nodes, args.edges, args.seed)
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=args.nodes)
    g = dgl.to_bidirected(g)
    rng = np.random.default_rng(args.seed + 1)
    g.ndata["features"] = torch.from_numpy(rng.random((args.nodes, args.feat), dtype=np.float32))
    g.ndata["labels"] = torch.from_numpy(rng.integers(0, 16, args.nodes))
    g.ndata["train_mask"] = torch.from_numpy(rng.random(args.nodes) < 0.6)
    os.makedirs(args.out, exist_ok=True)
    dgl.save_graphs(os.path.join(args.out, "graph.dgl"), [g])
    write_chunked(g, os.path.join(args.out, "chunked"), chunks=4)
    print(json.dumps({"nodes": g.num_nodes(), "edges": g.num_edges(),
                      "seconds": round(time.time() - t, 2)}))


def write_chunked(g, out, chunks):
    import numpy as np
    os.makedirs(out, exist_ok=True)
    n, m = g.num_nodes(), g.num_edges()
    s, d = (x.numpy() for x in g.edges())
    ecuts = np.array_split(np.arange(m), chunks)
    ncuts = np.array_split(np.arange(n), chunks)
    edge_files = []
    for i, ids in enumerate(ecuts):
        name = f"edges-{i}.npy"
        np.save(os.path.join(out, name), np.stack([s[ids[0]:ids[-1] + 1], d[ids[0]:ids[-1] + 1]], axis=1))
        edge_files.append(name)
    node_data = {}
    for key, tensor in g.ndata.items():
        arr = tensor.numpy()
        files = []
        for i, ids in enumerate(ncuts):
            name = f"{key}-{i}.npy"
            np.save(os.path.join(out, name), arr[ids[0]:ids[-1] + 1])
            files.append(name)
        node_data[key] = {"format": {"name": "numpy"}, "data": files}
    meta = {
        "graph_name": "rmat",
        "node_type": ["_N"],
        "num_nodes_per_chunk": [[len(x) for x in ncuts]],
        "edge_type": ["_N:_E:_N"],
        "num_edges_per_chunk": [[len(x) for x in ecuts]],
        "edges": {"_N:_E:_N": {"format": {"name": "numpy"}, "data": edge_files}},
        "node_data": {"_N": node_data},
        "edge_data": {},
    }
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump(meta, f)


def run_dgl(args):
    import dgl
    (g,), _ = dgl.load_graphs(args.graph)
    t = time.time()
    orig_nids, _ = dgl.distributed.partition_graph(
        g, "rmat", args.parts, args.out, part_method="metis",
        balance_ntypes=g.ndata["train_mask"], balance_edges=True, return_mapping=True)
    seconds = time.time() - t
    # For `eval` only (after the timed call): shuffled id -> original id.
    import numpy as np
    np.save(os.path.join(args.out, "orig_nids.npy"), orig_nids.numpy())
    print(json.dumps({"seconds": round(seconds, 2)}))


def evaluate(args):
    import numpy as np
    import dgl
    with open(args.config) as f:
        meta = json.load(f)
    n, edge_chunks, train_mask = whole_graph(args.graph)
    k = meta["num_parts"]
    base = os.path.dirname(args.config)
    part_of = np.full(n, -1, dtype=np.int64)
    edges = []
    for p in range(k):
        pg = dgl.load_graphs(os.path.join(base, meta[f"part-{p}"]["part_graph"]))[0][0]
        inner = pg.ndata["inner_node"].numpy().astype(bool)
        edges.append(int(pg.ndata["inner_node"].numpy()[pg.edges()[1].numpy()].astype(bool).sum()))
        orig = orig_ids(base, p, pg, inner)
        part_of[orig] = p
        del pg
    if (part_of < 0).any():
        raise SystemExit(f"{int((part_of < 0).sum())} nodes are in no partition")
    cut2 = 0
    for s, d in edge_chunks:
        cut2 += int((part_of[s] != part_of[d]).sum())
    cut = cut2 // 2
    nodes = np.bincount(part_of, minlength=k)
    train = np.bincount(part_of[train_mask], minlength=k)
    bal = lambda x: round(float(np.max(x) / np.mean(x)), 4)
    print(json.dumps({"edge_cut": cut, "nodes": nodes.tolist(), "edges": edges,
                      "balance_nodes": bal(nodes), "balance_train": bal(train),
                      "balance_edges": bal(np.array(edges))}))


def whole_graph(path):
    """(nodes, an iterator of (src, dst) slices, the train mask) of the input
    graph: a graph.dgl, or a chunked metadata.json (`make-rmat`'s graphs,
    too large for DGL to hold: read in slices of memory-mapped chunks)."""
    import numpy as np
    if not path.endswith(".json"):
        import dgl
        (g,), _ = dgl.load_graphs(path)
        s, d = (x.numpy() for x in g.edges())
        return g.num_nodes(), iter([(s, d)]), g.ndata["train_mask"].numpy().astype(bool)
    base = os.path.dirname(path)
    with open(path) as f:
        meta = json.load(f)
    n = sum(meta["num_nodes_per_chunk"][0])
    files = meta["edges"]["_N:_E:_N"]["data"]
    masks = meta["node_data"]["_N"]["train_mask"]["data"]
    mask = np.concatenate([np.load(os.path.join(base, m)) for m in masks]).astype(bool)

    def slices():
        for name in files:
            e = np.load(os.path.join(base, name), mmap_mode="r")
            for lo in range(0, len(e), 1 << 24):
                part = np.asarray(e[lo:lo + (1 << 24)])
                yield part[:, 0], part[:, 1]
    return n, slices(), mask


def orig_ids(base, p, pg, inner):
    """Original node ids of a part's inner nodes: from part<p>/orig_nids.dgl
    (dglrun's pipeline writes it), else through the shuffled->original map
    `dgl` saved from partition_graph(return_mapping=True)."""
    import numpy as np
    from dgl.data.utils import load_tensors
    path = os.path.join(base, f"part{p}", "orig_nids.dgl")
    if os.path.exists(path):
        t = load_tensors(path)
        return np.concatenate([v.numpy() for v in t.values()])
    mapping = os.path.join(base, "orig_nids.npy")
    shuffled = pg.ndata["_ID"].numpy()[inner]
    return np.load(mapping)[shuffled]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--nodes", type=int, required=True)
    g.add_argument("--edges", type=int, required=True)
    g.add_argument("--feat", type=int, default=64)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--out", required=True)
    d = sub.add_parser("dgl")
    d.add_argument("--graph", required=True)
    d.add_argument("--parts", type=int, default=4)
    d.add_argument("--out", required=True)
    e = sub.add_parser("eval")
    e.add_argument("--config", required=True)
    e.add_argument("--graph", required=True)
    args = p.parse_args()
    {"gen": gen, "dgl": run_dgl, "eval": evaluate}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
