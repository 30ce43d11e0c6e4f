"""OS-level isolation of the verifier's sandbox without root: Linux namespaces set up by the zygote
itself (PopuLoRA §3 verifier; the layer bubblewrap and nsjail build, here with ctypes).

Standard library only: `sandbox.py` imports it while running as a ``python -S`` script (the
script's folder is sys.path[0]), and the parent imports it for `remove_tree` and `sweep_stale`.

What `enter_namespaces` builds, once per zygote, before any model code exists in the process:
  * a user namespace (not as root: root keeps its real uid and drops to an unprivileged one per
    run), mapping only the caller's uid/gid to 1000, so nothing else is writable by "owner";
  * a mount namespace whose root is an empty tmpfs, remounted read-only, reached by pivot_root
    with the old root detached: no file of the machine is visible, nothing is writable (the
    zygote imports everything it needs before, as the chroot of the root-only layer already did);
  * a PID namespace: the zygote is its init (pid 1), so ``kill(-1, 9)`` from a run reaches only
    that run, and when the zygote dies the kernel kills every process in it;
  * empty network, IPC and UTS namespaces: no interface but a down loopback, no shared memory.
Each run's child then drops every capability (or, as root, switches to an unprivileged uid) with
no_new_privs set, so it cannot remount the root read-write; a user namespace it creates itself
inherits locked, read-only mounts. The parent-death signal is set again after every credential
change (the kernel clears it there), and the parent checked afterwards (a race with its death).
`pivot_to_read_only_root` builds a root that keeps chosen host paths, read-only, for a process
that must keep importing after the pivot (official evalplus, `benchmarks/official_sandbox.py`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import select
import signal
from types import SimpleNamespace

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH, PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 2, 1, 38
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
"""pivot_root has no glibc wrapper; its syscall number per architecture (asm/unistd.h)."""
INNER_UID = 1000
"""The uid (and gid) the sandbox sees itself as inside its user namespace: not 0, so an exec'd
program gets no capabilities back."""
_os = SimpleNamespace(**vars(os))
"""Our own references: the zygote later replaces os.setuid, os._exit... with stubs for model code."""
LEVELS = ("namespaces", "root-chroot", "none")
"""Isolation levels, strongest first (what `Verifier.isolation.level` reports)."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(libc, result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {_os.strerror(err)}")


def _mount(libc, source, target: bytes, fstype, flags: int, data) -> None:
    _check(libc, libc.mount(source, target, fstype, ctypes.c_ulong(flags), data), f"mount {target!r}")


def set_parent_death(libc, parent_gone) -> None:
    """Die with SIGKILL when the parent dies; exit now if it already has (`parent_gone()`)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_gone():
        _os._exit(1)


def enter_namespaces(libc, owner_uid: int, owner_gid: int, network: bool) -> dict:
    """Move this (single-threaded) process into new namespaces and continue as their pid 1.

    Returns the facts as a dict (``{"error": why}`` when the kernel refuses the first step, with
    nothing changed). Forks: the original process stays outside the PID namespace, waits for pid 1
    and exits with it, so only the returned-to process (pid 1) continues. Raises OSError when a
    later step fails (the caller's process is then half-isolated and must not serve).
    """
    root = _os.geteuid() == 0
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (CLONE_NEWNET if network else 0)
    if libc.unshare(flags | (0 if root else CLONE_NEWUSER)) != 0:
        return {"error": f"unshare: {_os.strerror(ctypes.get_errno())} (user namespaces disabled?)"}
    if not root:
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{INNER_UID} {owner_uid} 1"),
            ("gid_map", f"{INNER_UID} {owner_gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    parent = _os.getppid()
    set_parent_death(libc, lambda: _os.getppid() != parent)  # cleared by the credential change
    alive_r, alive_w = _os.pipe()  # EOF on alive_r: the outer process is gone
    # Opened before the fork: pid 1 may pivot_root at once, which moves this process's root too.
    devnull = _os.open(_os.devnull, _os.O_RDWR)
    pid = _os.fork()
    if pid:  # outside the PID namespace: wait for pid 1, then leave with its status
        _os.close(alive_r)
        for fd in (0, 1, 2):  # our copies of the pipes must not keep the parent's reads open
            _os.dup2(devnull, fd)
        status = _os.waitpid(pid, 0)[1]
        _os._exit(_os.waitstatus_to_exitcode(status) & 0xFF)
    _os.close(devnull)
    _os.close(alive_w)
    set_parent_death(libc, lambda: bool(select.select([alive_r], [], [], 0)[0]))
    _os.close(alive_r)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 ignores default-action signals from inside
    return {
        "user_namespace": not root,
        "mount_namespace": True,
        "pid_namespace": _os.getpid() == 1,
        "network_namespace": network,
        "ipc_namespace": True,
    }


def pivot_to_empty_root(libc, mountpoint: str) -> None:
    """Make an empty read-only tmpfs this mount namespace's root; the old root is detached."""
    pivot_to_read_only_root(libc, mountpoint, [], {}, (MS_NOEXEC, b"size=16k,nr_inodes=8,mode=0555"))


_MS_OF_ST = (
    (_os.ST_RDONLY, MS_RDONLY),
    (_os.ST_NOSUID, MS_NOSUID),
    (_os.ST_NODEV, MS_NODEV),
    (_os.ST_NOEXEC, MS_NOEXEC),
    (_os.ST_SYNCHRONOUS, 16),
    (_os.ST_MANDLOCK, 64),
    (_os.ST_NOATIME, 1024),
    (_os.ST_NODIRATIME, 2048),
    (_os.ST_RELATIME, 1 << 21),
)
"""statvfs flags -> mount flags: a bind remount in a user namespace must repeat the locked ones (atime...)."""


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace (/proc/self/mountinfo's fifth field, unescaped)."""
    with open("/proc/self/mountinfo", "rb") as fh:
        points = [line.split()[4].decode("unicode_escape") for line in fh if len(line.split()) > 4]
    return points


def _remount_read_only(libc, path: str) -> None:
    """Make the bind mount at `path` read-only, nosuid and nodev, keeping the flags it already has."""
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    have = _os.statvfs(path).f_flag
    for st, ms in _MS_OF_ST:
        if have & st:
            flags |= ms
    _mount(libc, None, path.encode(), None, flags, None)


def pivot_to_read_only_root(
    libc,
    mountpoint: str,
    read_only: list[str],
    tmpfs: dict[str, int],
    root: tuple[int, bytes] = (0, b"size=1m,nr_inodes=4096,mode=0755"),
) -> None:
    """Make a fresh tmpfs this mount namespace's root, holding only `read_only` (host paths, bound at
    the same place, read-only, nosuid, nodev, their submounts too) and a new size-limited tmpfs
    (mode 1777, nosuid, nodev, noexec) at each key of `tmpfs` ({path: MiB}); the old root is
    detached and the new root remounted read-only. `mountpoint` (a directory holding none of
    `read_only`) is where the root is built; `root`: extra mount flags and the options of its tmpfs.
    Fails closed: an OSError leaves the caller half-set-up.
    """
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(0, f"pivot_root: unknown syscall number on {platform.machine()}")
    sources: list[str] = []
    for path in sorted({_os.path.realpath(p) for p in read_only if _os.path.exists(p)}):
        if not any(path == s or path.startswith(s.rstrip("/") + "/") for s in sources):
            sources.append(path)  # a path inside another is already there
    if any(s == mountpoint or s.startswith(mountpoint.rstrip("/") + "/") for s in sources):
        raise OSError(0, f"{mountpoint} holds a path to bind; build the root elsewhere")
    points = _mount_points() if sources else []
    _mount(libc, None, b"/", None, MS_REC | MS_PRIVATE, None)  # nothing we do propagates out
    _mount(libc, b"tmpfs", mountpoint.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | root[0], root[1])
    for source in sources:
        target = mountpoint.rstrip("/") + source
        if _os.path.isdir(source):
            _os.makedirs(target, 0o755, exist_ok=True)
        else:
            _os.makedirs(_os.path.dirname(target), 0o755, exist_ok=True)
            _os.close(_os.open(target, _os.O_CREAT | _os.O_WRONLY, 0o444))
        _mount(libc, source.encode(), target.encode(), None, MS_BIND | MS_REC, None)
        _remount_read_only(libc, target)
        for point in points:  # submounts came along with MS_REC, writable: each read-only as well
            if point.startswith(source.rstrip("/") + "/") and _os.path.exists(mountpoint.rstrip("/") + point):
                _remount_read_only(libc, mountpoint.rstrip("/") + point)
    for path, mib in tmpfs.items():
        target = mountpoint.rstrip("/") + path
        _os.makedirs(target, 0o755, exist_ok=True)
        options = f"size={int(mib)}m,nr_inodes=65536,mode=1777".encode()
        _mount(libc, b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)
    _os.chdir(mountpoint)
    _check(libc, libc.syscall(number, b".", b"."), "pivot_root")  # old root stacked under the new
    _check(libc, libc.umount2(b".", MNT_DETACH), "umount old root")
    _os.chdir("/")
    _mount(libc, None, b"/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def drop_privileges(libc, uid) -> None:
    """In a run's child: no new privileges, then no capabilities (user namespace) or an
    unprivileged uid (root, which drops every capability with it)."""
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if uid is None:
        if libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()) != 0:  # v3, all zero
            _os._exit(2)
        return
    _os.setgroups([])
    _os.setgid(uid)
    _os.setuid(uid)


# ---------------------------------------------------------------- host-side cleanup (parent and zygote)
def remove_tree(path: str) -> None:
    """Delete a directory tree of any depth without recursion and without following links.

    One directory descriptor open at a time (a program can nest deeper than the fd limit or the
    recursion limit); the names on the way down are kept to remove each emptied directory from
    its parent. Only for trees no process is still changing (the run's processes are dead).
    """
    try:
        _os.rmdir(path)  # the common case: nothing in it
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    flags = _os.O_RDONLY | _os.O_DIRECTORY | _os.O_NOFOLLOW
    fd, names = _os.open(path, flags), []
    try:
        while True:
            child = None
            for name in _os.listdir(fd):
                try:
                    _os.unlink(name, dir_fd=fd)
                except (IsADirectoryError, PermissionError):  # EISDIR is EPERM on some kernels
                    child = name
                    break
            if child is not None:
                with contextlib.suppress(OSError):  # a program may have left it unreadable (mode 000); not a link
                    _os.chmod(child, 0o700, dir_fd=fd)
                down = _os.open(child, flags, dir_fd=fd)
                _os.close(fd)
                fd = down
                names.append(child)
                continue
            if not names:
                break
            up = _os.open("..", flags, dir_fd=fd)
            _os.close(fd)
            fd = up
            _os.rmdir(names.pop(), dir_fd=fd)
    finally:
        _os.close(fd)
    _os.rmdir(path)


def sweep_stale(parent_dir: str, prefix: str) -> None:
    """Remove ``{parent_dir}/{prefix}{pid}-*`` directories of ours whose owning pid is dead."""
    try:
        entries = list(_os.scandir(parent_dir))
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(prefix) :].split("-", 1)[0]
        if not entry.name.startswith(prefix) or not pid.isdigit():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != _os.geteuid():
                continue
            _os.kill(int(pid), 0)
            continue  # the owner still runs
        except ProcessLookupError:
            pass
        except OSError:  # another user's pid, or the entry vanished
            continue
        with contextlib.suppress(OSError):
            remove_tree(entry.path)
