"""The tarballs of the contract: model.tar.gz / output.tar.gz (hosts merged), sourcedir.tar.gz, and a
safe way to unpack what users hand us.

A merged tarball can also be assembled from shares written where the hosts' files are (on Ray, each
node), without their bytes coming together anywhere: a host's share is GZIP_HEAD, then its files as tar
members compressed as raw deflate data ended by a sync flush (byte-aligned, no final block), as pigz
compresses the pieces of one file side by side. The first share, the others from SHARE_DATA on (their
deflate data), then `gzip_end` (the tar's end, the deflate stream's final block, and gzip's trailer,
whose CRC-32 is combined from the shares') are one ordinary gzip member: every gzip reader reads it,
tarfile's stream mode included."""

from __future__ import annotations

import gzip
import os
import posixpath
import struct
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from shipyard.errors import StorageError, ValidationError

SKIPPED_NAMES = frozenset({"__pycache__", ".git"})
# The job's tarballs, each made of this directory of /opt/ml on every host.
ARTIFACTS = {"model.tar.gz": "model", "output.tar.gz": "output/data"}
# A gzip member's header with no name and no time (RFC 1952: deflate, mtime 0, OS unknown).
GZIP_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
SHARE_DATA = len(GZIP_HEAD)   # where a share's deflate data starts


def _walk(top: Path, arc: str, *, confine: Path | None, skip=frozenset(),
          refuse: str | None = None) -> Iterator[tuple[str, Path]]:
    """(archive name, real file) for every file under `top`, symlinks followed.

    With `confine`, links resolving outside it are skipped, or refused naming the link when `refuse`
    names the field they came in. A link back to a directory being walked is skipped, so cycles end."""

    def escapes(path: Path, name: str, real: Path) -> bool:
        if confine is None or not path.is_symlink() or real.is_relative_to(confine):
            return False
        if refuse:
            raise ValidationError(refuse, f"{name} -> {os.readlink(path)}", f"the link points outside {confine}, "
                                  "so what it points to would be uploaded; copy the file in or remove the link, "
                                  "or pass follow_symlinks=True to upload it")
        return True

    def walk(directory: Path, prefix: str, chain: frozenset[Path]) -> Iterator[tuple[str, Path]]:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.name in skip:
                continue
            path, name = Path(entry.path), prefix + entry.name
            real = path.resolve()
            if escapes(path, name, real):
                continue
            if real.is_dir():
                if real not in chain:
                    yield from walk(path, name + "/", chain | {real})
            elif real.is_file():  # broken links, fifos, sockets and devices are left out
                yield name, real

    real_top = top.resolve()
    if escapes(top, arc, real_top):
        return
    if real_top.is_dir():
        yield from walk(top, arc + "/" if arc else "", frozenset({real_top}))
    elif real_top.is_file() and arc:
        yield arc, real_top


def _merge(files: dict, new: dict) -> None:
    """Add `new` over `files`; a later file also replaces an earlier file/directory at its path."""
    new_dirs = {str(p) for name in new for p in PurePosixPath(name).parents if str(p) != "."}
    for name in list(files):
        ancestors = {str(p) for p in PurePosixPath(name).parents}
        if name in new or name in new_dirs or ancestors & new.keys():
            del files[name]
    files.update(new)


def _add(out, info: tarfile.TarInfo, handle) -> int:
    """Write one member as TarFile.addfile writes it; returns the bytes written."""
    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    out.write(header)
    tarfile.copyfileobj(handle, out, info.size)
    padding = -info.size % tarfile.BLOCKSIZE
    out.write(b"\0" * padding)
    return len(header) + info.size + padding


def _files(files: dict[str, Path]) -> Callable:
    """A writer of `files` (archive name -> file) as tar members, sorted by name."""
    def write(out) -> int:
        written = 0
        for name in sorted(files):
            stat = files[name].stat()
            info = tarfile.TarInfo(name)   # owner root, no user or group names: the same on every machine
            info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), stat.st_mode & 0o7777
            with open(files[name], "rb") as handle:
                written += _add(out, info, handle)
        return written
    return write


def _aside(dest: Path, fill: Callable[[BinaryIO], object]) -> None:
    """`fill(file)` writes `dest`, aside and then moved into place: nobody sees it half written."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as raw:
            fill(raw)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write(dest: Path, members: Callable) -> None:
    """A gzip tar at `dest` of what `members(out)` writes (returning its bytes)."""
    def fill(raw: BinaryIO) -> None:
        with gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as out:
            written = members(out)
            end_at = written + 2 * tarfile.BLOCKSIZE   # two zero blocks, then zeros up to a whole record,
            out.write(b"\0" * (2 * tarfile.BLOCKSIZE + -end_at % tarfile.RECORDSIZE))   # as TarFile.close
    _aside(dest, fill)


class _Deflate:
    """A writable file of raw deflate data, its CRC-32 and length kept; `end()` flushes it byte-aligned
    without a final block."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.crc, self.length = raw, 0, 0
        self.compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)

    def write(self, data: bytes) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self.length += len(data)
        self.raw.write(self.compressor.compress(data))

    def end(self) -> None:
        self.raw.write(self.compressor.flush(zlib.Z_SYNC_FLUSH))


def collect(sources: Sequence[Path]) -> dict[str, Path]:
    """The files of each source directory merged at the root (archive name -> file); later sources win.
    Links pointing outside their source directory are left out."""
    files: dict[str, Path] = {}
    for source in map(Path, sources):
        if source.is_dir():
            _merge(files, dict(_walk(source, "", confine=source.resolve())))
    return files


def make_tarball(dest: Path, sources: Sequence[Path]) -> int:
    """A gzip tar of the contents of each source directory merged at the root; later sources win.

    Returns the number of files. Links pointing outside their source directory are left out."""
    files = collect(sources)
    _write(dest, _files(files))
    return len(files)


def write_share(dest: Path, files: dict[str, Path]) -> tuple[int, int]:
    """One host's share of a merged tarball (see the module's docstring): `files` in name order. Returns
    the CRC-32 and the length of its uncompressed bytes, which `gzip_end` needs."""
    sums = []

    def fill(raw: BinaryIO) -> None:
        raw.write(GZIP_HEAD)
        share = _Deflate(raw)
        _files(files)(share)
        share.end()
        sums.append((share.crc, share.length))
    _aside(dest, fill)
    return sums[0]


def gzip_end(shares: Sequence[tuple[int, int]]) -> bytes:
    """What follows the shares (their CRC-32s and lengths, in order) in a merged tarball: the tar's end in
    the deflate stream's final block, then gzip's trailer for everything."""
    end = b"\0" * 2 * tarfile.BLOCKSIZE
    crc, length = 0, 0
    for share_crc, share_length in shares:
        crc, length = crc32_combine(crc, share_crc, share_length), length + share_length
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)
    final = compressor.compress(end) + compressor.flush()
    return final + struct.pack("<II", zlib.crc32(end, crc), (length + len(end)) & 0xFFFFFFFF)


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A + B from those of A and B and B's length (zlib's crc32_combine, which Python's zlib
    does not offer): A's CRC carried through length2 zero bytes by operators in GF(2), squared in turn."""
    def times(matrix: list[int], vector: int) -> int:
        result, row = 0, 0
        while vector:
            if vector & 1:
                result ^= matrix[row]
            vector >>= 1
            row += 1
        return result

    def square(matrix: list[int]) -> list[int]:
        return [times(matrix, matrix[n]) for n in range(32)]

    zeros = [0xEDB88320] + [1 << n for n in range(31)]   # the operator for one zero bit
    for _ in range(3):
        zeros = square(zeros)                             # ... then 2, 4 and 8: one zero byte
    while length2 > 0:   # A's CRC through length2 zero bytes, a power of two at a time
        if length2 & 1:
            crc1 = times(zeros, crc1)
        length2 >>= 1
        zeros = square(zeros)
    return crc1 ^ crc2


def keep_winners(merged: BinaryIO, shares: Sequence[Sequence[str]], dest: Path) -> None:
    """`merged`, a tarball read as a stream whose members are each share's names in order, rewritten at
    `dest` with only the files the merge keeps (`winners`): when hosts' names clash."""
    kept = winners(shares)
    owners = [index for index, names in enumerate(shares) for _ in names]

    def write(out) -> int:
        written = 0
        with tarfile.open(fileobj=merged, mode="r|gz") as tar:
            for owner, member in zip(owners, tar, strict=True):
                if member.name in kept[owner]:
                    written += _add(out, member, tar.extractfile(member))
        return written
    _write(dest, write)


def winners(shares: Sequence[Sequence[str]]) -> list[set[str]]:
    """For the archive names of each host's share, in host order: those the merge keeps (a later host's
    file replaces an earlier one's, and a file or directory at its path)."""
    merged: dict[str, int] = {}
    for index, names in enumerate(shares):
        _merge(merged, dict.fromkeys(names, index))
    kept: list[set[str]] = [set() for _ in shares]
    for name, index in merged.items():
        kept[index].add(name)
    return kept


def pack_source(
    dest: Path, entry_point: Path, source_dir: Path | None, dependencies: Sequence[Path] = (),
    follow_symlinks: bool = False,
) -> Path:
    """sourcedir.tar.gz as the SageMaker SDK builds it (fw_utils.tar_and_upload_dir). A link inside
    source_dir (or a dependency) that points outside it is an error unless `follow_symlinks`."""
    entry_point = Path(entry_point)
    if source_dir is None:
        if not entry_point.is_file():
            raise ValidationError("entry_point", str(entry_point), "no such file; pass an existing script")
        tops = [entry_point]
    else:
        source_dir = Path(source_dir)
        if not source_dir.is_dir():
            raise ValidationError("source_dir", str(source_dir), "no such directory")
        if not (source_dir / entry_point).is_file():
            raise ValidationError(
                "entry_point",
                str(entry_point),
                f"no such file in source_dir {source_dir}; give a path relative to it",
            )
        tops = sorted((Path(e.path) for e in os.scandir(source_dir)), key=lambda p: p.name)
    for dependency in map(Path, dependencies):
        if not dependency.exists():
            raise ValidationError("dependencies", str(dependency), "no such file or directory")
        tops.append(dependency)
    files: dict[str, Path] = {}
    for top in tops:
        name = top.resolve().name if top.name in ("", ".", "..") else top.name
        root = source_dir if source_dir is not None and top.parent == source_dir else top
        field = "source_dir" if root is source_dir else "dependencies"
        if name not in SKIPPED_NAMES:
            _merge(files, dict(_walk(top, name, confine=None if follow_symlinks or top == entry_point else
                                     root.resolve(), skip=SKIPPED_NAMES, refuse=field)))
    _write(dest, _files(files))
    return Path(dest)


def _inside(path: str, links: set[str]) -> bool:
    """Whether the relative `path` stays inside the root without going *through* a link member.

    Lexical normalization is not enough: with `l -> .`, "l/.." is "." on paper but the parent of the
    root on disk, so any intermediate component that is a link member is refused."""
    stack: list[str] = []
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for i, part in enumerate(parts):
        if part == "..":
            if not stack:
                return False
            stack.pop()
        else:
            stack.append(part)
            if i < len(parts) - 1 and "/".join(stack) in links:
                return False
    return True


def _check(members: list[tarfile.TarInfo], dest: Path) -> None:
    """Raise on the first member that could write outside `dest` or is not a plain file/dir/link, before
    anything is written. tarfile's data filter judges each member (absolute links, '..' out of dest,
    links out of dest, existing links in dest, devices and fifos); what it misses on Pythons before
    3.11.13 (CVE-2025-4517 and its siblings) is a path that goes *through* a link member of the same
    archive, not on disk yet when the members are judged, so that is refused here."""
    links = {posixpath.normpath(m.name) for m in members if m.issym() or m.islnk()}
    for m in members:
        try:
            tarfile.data_filter(m, str(dest))
        except tarfile.FilterError as exc:
            raise StorageError(f"refusing to extract {m.name!r}: {exc}") from None
        target = m.linkname
        if m.issym():
            target = posixpath.join(posixpath.dirname(posixpath.normpath(m.name)), target)
        if not _inside(m.name, links) or ((m.issym() or m.islnk()) and not _inside(target, links)):
            raise StorageError(f"refusing to extract {m.name!r}: it would be written through a link member")


def safe_extract(archive: Path, dest: Path) -> int:
    """Extract a tar(.gz) into `dest` after checking every member; nothing is written if one fails."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            dest = Path(dest)
            _check(members, dest)
            dest.mkdir(parents=True, exist_ok=True)
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise StorageError(f"could not extract {archive}: {exc}") from exc
    return len(members)
