"""Ray on separate nodes: ``plan`` on 2 one-CPU Ray nodes against 1, and what more would give.

A Ray cluster on this machine, all on loopback, as a multi-machine one is started:
``ray start --head --num-cpus 0`` (the head runs the GCS and the driver, no tasks), then
``ray start --address HEAD --num-cpus 1`` once per worker node. The same ``plan`` (a
synthetic mixed trace, 1 GPU x 3 policies x 3 routers: the load-curve points and the 9
combinations are the tasks) runs

1. on the local executor with 1 worker (the reference answer and the peer time);
2. on the Ray cluster with 1 worker node, then with 2 (a second ``ray start --address``);

and every Ray answer must equal the local one (its capacity, evaluated and load-curve
tables, byte for byte). Each task reports its own time and its result's size (through the
executor's work counters), each map its wall time and the bytes it put in the object store,
so the table ends with a projection to 4, 16 and 64 nodes: the driver's serial part, plus
for each map the greedy in-order schedule of its measured task times on N one-CPU nodes
(never shorter than its largest task), plus each map's fixed overhead as measured on one
node, plus the shared objects each node fetches at ``--net-gbps``.

Only the processes this script starts are stopped (by pid, found by the cluster's own temp
folder); nothing else on the machine is touched.

Run: ``python benchmarks/bench_ray_nodes.py [--requests N] [--repeats K] [--net-gbps G]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RAY = str(Path(sys.executable).with_name("ray"))
TAG = "bench_ray_task"
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
"""Every process of the loopback cluster, driver included: no token (nothing leaves this host;
a real cluster shares one token, README "Running on a Ray cluster")."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args: str, tmp: Path) -> None:
    out = subprocess.run([RAY, "start", *args], capture_output=True, text=True, env=ENV,
                         check=False, cwd=tmp)  # fmt: skip
    if out.returncode:
        raise SystemExit(
            f"ray start {' '.join(args)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
        )


def start_head(tmp: Path) -> str:
    port = free_port()
    _ray("--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false",
         f"--temp-dir={tmp}", "--node-ip-address=127.0.0.1", tmp=tmp)  # fmt: skip
    return f"127.0.0.1:{port}"


def add_node(address: str, tmp: Path) -> None:
    _ray(f"--address={address}", "--num-cpus=1", "--node-ip-address=127.0.0.1", tmp=tmp)


def cluster_pids(tmp: Path) -> list[int]:
    """Processes whose command line names this cluster's temp folder (its raylets, GCS, workers)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(tmp) in cmd:
            pids.append(int(d.name))
    return pids


def stop_cluster(tmp: Path) -> int:
    """SIGTERM, then SIGKILL, every process of this cluster; returns how many were left after."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        for pid in cluster_pids(tmp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while cluster_pids(tmp) and time.monotonic() < deadline:
            time.sleep(0.2)
    return len(cluster_pids(tmp))


SHAPES = {
    "9": (("a100-80g",), ("best-static", "emb-max", "kv-max"), ("jsq", "round-robin", "helm")),
    "48": (
        ("a100-80g", "h100-80g", "a100-40g"),
        ("best-static", "emb-max", "kv-max", "controller"),
        ("jsq", "affinity", "kv-overlap", "helm"),
    ),
}
"""Plan shapes (GPUs, policies, routers): ``9``, one GPU x 3 policies x 3 routers (3 tasks in
the combination map: a task is one GPU and policy, its routers searched in turn); ``48``, the
issue's 1M-request plan, 3 GPUs x analyze's 4 plan policies x its 4 routers (12 tasks)."""


def make_plan_inputs(requests: int, shape: str = "9"):
    from helm_plan import arrays as A
    from helm_plan.oracle import OracleConfig
    from helm_plan.plan import PlanConfig
    from helm_plan.sim import NodeConfig
    from helm_plan.synth import SynthConfig, synthesize

    qps = 60.0
    table = synthesize(SynthConfig(regime="mixed", qps=qps, duration_s=requests / qps,
                                   items=20_000, candidates=64, seed=1))  # fmt: skip
    gpus, policies, routers = SHAPES[shape]
    cfg = PlanConfig(gpus=gpus, policies=policies, routers=routers, pool_fraction=0.1, scale=6.0,
                     max_nodes=16, node=NodeConfig(window_s=10.0), n_boot=100,
                     oracle=OracleConfig(coarse_step=0.25), load_max_requests=20_000)  # fmt: skip
    return A.from_table(table, seed=1), cfg


def _answer(res) -> bytes:  # noqa: ANN001
    return b"".join(getattr(res, k).write_ipc(None).getvalue()
                    for k in ("capacity", "evaluated", "load_curve", "max_qps"))  # fmt: skip


def instrument():
    """Time every Ray task and map, and size what they ship (returns the record)."""
    import ray

    from helm_plan.exec import counters
    from helm_plan.exec import ray as exray

    rec: dict = {"maps": []}
    real_task, real_map, real_put = exray._run_task, exray.RayExecutor.map, exray.RayExecutor._put

    def timed_task(fn, box, item):  # noqa: ANN001, ANN202
        t0 = time.time()
        out, counts = real_task(fn, box, item)
        t1 = time.time()
        size = len(ray.cloudpickle.dumps(out))
        counts = {**counts, TAG: {f"{t0:.6f}|{t1:.6f}|{os.getpid()}|{size}": 1}}
        return out, counts

    def timed_map(self, fn, items, **kw):  # noqa: ANN001, ANN003, ANN202
        before = counters.snapshot().get(TAG, {})
        put0 = rec.setdefault("put_bytes", 0)
        t0 = time.time()
        out = real_map(self, fn, items, **kw)
        t1 = time.time()
        tasks = [tuple(float(x) for x in k.split("|")) for k in counters.snapshot().get(TAG, {})
                 if k not in before]  # fmt: skip
        rec["maps"].append({"t0": t0, "t1": t1, "tasks": tasks,
                            "put_bytes": rec["put_bytes"] - put0})  # fmt: skip
        return out

    def sized_put(self, ray_mod, obj):  # noqa: ANN001, ANN202
        if self._puts.get(id(obj), (None,))[0] is not obj:
            rec["put_bytes"] = rec.get("put_bytes", 0) + len(ray.cloudpickle.dumps(obj))
        return real_put(self, ray_mod, obj)

    exray._run_task = timed_task
    exray.RayExecutor.map = timed_map
    exray.RayExecutor._put = sized_put
    return rec


def greedy_makespan(durations: list[float], n: int) -> float:
    """Tasks taken in order by the first free of ``n`` workers (how Ray hands them out)."""
    free = np.zeros(n)
    for d in durations:
        k = int(np.argmin(free))
        free[k] += d
    return float(free.max())


def project(rec: dict, wall: float, nodes: int, net_gbps: float) -> tuple[float, dict]:
    """The run's wall time on ``nodes`` one-CPU nodes from its measured parts."""
    maps = rec["maps"]
    in_maps = sum(m["t1"] - m["t0"] for m in maps)
    serial = wall - in_maps
    total = serial
    parts = {"serial_s": serial, "largest_task_s": 0.0, "shared_bytes": 0, "maps": len(maps)}
    for m in maps:
        d = [t1 - t0 for t0, t1, *_ in m["tasks"]]
        if not d:
            continue
        measured_span = greedy_makespan(d, m["nodes"])
        overhead = max(0.0, (m["t1"] - m["t0"]) - measured_span)
        fetch = m["put_bytes"] * min(nodes, len(d)) / (net_gbps * 1e9 / 8)
        total += greedy_makespan(d, nodes) + overhead + fetch
        parts["largest_task_s"] = max(parts["largest_task_s"], max(d))
        parts["shared_bytes"] += m["put_bytes"]
    return total, parts


def child(mode: str, address: str, requests: int, out: str, shape: str) -> None:
    """One plan in this fresh process; writes its wall time, answer hash and task record."""
    import hashlib

    from helm_plan import exec as executors
    from helm_plan.plan import plan

    arrays, cfg = make_plan_inputs(requests, shape)
    rec = instrument() if mode == "ray" else {"maps": []}
    if mode == "ray":
        from helm_plan.exec.ray import RayExecutor

        ex = RayExecutor(address=address)
        # every worker imports helm_plan and loads its compiled kernels before the timing:
        # a small plan first (its combinations reach every node)
        small, _ = make_plan_inputs(max(300, requests // 10), shape)
        plan(small, cfg, executor=ex)
        rec["maps"].clear()
    else:
        ex = executors.local(1)
    t0 = time.perf_counter()
    t_ep = time.time()
    res = plan(arrays, cfg, executor=ex)
    wall = time.perf_counter() - t0
    nodes = ex.workers
    for m in rec["maps"]:
        m["nodes"] = nodes
    ex.close()
    Path(out).write_text(json.dumps({"wall_s": wall, "t0": t_ep, "nodes": nodes,
                                     "answer": hashlib.sha256(_answer(res)).hexdigest(),
                                     "rec": rec}))  # fmt: skip


def run_child(mode: str, address: str, requests: int, tmp: Path, shape: str) -> dict:
    out = tmp / f"{mode}-{time.monotonic_ns()}.json"
    r = subprocess.run([sys.executable, __file__, "--child", mode, address, str(requests),
                        str(out), shape], capture_output=True, text=True, check=False, env=ENV)  # fmt: skip
    if r.returncode:
        raise SystemExit(f"{mode} run failed:\n{r.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved runs per side, best kept")
    ap.add_argument("--net-gbps", type=float, default=10.0, help="network of the projection")
    ap.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="9",
        help="9: 1 GPU x 3 policies x 3 routers; 48: 3 x 4 x 4, the issue's plan",
    )
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, address, n, out, shape = args.child
        child(mode, address, int(n), out, shape)
        return
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="hp-ray-", dir="/tmp"))
    runs: dict[str, list[dict]] = {"local": [], "ray1": [], "ray2": []}
    try:
        address = start_head(tmp)
        add_node(address, tmp)
        for _ in range(args.repeats):  # one worker node
            runs["local"].append(run_child("local", "", args.requests, tmp, args.shape))
            runs["ray1"].append(run_child("ray", address, args.requests, tmp, args.shape))
            print(f"  local 1 worker {runs['local'][-1]['wall_s']:.1f} s, ray 1 node "
                  f"{runs['ray1'][-1]['wall_s']:.1f} s", flush=True)  # fmt: skip
        add_node(address, tmp)
        for _ in range(args.repeats):
            runs["ray2"].append(run_child("ray", address, args.requests, tmp, args.shape))
            print(f"  ray 2 nodes {runs['ray2'][-1]['wall_s']:.1f} s", flush=True)
    finally:
        left = stop_cluster(tmp)
        if not left:
            shutil.rmtree(tmp, ignore_errors=True)
    answers = {r["answer"] for rs in runs.values() for r in rs}
    best = {k: min(rs, key=lambda r: r["wall_s"]) for k, rs in runs.items()}
    assert all(r["nodes"] == n for k, n in (("ray1", 1), ("ray2", 2)) for r in runs[k])
    t_l, t_1, t_2 = (best[k]["wall_s"] for k in ("local", "ray1", "ray2"))
    print(f"\nanswers identical (local 1 worker, ray 1 node, ray 2 nodes): "
          f"{'yes' if len(answers) == 1 else 'NO'}; cluster processes left: {left}")  # fmt: skip
    print("| figure | ours | peer (same run) | ratio |\n|---|---|---|---|")
    print(f"| plan, {args.requests:,} requests x6, {args.shape} combinations, Ray on 2 one-CPU nodes | "
          f"{t_2:.1f} s | Ray on 1 node: {t_1:.1f} s | {t_1 / t_2:.2f}x |")  # fmt: skip
    print(f"| the same, Ray on 1 node | {t_1:.1f} s | local executor, 1 worker: {t_l:.1f} s | "
          f"{t_1 / t_l:.2f} of local |")  # fmt: skip
    rec = best["ray1"]["rec"]
    print("\nmaps of the plan (1 node / 2 nodes): tasks, their CPU sum and the largest, wall:")
    print("| map | tasks | task sum | largest task | wall, 1 node | wall, 2 nodes |")
    print("|---|---|---|---|---|---|")
    for i, (m1, m2) in enumerate(zip(rec["maps"], best["ray2"]["rec"]["maps"], strict=False)):
        d = [t1 - t0 for t0, t1, *_ in m1["tasks"]]
        print(f"| {i} | {len(d)} | {sum(d):.1f} s | {max(d, default=0):.1f} s | "
              f"{m1['t1'] - m1['t0']:.1f} s | {m2['t1'] - m2['t0']:.1f} s |")  # fmt: skip
    print(
        "\nprojection from the 1-node run's task times (greedy in-order schedule per map, "
        f"{args.net_gbps:g} Gb/s for the shared objects):"
    )
    print("| nodes | projected wall | serial part | largest task | shared bytes per node |")
    print("|---|---|---|---|---|")
    for n in (1, 2, 4, 16, 64):
        t, parts = project(rec, t_1, n, args.net_gbps)
        meas = {1: t_1, 2: t_2}.get(n)
        tail = f" (measured {meas:.1f} s)" if meas else ""
        print(
            f"| {n} | {t:.1f} s{tail} | {parts['serial_s']:.1f} s | "
            f"{parts['largest_task_s']:.1f} s | {parts['shared_bytes'] / 2**20:.1f} MiB |"
        )


if __name__ == "__main__":
    main()
