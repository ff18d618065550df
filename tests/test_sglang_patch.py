"""recipes/gpu_env/sglang_patch.py with the real `patch` tool on a stand-in site-packages: an sglang dist-info and the
two regions of activation.cuh the patch touches, rebuilt from the patch's own "before" side (sglang is not in the CPU
test env)."""

import re
import shutil

import pytest

from recipes.gpu_env import sglang_patch

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch tool")]
HEADER = "sglang" / sglang_patch.HEADER


def _unpatched_hunks() -> str:
    """The lines the patch expects (context and removed), hunk after hunk, as sglang 0.5.12 has them."""
    text = sglang_patch.PATCH.read_text()
    lines = []
    for hunk in re.split(r"^@@.*@@\n", text, flags=re.MULTILINE)[1:]:
        lines += [line[1:] for line in hunk.splitlines() if line[:1] in (" ", "-")]
        lines += ["// (lines between the hunks)"] * 20
    return "\n".join(lines) + "\n"


@pytest.fixture
def site_dir(tmp_path):
    return _site(tmp_path, "0.5.12")


def _site(tmp_path, version):
    site = tmp_path / "site-packages"
    (site / f"sglang-{version}.dist-info").mkdir(parents=True)
    (site / f"sglang-{version}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.4\nName: sglang\n"
                                                                  f"Version: {version}\n")
    (site / HEADER).parent.mkdir(parents=True)
    (site / HEADER).write_text(_unpatched_hunks())
    return site


def test_the_patch_is_applied_once_and_recognised_after(site_dir):
    assert sglang_patch.header_is_patched(site_dir / "sglang") is False
    assert sglang_patch.apply(site_dir) == "applied"
    assert sglang_patch.header_is_patched(site_dir / "sglang") is True  # what the launch preflight checks
    patched = (site_dir / HEADER).read_text()
    assert "using kernel_fn_t = decltype(&act_and_mul_kernel" in patched
    assert "-> decltype(activation_kernel<ActivationKind::kSiLU" not in patched
    assert sglang_patch.apply(site_dir) == "already applied"
    assert (site_dir / HEADER).read_text() == patched  # the rerun changed nothing
    assert sorted(p.name for p in (site_dir / HEADER).parent.iterdir()) == ["activation.cuh"]  # no .orig/.rej


def test_another_sglang_version_is_refused(tmp_path):
    site = _site(tmp_path, "0.5.13")
    before = (site / HEADER).read_text()
    with pytest.raises(sglang_patch.PatchError, match="sglang 0.5.13 is installed but .* is for sglang 0.5.12"):
        sglang_patch.apply(site)
    assert (site / HEADER).read_text() == before


def test_a_header_that_differs_from_the_wheel_is_reported_not_half_patched(site_dir):
    (site_dir / HEADER).write_text("// some other activation.cuh\n")
    with pytest.raises(sglang_patch.PatchError, match="neither applies nor is applied"):
        sglang_patch.apply(site_dir)
    assert (site_dir / HEADER).read_text() == "// some other activation.cuh\n"


def test_no_sglang_is_an_error(tmp_path):
    with pytest.raises(sglang_patch.PatchError, match="no sglang installed"):
        sglang_patch.apply(tmp_path)


def test_the_command_line_says_what_it_did(site_dir, capsys):
    assert sglang_patch.main([str(site_dir)]) == 0
    assert sglang_patch.main([str(site_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"[sglang_patch] {sglang_patch.PATCH.name}: applied",
                   f"[sglang_patch] {sglang_patch.PATCH.name}: already applied"]
