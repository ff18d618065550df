"""Another local user of this machine, made for a test session: a real uid of its own (`useradd`), its commands run
with `setpriv` (its uid, its group, no other groups), so the kernel treats it as any other user of a shared node. Only
root can make one; elsewhere the fixture skips, saying so.

    user = SecondUser.make()        # useradd; user.remove() (userdel) at the end
    user.python(CODE, *args)        # the system's Python 3 as that user (standard library only), CompletedProcess
    user.start_python(CODE, *args)  # the same, in the background (Popen)
    base = playground()             # a folder under /tmp both reach (0711); removed by the caller
    shared = user.shared_folder(base / "out")  # root's; the user's group may write it (a shared OUTPUT_DIR)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SETPRIV = "setpriv"
# a Python the other user can run: the system's (the test env's may live in a folder only root can enter)
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable)


def why_not() -> str | None:
    """Why no second user can be made here, or None."""
    if os.geteuid() != 0:
        return "only root can make a second local user (useradd) and run as it (setpriv)"
    missing = [tool for tool in ("useradd", "userdel", SETPRIV) if not shutil.which(tool)]
    return f"{', '.join(missing)} not installed" if missing else None


@dataclass
class SecondUser:
    name: str
    uid: int
    gid: int
    python_path: str = ""

    @classmethod
    def make(cls, prefix: str = "g8kother") -> SecondUser:
        name = f"{prefix}{os.getpid()}"[:31]
        subprocess.run(["userdel", name], capture_output=True)  # one left by a killed session with this pid
        subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        import pwd

        entry = pwd.getpwnam(name)
        user = cls(name, entry.pw_uid, entry.pw_gid)
        for python in PYTHONS:
            if os.path.exists(python) and user.run([python, "-c", "pass"], timeout=60).returncode == 0:
                user.python_path = python
                break
        else:
            user.remove()
            raise RuntimeError(f"no Python 3 that user {name} can run among {PYTHONS}")
        return user

    def argv(self, command: list[str]) -> list[str]:
        return [SETPRIV, f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *command]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8", **(extra or {})}

    def run(self, command: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("env", self.env())
        return subprocess.run(self.argv(command), capture_output=True, text=True, timeout=timeout, cwd="/", **kwargs)

    def python(self, code: str, *args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
        return self.run([self.python_path, "-c", code, *args], timeout=timeout, **kwargs)

    def start_python(self, code: str, *args: str, **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", self.env())
        return subprocess.Popen(self.argv([self.python_path, "-c", code, *args]), cwd="/", stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kwargs)

    def shared_folder(self, path: Path, mode: int = 0o770) -> Path:
        """`path` made as a folder of root's that this user's group may write (the shared OUTPUT_DIR of a team); its
        parents must let others pass (see `playground`)."""
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 0, self.gid)
        path.chmod(mode)
        return path

    def remove(self) -> None:
        subprocess.run(["userdel", self.name], capture_output=True)


def playground() -> Path:
    """A new folder of root's under /tmp that others may pass through but not list or write (0711): where a test
    puts what both users reach. The caller removes it."""
    path = Path(tempfile.mkdtemp(prefix="g8k-shared-", dir="/tmp"))
    path.chmod(0o711)
    return path
