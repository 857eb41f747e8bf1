from __future__ import annotations

import gzip
import io
import os
import tarfile
import zlib
from pathlib import Path

import pytest

from shipyard.errors import StorageError, ValidationError
from shipyard.storage.archive import (
    SHARE_DATA,
    collect,
    crc32_combine,
    gzip_end,
    make_tarball,
    pack_source,
    safe_extract,
    write_share,
)


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def contents(archive: Path) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


# --- make_tarball ---------------------------------------------------------------------------------


def test_merges_hosts_at_root_and_later_wins(tmp_path):
    write(tmp_path / "algo-1/model.pt", "one")
    write(tmp_path / "algo-1/only1/a.txt", "a")
    write(tmp_path / "algo-2/model.pt", "two")
    write(tmp_path / "algo-2/sub/b.txt", "b")
    n = make_tarball(tmp_path / "model.tar.gz", [tmp_path / "algo-1", tmp_path / "algo-2", tmp_path / "gone"])
    assert n == 3
    assert names(tmp_path / "model.tar.gz") == ["model.pt", "only1/a.txt", "sub/b.txt"]  # one entry, sorted
    assert contents(tmp_path / "model.tar.gz")["model.pt"] == "two"


def test_file_versus_directory_clash(tmp_path):
    write(tmp_path / "h1/x", "file")
    write(tmp_path / "h2/x/inner", "in dir")
    make_tarball(tmp_path / "m.tar.gz", [tmp_path / "h1", tmp_path / "h2"])
    assert contents(tmp_path / "m.tar.gz") == {"x/inner": "in dir"}
    make_tarball(tmp_path / "m2.tar.gz", [tmp_path / "h2", tmp_path / "h1"])
    assert contents(tmp_path / "m2.tar.gz") == {"x": "file"}


def test_empty_and_missing_sources(tmp_path):
    (tmp_path / "empty").mkdir()
    assert make_tarball(tmp_path / "m.tar.gz", [tmp_path / "empty", tmp_path / "missing"]) == 0
    assert names(tmp_path / "m.tar.gz") == []


def test_symlinks_inside_followed_outside_skipped(tmp_path):
    src = tmp_path / "model"
    write(src / "real/weights.bin", "w")
    write(tmp_path / "secret", "s")
    (src / "alias.bin").symlink_to(src / "real/weights.bin")
    (src / "leak").symlink_to(tmp_path / "secret")
    (src / "leakdir").symlink_to(tmp_path)
    (src / "loop").symlink_to(src)
    (src / "broken").symlink_to(src / "nowhere")
    make_tarball(tmp_path / "m.tar.gz", [src])
    assert contents(tmp_path / "m.tar.gz") == {"alias.bin": "w", "real/weights.bin": "w"}


def test_deterministic(tmp_path):
    for name in ["b", "a", "c/d", "c/a"]:
        write(tmp_path / "src" / name)
    make_tarball(tmp_path / "1.tar.gz", [tmp_path / "src"])
    make_tarball(tmp_path / "2.tar.gz", [tmp_path / "src"])
    assert names(tmp_path / "1.tar.gz") == names(tmp_path / "2.tar.gz") == ["a", "b", "c/a", "c/d"]


# --- pack_source ----------------------------------------------------------------------------------


def test_pack_source_dir_entries_at_root_with_dependencies(tmp_path):
    src = tmp_path / "src"
    write(src / "train.py", "main")
    write(src / "pkg/mod.py", "mod")
    write(src / "pkg/__pycache__/mod.cpython-311.pyc", "junk")
    write(src / ".git/HEAD", "junk")
    write(src / "requirements.txt", "numpy")
    write(tmp_path / "shared/data.txt", "outside")
    (src / "linked").symlink_to(tmp_path / "shared")  # followed when asked (refused otherwise: below)
    write(tmp_path / "deps/mylib/__init__.py", "lib")
    dest = pack_source(tmp_path / "out/sourcedir.tar.gz", Path("train.py"), src, [tmp_path / "deps/mylib"],
                       follow_symlinks=True)
    assert dest == tmp_path / "out/sourcedir.tar.gz"
    assert contents(dest) == {
        "linked/data.txt": "outside",
        "mylib/__init__.py": "lib",
        "pkg/mod.py": "mod",
        "requirements.txt": "numpy",
        "train.py": "main",
    }


def test_pack_source_refuses_a_link_out_of_source_dir_or_a_dependency(tmp_path):
    src, dep = tmp_path / "src", tmp_path / "deps/mylib"
    write(src / "train.py", "main")
    write(tmp_path / "secret", "token")
    write(dep / "__init__.py", "lib")
    (src / "pkg").mkdir()
    (src / "pkg/inside.py").symlink_to(src / "train.py")  # stays inside: packed
    (dep / "link").symlink_to(tmp_path / "secret")
    dest = tmp_path / "out.tar.gz"
    with pytest.raises(ValidationError, match=r"^dependencies='mylib/link -> .*secret': the link points outside"):
        pack_source(dest, Path("train.py"), src, [dep])
    (dep / "link").unlink()
    (src / "pkg/deep").symlink_to(tmp_path)
    with pytest.raises(ValidationError, match=r"^source_dir='pkg/deep -> "):
        pack_source(dest, Path("train.py"), src, [dep])
    (src / "pkg/deep").unlink()
    assert contents(pack_source(dest, Path("train.py"), src, [dep])) == {
        "mylib/__init__.py": "lib", "pkg/inside.py": "main", "train.py": "main"}
    assert not (tmp_path / "out.tar.gz.tmp").exists()


def test_pack_source_keeps_exec_bit(tmp_path):
    script = write(tmp_path / "src/run.sh", "#!/bin/sh")
    script.chmod(0o755)
    dest = pack_source(tmp_path / "s.tar.gz", Path("run.sh"), tmp_path / "src")
    with tarfile.open(dest) as tar:
        assert tar.getmember("run.sh").mode & 0o100


def test_pack_source_without_source_dir_is_only_the_entry(tmp_path):
    entry = write(tmp_path / "proj/train.py", "main")
    write(tmp_path / "proj/other.py", "no")
    dest = pack_source(tmp_path / "s.tar.gz", entry, None)
    assert contents(dest) == {"train.py": "main"}


def test_pack_source_validates(tmp_path):
    write(tmp_path / "src/train.py")
    with pytest.raises(ValidationError, match="entry_point"):
        pack_source(tmp_path / "s.tar.gz", Path("missing.py"), tmp_path / "src")
    with pytest.raises(ValidationError, match="source_dir"):
        pack_source(tmp_path / "s.tar.gz", Path("train.py"), tmp_path / "nope")
    with pytest.raises(ValidationError, match="dependencies"):
        pack_source(tmp_path / "s.tar.gz", Path("train.py"), tmp_path / "src", [tmp_path / "nodep"])
    assert not (tmp_path / "s.tar.gz").exists()


# --- safe_extract ---------------------------------------------------------------------------------


def build(path: Path, members: list[tuple[str, bytes | None, dict]]) -> Path:
    """A tar.gz from (name, data or None, TarInfo attributes) in that order."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, attrs in members:
            info = tarfile.TarInfo(name)
            for key, value in attrs.items():
                setattr(info, key, value)
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


OK = ("ok.txt", b"fine", {})
SYM = tarfile.SYMTYPE
LNK = tarfile.LNKTYPE


@pytest.mark.parametrize(
    "bad",
    [
        ("../x", b"evil", {}),
        ("sub/../../x", b"evil", {}),
        ("pw", None, {"type": SYM, "linkname": "/etc/passwd"}),
        ("up", None, {"type": SYM, "linkname": "../../x"}),
        ("sub/up", None, {"type": SYM, "linkname": "../../x"}),
        ("hard", None, {"type": LNK, "linkname": "../outside"}),
        ("hard", None, {"type": LNK, "linkname": "/etc/passwd"}),
        ("fifo", None, {"type": tarfile.FIFOTYPE}),
        ("dev", None, {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}),
    ],
    ids=["dotdot", "nested-dotdot", "symlink-etc", "symlink-up", "symlink-nested-up",
         "hardlink-up", "hardlink-abs", "fifo", "chardev"],
)
def test_refuses_and_writes_nothing(tmp_path, bad):
    archive = build(tmp_path / "a.tar.gz", [OK, bad, ("after.txt", b"x", {})])
    dest = tmp_path / "work" / "dest"
    with pytest.raises(StorageError, match=bad[0].split("/")[-1]):
        safe_extract(archive, dest)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.tar.gz"]  # not even dest


def test_an_absolute_name_lands_inside_dest(tmp_path):
    """As GNU tar and tarfile's data filter do: the leading slash is dropped, never written at /etc."""
    archive = build(tmp_path / "a.tar.gz", [("/etc/x", b"inside", {})])
    assert safe_extract(archive, tmp_path / "dest") == 1
    assert (tmp_path / "dest" / "etc" / "x").read_text() == "inside"


def test_refuses_writing_through_a_link_member(tmp_path):
    # "l -> ." is harmless alone, but "l/.." is the parent of dest on disk.
    archive = build(tmp_path / "a.tar", [("l", None, {"type": SYM, "linkname": "."}),
                                         ("l/esc", None, {"type": SYM, "linkname": ".."})])
    with pytest.raises(StorageError, match="esc"):
        safe_extract(archive, tmp_path / "dest")
    archive = build(tmp_path / "b.tar", [("d", None, {"type": SYM, "linkname": "."}),
                                         ("x", None, {"type": SYM, "linkname": "d/../../y"})])
    with pytest.raises(StorageError, match="'x'"):
        safe_extract(archive, tmp_path / "dest2")
    assert not (tmp_path / "dest").exists() and not (tmp_path / "dest2").exists()  # refused up front


def test_refuses_through_existing_link_in_dest(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "out").symlink_to(tmp_path)
    archive = build(tmp_path / "a.tar.gz", [("out/evil", b"e", {})])
    with pytest.raises(StorageError, match="evil"):
        safe_extract(archive, dest)
    assert not (tmp_path / "evil").exists()


def test_extracts_safe_archive_with_inside_links(tmp_path):
    archive = build(
        tmp_path / "a.tar.gz",
        [
            ("./pkg/", None, {"type": tarfile.DIRTYPE, "mode": 0o755}),
            ("./pkg/mod.py", b"print(1)", {"mode": 0o644}),
            ("./pkg/lib.so.1", b"elf", {}),
            ("./pkg/lib.so", None, {"type": SYM, "linkname": "lib.so.1"}),
            ("./top", None, {"type": SYM, "linkname": "pkg/../pkg/mod.py"}),
            ("./copy.py", None, {"type": LNK, "linkname": "./pkg/mod.py"}),
        ],
    )
    assert safe_extract(archive, tmp_path / "dest") == 6
    dest = tmp_path / "dest"
    assert (dest / "pkg/mod.py").read_text() == "print(1)"
    assert os.readlink(dest / "pkg/lib.so") == "lib.so.1" and (dest / "pkg/lib.so").read_text() == "elf"
    assert (dest / "top").read_text() == "print(1)" and (dest / "copy.py").read_text() == "print(1)"


def test_round_trip_with_pack_source(tmp_path):
    write(tmp_path / "src/train.py", "main")
    write(tmp_path / "src/a/b/c.txt", "deep")
    archive = pack_source(tmp_path / "s.tar.gz", Path("train.py"), tmp_path / "src")
    assert safe_extract(archive, tmp_path / "code") == 2
    assert (tmp_path / "code/a/b/c.txt").read_text() == "deep"


def test_not_a_tarball(tmp_path):
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar at all")
    with pytest.raises(StorageError, match="junk.tar.gz"):
        safe_extract(tmp_path / "junk.tar.gz", tmp_path / "d")


# --- shares -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [(0, 0), (1, 0), (0, 1), (3, 1000), (70000, 5), (1, 1 << 20)])
def test_crc32_combine_is_zlibs(lengths):
    a, b = os.urandom(lengths[0]), os.urandom(lengths[1])
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_shares_joined_are_one_gzip_member_of_every_hosts_files(tmp_path):
    sums, bodies = [], []
    for host, files in {"h1": {"a": "one", "d/b": "two"}, "h2": {}, "h3": {"c": "three"}}.items():
        for name, text in files.items():
            write(tmp_path / host / name, text)
        (tmp_path / host).mkdir(exist_ok=True)
        sums.append(write_share(tmp_path / f"{host}.share", collect([tmp_path / host])))
        body = (tmp_path / f"{host}.share").read_bytes()
        bodies.append(body if not bodies else body[SHARE_DATA:])
    (tmp_path / "joined.tar.gz").write_bytes(b"".join(bodies) + gzip_end(sums))
    gzip.decompress((tmp_path / "joined.tar.gz").read_bytes())   # one member: its CRC and length check out
    with tarfile.open(tmp_path / "joined.tar.gz", "r|gz") as tar:   # stream mode reads one gzip member only
        assert {m.name: tar.extractfile(m).read().decode() for m in tar} == {"a": "one", "d/b": "two", "c": "three"}
