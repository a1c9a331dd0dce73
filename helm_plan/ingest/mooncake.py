"""Mooncake conversation traces: JSONL requests with KV prefix-block hash ids.

Each line is one request; its ``hash_ids`` are the hashes of its prompt's
``block_tokens``-token blocks, prefix-chained, the last block usually partial.
A request continues an earlier request's conversation (which plays the user)
when its hash ids extend that request's hash ids. Because a partial last
block is re-hashed once the conversation grows, "extend" means: starts with
all of the earlier request's *full* blocks (or with all of its hash ids).
To keep a shared system prompt from joining unrelated conversations, an
earlier request can only be extended past a block it contributed itself
(one no earlier request had at that position). The deepest such match wins,
ties go to the latest request. ``new_items`` are the hash ids after the match.
Matching walks a trie of hash-id prefixes: O(total hash ids).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from helm_plan.errors import IngestError
from helm_plan.ingest.amazon import _json_problem
from helm_plan.ingest.sessions import Requests


def read_records(path: Path) -> pl.DataFrame:
    """The JSONL records with ``timestamp`` (ms) and ``hash_ids`` (and ``input_length`` if any)."""
    try:
        df = pl.read_ndjson(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, ValueError) as e:
        raise _json_problem(path, False, e) from e
    if df.height == 0:
        raise IngestError(f"{path} is empty (no requests)", hint="pass a non-empty Mooncake JSONL")
    for col in ("timestamp", "hash_ids"):
        if col not in df.columns:
            raise IngestError(
                f"{path}: no {col!r} field (found {', '.join(df.columns)})",
                hint="a Mooncake trace has timestamp, input_length, output_length, hash_ids",
            )
    df = df.with_row_index("rec", offset=1)
    bad = df.filter(pl.col("timestamp").is_null() | pl.col("hash_ids").is_null())
    if bad.height:
        raise IngestError(
            f"{path} line {bad['rec'][0]}: missing timestamp or hash_ids",
            hint="repair or delete the line",
        )
    if not df["timestamp"].dtype.is_numeric():
        ts = df["timestamp"].cast(pl.Float64, strict=False)
        i = int(ts.is_null().arg_true()[0]) if ts.null_count() else 0
        raise IngestError(
            f"{path} line {df['rec'][i]}: non-numeric timestamp {df['timestamp'][i]!r}",
            hint="timestamp must be milliseconds since the trace start",
        )
    hid = df["hash_ids"]
    if not (hid.dtype == pl.List(pl.Int64) or str(hid.dtype).startswith("List(Int")):
        raise IngestError(
            f"{path}: hash_ids must be lists of integers, got {hid.dtype}",
            hint="each line needs hash_ids: [int, ...]",
        )
    flat = _flatten(hid)
    if flat.null_count or (len(flat) and pc.min(flat).as_py() < 0):
        rec = df.filter(
            pl.col("hash_ids").list.eval(pl.element().is_null() | (pl.element() < 0)).list.any()
        )
        raise IngestError(
            f"{path} line {rec['rec'][0]}: hash_ids has a null or negative id",
            hint="hash ids must be integers >= 0",
        )
    return df


def load(path: Path, *, block_tokens: int = 512) -> tuple[Requests, int]:
    """Requests of a Mooncake trace (users = conversations, items = hash-block ids) and rows read."""
    df = read_records(path)
    df = df.sort("timestamp", maintain_order=True)  # logs are sorted stably by time
    ts_ms = df["timestamp"].cast(pl.Float64).to_numpy()
    hashes = df["hash_ids"].to_list()
    lens = (
        df["input_length"].fill_null(-1).cast(pl.Int64).to_list()
        if "input_length" in df.columns
        else [-1] * df.height
    )
    n = df.height
    conv = np.empty(n, np.int64)
    start = np.empty(n, np.int64)
    trie: dict[tuple[int, int], int] = {}
    mark: dict[int, int] = {}
    for i, (h, length) in enumerate(zip(hashes, lens, strict=True)):
        node, depth, best_depth, best_req, shared = 0, 0, 0, -1, 0
        path_nodes = []
        for x in h:
            nxt = trie.get((node, x))
            if nxt is None:
                break
            node, depth = nxt, depth + 1
            path_nodes.append(node)
            m = mark.get(node)
            if m is not None:
                best_depth, best_req = depth, m
        shared = depth
        for x in h[depth:]:
            nxt = len(trie) + 1
            trie[(node, x)] = nxt
            node = nxt
            path_nodes.append(node)
        conv[i] = conv[best_req] if best_req >= 0 else i
        start[i] = best_depth
        full = len(h) if length < 0 or length >= len(h) * block_tokens else len(h) - 1
        for k in {full, len(h)}:
            if k > shared:
                mark[path_nodes[k - 1]] = i
    _, user = np.unique(conv, return_inverse=True)
    sizes = np.fromiter((len(h) for h in hashes), np.int64, count=n)
    new_len = sizes - start
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(new_len, out=offsets[1:])
    flat = _flatten(df["hash_ids"]).to_numpy(zero_copy_only=False).astype(np.int64)
    all_off = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=all_off[1:])
    src = np.repeat(all_off[:-1] + start - offsets[:-1], new_len) + np.arange(offsets[-1])
    t = (ts_ms - ts_ms[0]) / 1000.0
    rows = df["rec"].to_numpy().astype(np.int64)
    return Requests(user.astype(np.int64), t, rows, offsets, flat[src], real_time=True), n


def _flatten(s: pl.Series) -> pa.Array:
    """All list values of ``s`` in order (empty lists contribute nothing)."""
    arr = s.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return pc.list_flatten(arr)
