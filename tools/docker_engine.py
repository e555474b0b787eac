"""The container engine and the project's image for `docker compose up` on this machine (`make docker`).

    python tools/docker_engine.py              # every step below, each skipped when already done
    python tools/docker_engine.py --optional   # the same, but exit 0 where no engine can run here

1. Debian's `docker.io`, `docker-compose` and `debootstrap`, installed with apt when a step needs them.
2. `dockerd`, started in the background when no engine answers: overlay2 storage, else vfs; its log is
   DAEMON_LOG, its pid file dockerd's own (/var/run/docker.pid). It leaves the host's firewall and
   forwarding alone and makes no default bridge: compose's own network and published ports need none
   of them, and other tests build network namespaces on this host.
3. The base image, Debian bookworm made by `debootstrap --variant=minbase` and imported: nothing is
   pulled from an image registry.
4. What the build takes from this machine, in docker-inputs/ of the build context: torch's wheel, as
   pip finds it for `make setup` (this machine's pip configuration, the pin in pyproject.toml),
   refused when it is a CUDA build; and the certificates this machine trusts, for the build's pip to
   reach the package index as the host's pip does (where that is a proxy or mirror with its own CA).
5. The project image, `docker build --network host` on that base, its layers cached.

Exit status SKIP (77, "skipped" to test harnesses) when no engine can run on this machine: none
answers and starting one needs root. Any other failure is an error.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

from computeall.cli.security.compose import BASE_IMAGE, IMAGE

REPO = Path(__file__).resolve().parents[1]
INPUTS = REPO / "docker-inputs"  # the Dockerfile's files from this machine
TRUST_STORE = "ca-certificates.crt"  # in INPUTS
SUITE = "bookworm"  # the base's Debian release: its python3 is 3.11, as the project's
PACKAGES = {"dockerd": "docker.io", "docker-compose": "docker-compose", "debootstrap": "debootstrap"}  # command -> package
DAEMON_LOG = Path("/var/log/computeall-dockerd.log")
DAEMON_OPTIONS = ["--iptables=false", "--ip-forward=false", "--bridge=none"]
STORAGE_DRIVERS = ("overlay2", "vfs")  # vfs copies every layer whole: slow and large, but runs on any filesystem
DAEMON_START_S = 60
SKIP = 77


class EngineUnavailable(RuntimeError):
    """No engine can run on this machine; the message says why and what to do."""


def run(argv: list[str], **options) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, **options)


@functools.cache
def apt_update() -> None:
    run(["apt-get", "update", "-qq"])


def install(command: str) -> None:
    """The Debian package that brings `command`, when it is missing."""
    if shutil.which(command):
        return
    if os.geteuid() != 0:
        raise EngineUnavailable(f"`{command}` is missing and installing {PACKAGES[command]} needs root: "
                                f"run `make docker` as root, or install it")
    apt_update()
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", PACKAGES[command]],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "version"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_engine() -> None:
    """An engine that answers `docker`: the one running, else a dockerd started here."""
    if engine_answers():
        return
    if os.geteuid() != 0:
        raise EngineUnavailable("no container engine answers `docker version`, and starting dockerd needs root")
    install("dockerd")
    for driver in STORAGE_DRIVERS:
        if start_daemon(driver):
            if driver != STORAGE_DRIVERS[0]:
                print(f"dockerd runs with {driver} storage: {STORAGE_DRIVERS[0]} failed on this kernel "
                      f"(see {DAEMON_LOG}); builds are slower and take more disk", flush=True)
            return
    raise EngineUnavailable(f"dockerd did not start with {' nor '.join(STORAGE_DRIVERS)} storage: see {DAEMON_LOG}")


def start_daemon(driver: str) -> bool:
    """dockerd in its own session (it outlives this script), True once it answers."""
    print(f"starting dockerd with {driver} storage (log: {DAEMON_LOG})", flush=True)
    with DAEMON_LOG.open("ab") as log:
        daemon = subprocess.Popen(["dockerd", f"--storage-driver={driver}", *DAEMON_OPTIONS], stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + DAEMON_START_S
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            return False  # e.g. "driver not supported"
        if engine_answers():
            return True
        time.sleep(0.5)
    daemon.terminate()
    daemon.wait(30)
    return False


def image_exists(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def ensure_base_image() -> None:
    """Debian `SUITE` from its mirror by debootstrap, imported as BASE_IMAGE (once: kept by the engine)."""
    if image_exists(BASE_IMAGE):
        return
    install("debootstrap")
    with tempfile.TemporaryDirectory(prefix="computeall-base-") as root:
        try:
            run(["debootstrap", "--variant=minbase", SUITE, root])
        finally:
            unmount_below(Path(root))  # a debootstrap that failed half-way may leave /proc mounted in it
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (Path(root) / cache).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        run(["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout)
        tar.stdout.close()
        if tar.wait():
            raise subprocess.CalledProcessError(tar.returncode, tar.args)


def unmount_below(root: Path) -> None:
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if Path(m).is_relative_to(root)), reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False)


def torch_requirement() -> str:
    """torch's pin, as pyproject.toml (the one place that says it) writes it: `torch==X.Y.Z`."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d for d in dependencies if d.replace(" ", "").startswith("torch=="))


def stage_trust_store() -> None:
    """The certificates this machine trusts (its OpenSSL's, $SSL_CERT_FILE where set), for the build's pip."""
    shutil.copyfile(ssl.get_default_verify_paths().cafile, INPUTS / TRUST_STORE)


def stage_torch_wheel() -> Path:
    """The pinned torch's wheel in INPUTS, as pip finds it for `make setup`; a CUDA build is refused."""
    version = torch_requirement().split("==")[1].strip()
    for stale in INPUTS.glob("torch-*.whl"):
        if not stale.name.startswith((f"torch-{version}-", f"torch-{version}+")):
            stale.unlink()
    if not list(INPUTS.glob("torch-*.whl")):
        run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(INPUTS), torch_requirement()])
    [wheel] = INPUTS.glob("torch-*.whl")
    if needs := cuda_requirements(wheel):
        wheel.unlink()
        raise SystemExit(f"pip found a CUDA build of torch ({wheel.name}, which needs {', '.join(needs)}): the image "
                         f"takes a CPU build. Put one in {INPUTS} (e.g. {wheel.name.split('-')[0]}-{version}+cpu-...whl), or "
                         f"point pip at an index or folder that has it (PIP_FIND_LINKS, PIP_EXTRA_INDEX_URL)")
    return wheel


def cuda_requirements(wheel: Path) -> list[str]:
    """The NVIDIA packages a torch wheel requires: a CUDA build names its CUDA libraries, a CPU build none."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].split(";")[0].strip() for line in lines
            if line.startswith("Requires-Dist:") and line.split(":", 1)[1].strip().startswith("nvidia-")]


def build_image() -> None:
    run(["docker", "build", "--force-rm", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "--tag", IMAGE, str(REPO)])


def prepare() -> None:
    ensure_engine()
    install("docker-compose")
    ensure_base_image()
    stage_torch_wheel()
    stage_trust_store()
    build_image()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optional", action="store_true",
                        help="exit 0 (saying why) where no engine can run on this machine, as `make test` does")
    args = parser.parse_args(argv)
    try:
        prepare()
    except EngineUnavailable as exc:
        print(f"docker: {exc}", file=sys.stderr)
        return 0 if args.optional else SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
