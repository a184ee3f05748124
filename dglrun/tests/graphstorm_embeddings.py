# GraphStorm's node embeddings against the example's tables: one
# embedding per node, in the tables' node ids 0..n-1 (GraphStorm remaps them
# through the partition pipeline's part<i>/orig_nids.dgl), every value
# finite, and a nearest-class-centroid accuracy against the tables' labels
# far above chance (ids left in the partitions' shuffled order score about
# 0.25). Usage: python graphstorm_embeddings.py <embeddings dir> <tables dir>
# Run by dglrun/tests/graphstorm.rs and the e2e graphstorm scenario.
import glob, json, os, sys
import numpy as np, pyarrow.parquet as pq, torch as th
emb_dir, tables = sys.argv[1], sys.argv[2]
info = json.load(open(os.path.join(emb_dir, "emb_info.json")))
rows = sorted(glob.glob(os.path.join(emb_dir, "_N", "embed-*.pt")))
nids = sorted(glob.glob(os.path.join(emb_dir, "_N", "embed_nids-*.pt")))
assert len(rows) == len(nids) == info["world_size"], (rows, nids, info)
emb = th.cat([th.load(f) for f in rows]).numpy()
ids = th.cat([th.load(f) for f in nids]).numpy()
labels = pq.read_table(os.path.join(tables, "nodes.parquet")).column("label").to_numpy()
n = len(labels)
assert emb.shape[0] == n, f"{emb.shape[0]} rows for {n} nodes"
assert np.array_equal(np.sort(ids), np.arange(n)), "node ids are not 0..n-1, each once"
assert np.isfinite(emb).all(), "non-finite values"
full = np.empty_like(emb)
full[ids] = emb
cent = np.stack([full[labels == c].mean(axis=0) for c in range(labels.max() + 1)])
pred = ((full[:, None, :] - cent[None]) ** 2).sum(-1).argmin(1)
print(f"rows={emb.shape[0]} dim={emb.shape[1]} files={len(rows)} "
      f"centroid_accuracy={(pred == labels).mean():.3f}")
