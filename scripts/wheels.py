"""Installing headsweep offline on top of a PyTorch that is already there (a cluster module, a container),
from a folder of wheels brought along, without replacing that torch.

    python scripts/wheels.py download --wheels DIR [--python-version 3.12]   # on a machine with internet
    python scripts/wheels.py install --wheels DIR [--dev] [--dry-run]        # on the node, with its python

(`make wheels` and `make install-offline` run these.) `download` fetches every dependency of headsweep,
and theirs, as wheels for the node's Python and platform; torch, and what only torch needs, is left out:
the node has its own. `install` first checks, with no network and before pip runs, that each requirement
is either installed already (torch must be) or has a wheel in DIR, following each wheel's own requirements;
a folder that lacks one is one line naming it and what needs it. Then pip installs headsweep editable with
`--no-index --find-links DIR`, torch pinned by a constraint to the installed build.

This file runs before headsweep is installed, so it lives in scripts/, not in the package: it imports nothing
of headsweep, and of the rest only the standard library and `packaging` (pip's own copy where the interpreter
has no other).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from email.parser import Parser
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.tags import sys_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version
except ImportError:  # a bare interpreter: pip vendors the same library
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.tags import sys_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
    from pip._vendor.packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]  # the checkout: scripts/..
PROVIDED = "torch"  # brought by the machine, never by the wheel folder


class WheelError(Exception):
    """What stops an offline install, in one line."""


@dataclass
class Wheel:
    name: str  # canonical
    version: Version
    path: Path
    requires: list[str] = field(default_factory=list)


def project_requirements(pyproject: Path = ROOT / "pyproject.toml", dev: bool = False) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    return [*project["dependencies"], *(project.get("optional-dependencies", {}).get("dev", []) if dev else [])]


def read_wheels(folder: Path, tags=None) -> dict[str, list[Wheel]]:
    """The wheels in `folder` this interpreter can install (by their tags), by canonical name, with their
    requirements read from each wheel's METADATA."""
    supported = set(tags if tags is not None else sys_tags())
    found: dict[str, list[Wheel]] = {}
    for path in sorted(folder.glob("*.whl")):
        name, version, _, wheel_tags = parse_wheel_filename(path.name)
        if not supported & set(wheel_tags):
            continue
        with zipfile.ZipFile(path) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            requires = Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []
        found.setdefault(name, []).append(Wheel(name, version, path, requires))
    return found


def installed_versions() -> dict[str, Version]:
    out = {}
    for dist in metadata.distributions():
        try:
            out[canonicalize_name(dist.metadata["Name"])] = Version(dist.version)
        except Exception:  # a broken dist-info is not ours to judge
            continue
    return out


def resolve(
    requirements: list[str],
    installed: dict[str, Version],
    wheels: dict[str, list[Wheel]],
    environment: dict | None = None,
) -> tuple[list[Wheel], list[str]]:
    """(the wheels pip will take from the folder, the requirements nothing satisfies, each with what needs
    it). An installed distribution that satisfies a requirement is kept (pip's only-if-needed); torch must
    be installed and satisfy it, whatever the folder holds."""
    take: dict[str, Wheel] = {}
    missing: list[str] = []
    todo = [(r, "headsweep") for r in requirements]
    seen: set[tuple[str, str]] = set()
    while todo:
        text, parent = todo.pop(0)
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({**(environment or {}), "extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if (name, str(req.specifier)) in seen:
            continue
        seen.add((name, str(req.specifier)))
        have = installed.get(name)
        if have is not None and req.specifier.contains(have, prereleases=True):
            continue
        if name == PROVIDED:
            found = f"torch {have} is installed" if have else "no torch is installed"
            raise WheelError(
                f"{parent} needs {req}, and {found} in {sys.executable}: install a CUDA build of PyTorch "
                f"that satisfies it first (this command never replaces the machine's torch)"
            )
        if name in take and req.specifier.contains(take[name].version, prereleases=True):
            continue
        candidates = sorted(
            (w for w in wheels.get(name, []) if req.specifier.contains(w.version, prereleases=True)),
            key=lambda w: w.version,
            reverse=True,
        )
        if not candidates:
            missing.append(f"{req} (needed by {parent})")
            continue
        take[name] = candidates[0]
        todo += [(r, f"{name} {candidates[0].version}") for r in candidates[0].requires]
    return list(take.values()), missing


def install(folder: Path, dev: bool = False, dry_run: bool = False) -> int:
    if not folder.is_dir():
        raise WheelError(
            f"no wheel folder at {folder}: make one on a machine with internet (make wheels WHEELS={folder})"
        )
    installed = installed_versions()
    extras = "[dev]" if dev else ""
    take, missing = resolve(project_requirements(dev=dev), installed, read_wheels(folder))
    if missing:
        raise WheelError(
            f"{folder} lacks {len(missing)} requirement(s) for this python ({sys.executable}): "
            f"{'; '.join(missing)}. Fetch them on a machine with internet: make wheels WHEELS={folder} "
            f"PYTHON_VERSION={sys.version_info.major}.{sys.version_info.minor}"
        )
    torch = installed[PROVIDED]
    print(f"torch {torch} stays; from {folder}: " + (", ".join(f"{w.name} {w.version}" for w in take) or "nothing"))
    if dry_run:
        return 0
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write(f"torch=={torch}\n")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        str(folder),
        "--no-build-isolation",
        "-c",
        constraints.name,
        "-e",
        f"{ROOT}{extras}",
    ]
    print("running: " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    after = installed_versions().get(PROVIDED)
    if after != torch:
        raise WheelError(f"torch changed from {torch} to {after}: pip replaced it; reinstall the machine's torch")
    return rc


def download(folder: Path, python_version: str, platforms: list[str], dev: bool = False) -> int:
    """Every requirement but torch's own, as wheels for that Python and platform, one at a time (pip download
    --no-deps), following each wheel's requirements; an sdist-only package is built into a wheel here."""
    folder.mkdir(parents=True, exist_ok=True)
    flags = [
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        *[f"--platform={p}" for p in platforms],
    ]
    env = {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
    }
    while True:
        wheels = read_wheels(folder, tags=_all_tags(folder))  # any tag: the wheels are for another interpreter
        _, missing = resolve(project_requirements(dev=dev), {PROVIDED: Version("999")}, wheels, env)
        if not missing:
            n = len(list(folder.glob("*.whl")))
            print(f"{folder}: every requirement but torch, for Python {python_version} ({n} wheels)")
            return 0
        req = missing[0].split(" (needed by")[0]
        print(f"fetching {req}", flush=True)
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *flags, "-d", str(folder), req]
        )
        if got.returncode:  # no wheel on the index (e.g. antlr4-python3-runtime 4.9.3): build a pure-Python one
            built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), req])
            if built.returncode:
                raise WheelError(f"no wheel of {req} for Python {python_version} could be fetched or built")


def _all_tags(folder: Path):
    """Every tag of the wheels present: `download` takes them as they are (pip chose them for the target)."""
    return {t for p in folder.glob("*.whl") for t in parse_wheel_filename(p.name)[3]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["download", "install"])
    parser.add_argument("--wheels", type=Path, required=True, help="the wheel folder")
    parser.add_argument("--dev", action="store_true", help="also the test tools (pytest, hypothesis, playwright)")
    parser.add_argument("--dry-run", action="store_true", help="install: check the folder and say what pip would take")
    parser.add_argument(
        "--python-version",
        default=f"{sys.version_info.major}.{sys.version_info.minor}",
        help="download: the node's Python, e.g. 3.12",
    )
    parser.add_argument(
        "--platform", action="append", default=None, help="download: pip platform tags (default: manylinux x86_64 ones)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            return install(args.wheels, args.dev, args.dry_run)
        platforms = args.platform or [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + [
            "manylinux2014_x86_64",
            "manylinux1_x86_64",
            "linux_x86_64",
        ]
        return download(args.wheels, args.python_version, platforms, args.dev)
    except WheelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
