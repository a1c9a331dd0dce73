"""Output guards: never write over an input (symlinks and hard links too), fail before work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helm_plan import io
from helm_plan.errors import InputFileError


def test_output_equal_to_an_input_is_refused_through_links(tmp_path: Path):
    src = tmp_path / "t.parquet"
    src.write_bytes(b"data")
    link = tmp_path / "link.parquet"
    link.symlink_to(src)
    hard = tmp_path / "hard.parquet"
    os.link(src, hard)
    for out, inp in [
        (src, src),
        (link, src),
        (src, link),
        (hard, src),
        (tmp_path / "." / src.name, src),
    ]:
        with pytest.raises(InputFileError, match="-o .* is the input file") as ei:
            io.check_outputs({"-o": out}, [inp])
        assert "never overwrites its inputs" in ei.value.hint
    io.check_outputs({"-o": tmp_path / "other.parquet"}, [src, None, "a100-80g"])  # distinct
    io.check_outputs({"-o": None}, [src])
    assert src.read_bytes() == b"data"


def test_outputs_must_differ_and_be_writable(tmp_path: Path):
    with pytest.raises(InputFileError, match="-o and --x are the same file"):
        io.check_outputs({"-o": tmp_path / "a", "--y": tmp_path / "b", "--x": tmp_path / "./a"}, [])
    with pytest.raises(InputFileError, match="is a folder"):
        io.check_outputs({"-o": tmp_path}, [])
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputFileError, match="is a file, not a folder"):
        io.check_outputs({"-o": f / "out.parquet"}, [])
    io.check_outputs({"-o": tmp_path / "new" / "deeper" / "out.parquet"}, [])  # made later


def test_atomic_write_to_a_folder_is_one_error_and_leaves_nothing(tmp_path: Path):
    d = tmp_path / "d"
    d.mkdir()
    with pytest.raises(InputFileError, match="is a folder"):
        io.write_text(d, "x")
    assert list(d.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_a_full_disk_is_one_error_naming_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    old = tmp_path / "kept.json"
    io.write_text(old, "previous")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", full)  # the data reached the disk's cache, not the disk
    for path in (tmp_path / "new.json", old):
        with pytest.raises(InputFileError, match=f"no room to write {path}") as e:
            io.write_text(path, "x" * 1000)
        assert "free space" in e.value.hint and "another disk" in e.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]  # no temporary left
    assert old.read_text() == "previous"
    monkeypatch.undo()
    # a non-disk error inside the block is not relabelled a full disk
    with pytest.raises(PermissionError), io.atomic_path(tmp_path / "y.json"):
        raise PermissionError(errno.EACCES, "denied")
