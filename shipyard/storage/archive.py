"""The tarballs of the contract: model.tar.gz / output.tar.gz (hosts merged), sourcedir.tar.gz, and a
safe way to unpack what users hand us.

A merged tarball can also be made of shares written where the hosts' files are (on Ray, each node): a
host's share is its files as tar members in a gzip member of their own, without the archive's end. The
shares one after the other (gzip reads concatenated members as one stream), then END, are one tar.gz;
each host writes only the files that are its in the merge (`winners`)."""

from __future__ import annotations

import gzip
import os
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from shipyard.errors import StorageError, ValidationError

SKIPPED_NAMES = frozenset({"__pycache__", ".git"})
# The job's tarballs, each made of this directory of /opt/ml on every host.
ARTIFACTS = {"model.tar.gz": "model", "output.tar.gz": "output/data"}
# A tar's end: two zero blocks (what follows the last share of a merged tarball).
END = gzip.compress(b"\0" * 2 * tarfile.BLOCKSIZE, mtime=0)


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


def _write(dest: Path, members: Callable, end: bool = True) -> None:
    """A gzip tar at `dest` of what `members(out)` writes (returning its bytes), or (not `end`) a share:
    no archive end."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    try:
        with gzip.GzipFile(tmp, "wb", mtime=0) as out:
            written = members(out)
            if end:   # two zero blocks, then zeros up to a whole record, as TarFile.close ends an archive
                end_at = written + 2 * tarfile.BLOCKSIZE
                out.write(b"\0" * (2 * tarfile.BLOCKSIZE + -end_at % tarfile.RECORDSIZE))
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def write_share(dest: Path, files: dict[str, Path]) -> None:
    """One host's share of a merged tarball (see the module's docstring)."""
    _write(dest, _files(files), end=False)


def merge_shares(shares: Sequence[Callable[[], BinaryIO]], kept: Sequence[set[str]], dest: Path) -> None:
    """A merged tarball at `dest` from the hosts' shares, each opened by its callable and read as a stream,
    with only the names in its `kept` of each (`winners`)."""
    def write(out) -> int:
        written = 0
        for open_share, names in zip(shares, kept, strict=True):
            with open_share() as raw, tarfile.open(fileobj=raw, mode="r|gz") as share:
                for member in share:
                    if member.name in names:
                        written += _add(out, member, share.extractfile(member))
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
