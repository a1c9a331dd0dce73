"""The public logs the tests and benchmarks read: where to get them and how to check them.

helm-plan never ships these files (their licenses forbid redistribution).
:data:`CATALOG` names each one with its upstream source, license and SHA-256;
:func:`check` compares a folder's copies against it. The folder defaults to
``$HELM_PLAN_DATASETS``, else ``../shared/datasets`` beside the repository.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from helm_plan.errors import InputFileError

ENV_DIR = "HELM_PLAN_DATASETS"
"""Environment variable naming the datasets folder."""
ENV_REQUIRE = "HELM_PLAN_REQUIRE_DATASETS"
"""Set to 1 (CI) to make tests fail, not skip, when the datasets folder is absent."""


@dataclass(frozen=True)
class Dataset:
    """One public log as the tests expect it."""

    file: str
    """File (or folder) name inside the datasets folder."""
    what: str
    """What it is."""
    source: str
    """Where to download it."""
    license: str
    """Its terms of use."""
    sha256: str | None
    """SHA-256 of the file (None for a folder of many files)."""


CATALOG: tuple[Dataset, ...] = (
    Dataset(
        "movielens-100k.inter.tsv",
        "MovieLens 100K ratings, RecBole atomic format (upstream ml-100k.inter)",
        "https://github.com/RUCAIBox/RecBole/tree/master/dataset_example/ml-100k",
        "GroupLens ML-100K terms: research use, no redistribution",
        "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
    ),
    Dataset(
        "amazon-video-games.seq.txt",
        "Amazon Video Games user-item pairs in time order (upstream data/Video.txt)",
        "https://github.com/kang205/SASRec/tree/master/data",
        "McAuley Amazon reviews: research use",
        "b7376fe24430743f411dc7f567285657b2adb3f74361cc7ba0aee94f3024b651",
    ),
    Dataset(
        "taobao-userbehavior-sample.csv",
        "first 4,321 rows of Taobao UserBehavior.csv",
        "https://tianchi.aliyun.com/dataset/649",
        "Alibaba Tianchi: research use",
        "e6f47712a2ae149885993ac7b520cf5ba3b099b2e52f90cfddd912455c710e6d",
    ),
    Dataset(
        "mooncake-conversation.jsonl",
        "Mooncake FAST'25 conversation trace (upstream conversation_trace.jsonl)",
        "https://github.com/kvcache-ai/Mooncake/tree/main/FAST25-release/traces",
        "Apache-2.0",
        "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
    ),
    Dataset(
        "azure-llm-2023-code.csv",
        "Azure LLM inference arrivals 2023, code service (upstream AzureLLMInferenceTrace_code.csv)",
        "https://github.com/Azure/AzurePublicDataset",
        "CC-BY-4.0",
        "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
    ),
    Dataset(
        "servegen-m-large",
        "ServeGen per-client rate series of a large language model (folder of chunk-*-trace.csv)",
        "https://github.com/alibaba/ServeGen",
        "Apache-2.0",
        None,
    ),
)
"""Every public log the tests read (sha256 from the datasets folder's README)."""


def default_dir(repo: str | os.PathLike[str] | None = None) -> Path:
    """``$HELM_PLAN_DATASETS`` if set, else ``../shared/datasets`` beside ``repo`` (or cwd)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    return Path(repo if repo is not None else Path.cwd()).resolve().parent / "shared" / "datasets"


def sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (streamed)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Status:
    """How one catalogued log looks in a folder."""

    dataset: Dataset
    """The catalogue entry."""
    status: str
    """ok, missing or mismatch (a folder entry: ok when it holds .csv files)."""
    sha256: str | None
    """The file's actual SHA-256 (None when missing or a folder)."""


def check(folder: str | os.PathLike[str]) -> list[Status]:
    """Check ``folder``'s copies of every catalogued log against its SHA-256."""
    d = Path(folder)
    if not d.is_dir():
        raise InputFileError(
            f"datasets folder {d} is a file, not a folder"
            if d.exists()
            else f"datasets folder {d} not found",
            hint=f"download the logs listed by `helm-plan datasets` into it, or set {ENV_DIR}",
        )
    out = []
    for ds in CATALOG:
        p = d / ds.file
        if ds.sha256 is None:
            ok = p.is_dir() and any(p.glob("*.csv"))
            out.append(Status(ds, "ok" if ok else "missing", None))
        elif not p.is_file():
            out.append(Status(ds, "missing", None))
        else:
            got = sha256(p)
            out.append(Status(ds, "ok" if got == ds.sha256 else "mismatch", got))
    return out
