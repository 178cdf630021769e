"""The offline install over a node's own torch (scripts/wheels.py), on the CPU: what the resolver takes
from a wheel folder against a fake preinstalled torch, and the one-line refusals (a folder that lacks a
dependency, a torch that is missing or too old), checked against real wheels built here."""

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

# scripts/wheels.py runs before headsweep is installed, so it is no module of the package: load it by path
_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "wheels.py"
_spec = importlib.util.spec_from_file_location("headsweep_wheels_script", _SCRIPT)
W = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)


def fake_wheel(folder, name, version, requires=(), tag="py3-none-any"):
    """A minimal wheel file: its name and tags in the file name, its requirements in METADATA."""
    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    meta = "".join(
        [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", *(f"Requires-Dist: {r}\n" for r in requires)]
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "wheels"
    d.mkdir()
    fake_wheel(d, "hydra-core", "1.3.2", ["omegaconf<2.4,>=2.2", "antlr4-python3-runtime==4.9.*", "packaging"])
    fake_wheel(d, "omegaconf", "2.3.0", ["antlr4-python3-runtime==4.9.*", "PyYAML>=5.1.0"])
    fake_wheel(d, "antlr4-python3-runtime", "4.9.3")
    fake_wheel(d, "pytorch-lightning", "2.6.0", ["torch>=2.1.0", "tqdm"])
    fake_wheel(d, "torch", "2.13.0", ["filelock"])  # a torch in the folder must never be taken
    return d


# A node: Python with its own CUDA build of torch and a few common packages, nothing of headsweep's.
NODE = {
    "torch": Version("2.11.0+cu130"),
    "packaging": Version("24.0"),
    "pyyaml": Version("6.0.2"),
    "tqdm": Version("4.67.0"),
}


def test_the_node_torch_stays_and_the_rest_comes_from_the_folder(folder):
    reqs = ["torch>=2.2", "pytorch-lightning>=2.4,<3", "hydra-core>=1.3,<1.4"]
    take, missing = W.resolve(reqs, NODE, W.read_wheels(folder))
    assert missing == []
    assert {(w.name, str(w.version)) for w in take} == {
        ("pytorch-lightning", "2.6.0"),
        ("hydra-core", "1.3.2"),
        ("omegaconf", "2.3.0"),
        ("antlr4-python3-runtime", "4.9.3"),
    }


def test_a_folder_that_lacks_a_dependency_names_it_and_what_needs_it(folder):
    (folder / "antlr4_python3_runtime-4.9.3-py3-none-any.whl").unlink()
    _, missing = W.resolve(["hydra-core>=1.3"], NODE, W.read_wheels(folder))
    assert missing == ["antlr4-python3-runtime==4.9.* (needed by hydra-core 1.3.2)"]


def test_an_installed_package_that_satisfies_is_kept_one_that_does_not_comes_from_the_folder(folder):
    old_yaml = {**NODE, "pyyaml": Version("5.0")}
    _, missing = W.resolve(["omegaconf>=2.3"], old_yaml, W.read_wheels(folder))
    assert missing == ["PyYAML>=5.1.0 (needed by omegaconf 2.3.0)"]


@pytest.mark.parametrize(
    "torch, says", [(None, "no torch is installed"), (Version("2.1.0"), "torch 2.1.0 is installed")]
)
def test_a_missing_or_old_torch_stops_in_one_line_and_is_never_taken_from_the_folder(folder, torch, says):
    node = {k: v for k, v in NODE.items() if k != "torch"} | ({"torch": torch} if torch else {})
    with pytest.raises(W.WheelError) as e:
        W.resolve(["torch>=2.2"], node, W.read_wheels(folder))
    assert says in str(e.value) and "never replaces the machine's torch" in str(e.value) and "\n" not in str(e.value)


def test_wheels_for_another_python_are_not_counted(folder):
    for p in folder.glob("omegaconf-*"):
        p.unlink()
    fake_wheel(folder, "omegaconf", "2.3.0", [], tag="cp27-cp27mu-manylinux1_x86_64")
    _, missing = W.resolve(["omegaconf>=2.3"], NODE, W.read_wheels(folder))
    assert missing == ["omegaconf>=2.3 (needed by headsweep)"]


def test_markers_for_other_pythons_are_skipped(folder):
    _, missing = W.resolve(['importlib-resources; python_version < "3.0"'], NODE, W.read_wheels(folder))
    assert missing == []


def test_install_on_a_node_checks_the_folder_before_pip_runs(folder, monkeypatch, capsys):
    """install() as on the node: its torch (faked here, 2.11.0+cu130) stays, the folder is checked first."""
    monkeypatch.setattr(W, "installed_versions", lambda: dict(NODE))
    monkeypatch.setattr(
        W, "project_requirements", lambda dev=False: ["torch>=2.2", "hydra-core>=1.3", "pytorch-lightning>=2.4"]
    )
    monkeypatch.setattr(W.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run in a dry run"))
    assert W.install(folder, dry_run=True) == 0
    out = capsys.readouterr().out
    assert out.startswith("torch 2.11.0+cu130 stays; from") and "hydra-core 1.3.2" in out and "torch 2.13.0" not in out
    (folder / "omegaconf-2.3.0-py3-none-any.whl").unlink()
    with pytest.raises(W.WheelError, match=r"lacks 1 requirement\(s\).*omegaconf<2.4,>=2.2 \(needed by hydra-core"):
        W.install(folder, dry_run=True)


def test_no_folder_at_all_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, str(_SCRIPT), "install", "--wheels", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "make wheels" in done.stderr
