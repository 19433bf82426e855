"""Removing a directory tree the sandboxed child could write into.

``shutil.rmtree`` is not enough for a tree a hostile child shaped: it recurses
(a 1,200-level chain raises ``RecursionError``, which ``ignore_errors`` does
not cover), and as an unprivileged user it silently leaves a ``chmod 000``
directory (and everything above it) behind.

:func:`remove_tree` walks iteratively with at most two directory descriptors
open at a time, never follows a symbolic link (every open is ``O_NOFOLLOW``,
relative to the parent's descriptor; going back up re-checks the parent's
device and inode), gives the owner ``rwx`` on directories *inside* the tree
only when it lacks it (through the descriptor it opened, so a swapped path
cannot redirect the chmod), unlinks files of any size, and never raises: it
returns what it could not remove.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from typing import List, Optional, Tuple

logger = logging.getLogger("capsule_sandbox")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = getattr(os, "O_PATH", 0) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A bound on reported paths (a hostile tree could make the list huge).
_MAX_REPORTED = 100


def _open_dir(parent_fd: int, name: str, *, fix_modes: bool) -> int:
    """Open ``name`` (a directory, never a link) below ``parent_fd`` for listing.

    With ``fix_modes``, first give the owner ``rwx`` on it when it lacks it and
    we own it (``chmod 000`` / ``0500`` directories), through an ``O_PATH``
    descriptor of that very inode, then open that inode for reading.
    """
    if not fix_modes or not getattr(os, "O_PATH", 0):
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    pfd = os.open(name, _PATH_FLAGS, dir_fd=parent_fd)
    try:
        _ensure_owner_rwx(pfd)
        return os.open(".", _DIR_FLAGS, dir_fd=pfd)
    finally:
        os.close(pfd)


def _ensure_owner_rwx(fd: int) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return
    if st.st_mode & 0o700 != 0o700:
        # /proc/self/fd/N names the inode behind fd (works for O_PATH descriptors).
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | 0o700)


def _ident(fd: int) -> Tuple[int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino)


class _Walk:
    def __init__(self, top: str) -> None:
        self.top = top
        self.failed: List[str] = []
        self.count_failed = 0

    def fail(self, path: str, exc: BaseException | str) -> None:
        self.count_failed += 1
        if len(self.failed) < _MAX_REPORTED:
            detail = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
            self.failed.append(f"{path} ({detail})")

    def empty(self, top_fd: int, top_path: str) -> bool:
        """Remove everything below the open directory ``top_fd``. True if all went."""
        # One frame a level: (fd, its path, names still to do, its identity).
        # Only the current level's descriptor is open; parents are reopened via
        # ".." and checked against their recorded identity.
        fd = os.dup(top_fd)
        path = top_path
        ident = _ident(fd)
        todo = self._list(fd, path)
        stack: List[Tuple[str, List[str], Tuple[int, int]]] = []  # (name, parent's todo, parent's ident)
        ok = True
        try:
            while True:
                if todo:
                    name = todo.pop()
                    child_path = f"{path}/{name}"
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        self.fail(child_path, exc)
                        ok = False
                        continue
                    if not stat.S_ISDIR(st.st_mode):
                        try:
                            os.unlink(name, dir_fd=fd)
                        except FileNotFoundError:
                            pass
                        except OSError as exc:
                            self.fail(child_path, exc)
                            ok = False
                        continue
                    try:
                        os.rmdir(name, dir_fd=fd)  # empty: done without descending
                        continue
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES, errno.EPERM):
                            self.fail(child_path, exc)
                            ok = False
                            continue
                    try:
                        child = _open_dir(fd, name, fix_modes=True)
                    except OSError as exc:
                        self.fail(child_path, exc)
                        ok = False
                        continue
                    stack.append((name, todo, ident))
                    os.close(fd)
                    fd, path, ident = child, child_path, _ident(child)
                    todo = self._list(fd, path)
                    continue
                # This level is done: go up and remove it.
                if not stack:
                    return ok and not self.count_failed
                name, parent_todo, parent_ident = stack.pop()
                try:
                    parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    self.fail(path, exc)
                    return False
                os.close(fd)
                fd = parent
                if _ident(fd) != parent_ident:
                    self.fail(path, "the tree changed while it was being removed")
                    return False
                path = path.rsplit("/", 1)[0]
                ident, todo = parent_ident, parent_todo
                try:
                    os.rmdir(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    self.fail(f"{path}/{name}", exc)
                    ok = False
        finally:
            os.close(fd)

    def _list(self, fd: int, path: str) -> List[str]:
        try:
            return os.listdir(fd)
        except OSError as exc:
            self.fail(path, exc)
            return []


def remove_tree(top: str | os.PathLike[str]) -> List[str]:
    """Remove ``top`` and everything in it; never raises.

    Returns what could not be removed (empty when all of it went), at most
    100 entries, each ``"path (reason)"``.
    """
    top = os.path.abspath(os.fspath(top))
    walk = _Walk(top)
    try:
        # An empty directory (a step's output/ most often) goes in one
        # rmdir, which removes nothing else; anything other than "it is
        # gone" takes the walk below.
        os.rmdir(top)
        return []
    except FileNotFoundError:
        return []
    except OSError:
        pass
    try:
        parent, name = os.path.split(top)
        if not name:
            return [f"{top} (refusing to remove a filesystem root)"]
        try:
            pfd = os.open(parent or "/", _DIR_FLAGS)
        except FileNotFoundError:
            return []
        try:
            try:
                st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            except FileNotFoundError:
                return []
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=pfd)  # a link or file where the tree was: remove the entry only
                return []
            tfd = _open_dir(pfd, name, fix_modes=True)
            try:
                walk.empty(tfd, top)
            finally:
                os.close(tfd)
            try:
                os.rmdir(name, dir_fd=pfd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if not walk.count_failed:
                    walk.fail(top, exc)
        finally:
            os.close(pfd)
    except Exception as exc:  # noqa: BLE001 - cleanup never raises
        walk.fail(top, exc)
    if walk.count_failed > len(walk.failed):
        walk.failed.append(f"... and {walk.count_failed - len(walk.failed)} more")
    return walk.failed


def remove_tree_logged(top: str | os.PathLike[str], what: str) -> Optional[List[str]]:
    """:func:`remove_tree`, logging a warning naming what was left (or None if all went)."""
    left = remove_tree(top)
    if left:
        logger.warning("could not fully remove %s %s: %s", what, os.fspath(top), "; ".join(left[:10]))
        return left
    return None
