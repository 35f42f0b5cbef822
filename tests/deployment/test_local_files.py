"""Files the deployment tooling leaves on the machine (issue 19 item 7): private keys that no
other user can read at any moment, unique work folders, no world-writable folder; and the
ports it takes, below the kernel's ephemeral range.

The results folder's atomic writes are tested in tests/server_app/test_results.py.
"""

from __future__ import annotations

import io
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from deploy import certificates, ports
from deploy.certificates import make_certificates, make_node_key
from deploy.local import new_workdir

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


@pytest.fixture
def created_modes(monkeypatch, tmp_path):
    """The mode of every file opened for writing under tmp_path, read (fstat) the moment it was
    opened: what another user could have read before any later chmod. The umask is 000 while
    the test runs, so a file created with an open default (0666) shows it."""
    modes: dict[str, int] = {}
    real_os_open, real_io_open = os.open, io.open

    def note(path, fd: int) -> None:
        if str(path).startswith(str(tmp_path)):
            modes.setdefault(str(path), stat.S_IMODE(os.fstat(fd).st_mode))

    def os_open(path, flags, mode=0o777, *args, **kwargs):
        fd = real_os_open(path, flags, mode, *args, **kwargs)
        if flags & (os.O_WRONLY | os.O_RDWR):
            note(path, fd)
        return fd

    def io_open(file, mode="r", *args, **kwargs):
        handle = real_io_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
            note(os.fspath(file), handle.fileno())
        return handle

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    old = os.umask(0)
    yield modes
    os.umask(old)


def test_private_keys_are_never_readable_by_others_even_with_umask_000(tmp_path, created_modes):
    make_certificates(tmp_path / "certs", ["node.example"])
    key = make_node_key(tmp_path / "keys", "supernode-0")
    keys = [tmp_path / "certs" / "ca.key", tmp_path / "certs" / "server.key", key]
    for path in keys:
        assert created_modes[str(path)] == 0o600, (path, oct(created_modes[str(path)]))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # the public halves are for everyone
    assert stat.S_IMODE((tmp_path / "certs" / "ca.crt").stat().st_mode) & 0o044
    assert stat.S_IMODE(Path(f"{key}.pub").stat().st_mode) & 0o044


def test_keys_are_never_overwritten_or_followed(tmp_path):
    make_certificates(tmp_path, [])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FileExistsError, match="ca.crt, ca.key, server.pem, server.key"):
        make_certificates(tmp_path, [])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    (tmp_path / "elsewhere").write_text("not a key")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "node").symlink_to(tmp_path / "elsewhere")  # a planted link
    with pytest.raises(FileExistsError):
        make_node_key(tmp_path / "keys", "node")
    assert (tmp_path / "elsewhere").read_text() == "not a key"


def test_a_key_whose_write_fails_leaves_no_file(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(certificates.os, "fdopen", fail)
    with pytest.raises(OSError, match="disk full"):
        make_node_key(tmp_path, "node")
    assert list(tmp_path.iterdir()) == []


def test_the_work_folder_is_new_and_private_unless_one_is_given(tmp_path):
    first, second = new_workdir(None), new_workdir(None)
    try:
        assert first != second
        for path in (first, second):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700 and not any(path.iterdir())
    finally:
        first.rmdir()
        second.rmdir()
    given = new_workdir(tmp_path / "new")
    assert given == tmp_path / "new" and stat.S_IMODE(given.stat().st_mode) == 0o700
    (given / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not empty"):  # refused, never emptied
        new_workdir(given)
    assert (given / "keep.txt").read_text() == "mine"
    assert "/tmp/flower-deploy" not in (ROOT / "deploy" / "local.py").read_text()


# --- docker/ -------------------------------------------------------------------------------------

CERTS_SH_KEYS = [
    "certs/ca.key",
    "certs/server.key",
    "certs/node.key",
    "keys/supernode-0",
    "keys/supernode-1",
]


def _run_certs_sh(work: Path, as_user: tuple[int, int] | None, **env: str) -> None:
    script = work / "certs.sh"
    shutil.copy(DOCKER / "certs.sh", script)
    prefix: list[str] = []
    if as_user is not None:
        uid, gid = as_user
        os.chown(work, uid, gid)
        os.chown(script, uid, gid)
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "RSA_BITS": "2048",
        **env,
    }
    done = subprocess.run(
        [*prefix, "sh", "-c", f"umask 022 && exec bash {script}"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def certs_work():
    if not (shutil.which("openssl") and shutil.which("ssh-keygen")):
        pytest.skip("certs.sh needs openssl and ssh-keygen")
    work = Path(tempfile.mkdtemp(prefix="certs-sh-"))
    yield work
    shutil.rmtree(work)


def test_certs_sh_run_by_another_user_than_root_leaves_no_key_readable_by_others(certs_work):
    """Run as `nobody` (as root: setpriv) under umask 022: every private key is 0600 and that
    user's (it used to make the containers' keys 0644)."""
    as_user = None
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        as_user = (nobody.pw_uid, nobody.pw_gid)
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) missing")
    _run_certs_sh(certs_work, as_user)
    owner = as_user[0] if as_user else os.geteuid()
    for name in CERTS_SH_KEYS:
        info = (certs_work / name).stat()
        assert stat.S_IMODE(info.st_mode) == 0o600, (name, oct(info.st_mode))
        assert info.st_uid == owner, name
    for name in ("certs/ca.crt", "certs/server.pem", "keys/supernode-0.pub"):
        assert stat.S_IMODE((certs_work / name).stat().st_mode) == 0o644, name


@pytest.mark.skipif(os.geteuid() != 0, reason="gives keys to another uid: needs root")
def test_certs_sh_as_root_gives_the_containers_keys_to_their_user_still_0600(certs_work):
    _run_certs_sh(certs_work, None, CERT_UID="49999")
    for name in CERTS_SH_KEYS:
        info = (certs_work / name).stat()
        assert stat.S_IMODE(info.st_mode) == 0o600, name
        assert info.st_uid == (0 if name == "certs/ca.key" else 49999), name  # CA key: root's


def test_certs_sh_creates_keys_under_umask_077_and_never_widens_them():
    text = (DOCKER / "certs.sh").read_text()
    assert "umask 077" in text
    assert not [
        line
        for line in text.splitlines()
        if "chmod" in line and not line.lstrip().startswith("#") and ".pub" not in line
    ]


def test_no_world_writable_folder_and_no_fixed_temporary_paths():
    compose_run = (DOCKER / "run-compose.sh").read_text()
    assert "0777" not in compose_run and "a+w" not in compose_run and "o+w" not in compose_run
    assert 'install -d -m 0700 "$RESULTS"' in compose_run
    base = (DOCKER / "make-base.sh").read_text()
    assert "/tmp/fl-debootstrap.log" not in base and "mktemp -d" in base
    fixed = re.compile(r'(?<![\w"}])/tmp/')  # the host's /tmp, not "$ROOTFS"/tmp/
    for path in [*DOCKER.glob("*.sh"), *(ROOT / "deploy").glob("*.py")]:
        for line in path.read_text().splitlines():
            if not line.lstrip().startswith("#"):
                assert not fixed.search(line), (path.name, line)


def test_a_port_block_stays_below_the_ephemeral_range():
    """Outgoing connections take ephemeral ports: a block reaching into that range once lost a
    SuperNode its port (the sites deployment waited 900 s for a node that never started)."""
    start = ports.ephemeral_low()
    for _ in range(20):
        base = ports.free_port_block(low=start - 100, high=start + 5000)
        assert start - 100 <= base and base + 40 <= start
    with pytest.raises(RuntimeError, match="below the ephemeral range"):
        ports.free_port_block(low=start, high=start + 5000)
