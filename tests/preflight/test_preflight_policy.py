"""Policy files: the nearest pyproject.toml's table, --policy FILE, and one-line errors (exit 78)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.preflight import policy
from gpudoctor.preflight.policy import UNLIMITED, Policy

pytestmark = pytest.mark.skipif(policy._toml() is None, reason="needs tomllib (3.11+) or tomli")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_nearest_pyproject_table(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n[tool.gpudoctor.preflight]\nmin_sm_activity = 40\n'
                                       'min_shm_bytes = "8GiB"\nwarnings_fail = ["shm-size", "PF402"]\n')
    sub = tmp_path / "src" / "pkg"
    sub.mkdir(parents=True)
    loaded = policy.load(None, cwd=sub)
    assert loaded.min_sm_activity == 40 and loaded.min_shm_bytes == 8 * 2**30
    assert loaded.source == "../../pyproject.toml [tool.gpudoctor.preflight]"
    assert loaded.escalates("warnings_fail", "PF403", "shm-size") and not loaded.escalates(
        "warnings_fail", "PF401", "usable-cores"
    )
    assert loaded.values() == {
        "min_sm_activity": 40.0,
        "min_shm_bytes": 8 * 2**30,
        "warnings_fail": ["shm-size", "PF402"],
    }


def test_a_nearer_pyproject_without_the_table_means_no_policy(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.gpudoctor.preflight]\nmin_sm_activity = 40\n")
    write(tmp_path / "inner" / "pyproject.toml", '[project]\nname = "inner"\n')
    assert policy.load(None, cwd=tmp_path / "inner") == Policy()


def test_another_tools_broken_pyproject_is_not_our_business(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.black\nline-length = \n")
    assert policy.load(None, cwd=tmp_path) == Policy()


def test_policy_file_top_level_or_table(tmp_path: Path) -> None:
    top = write(
        tmp_path / "gate.toml", 'max_data_wait_share = 0.05\nmin_memlock_bytes = "unlimited"\nignore = ["PF404"]\n'
    )
    loaded = policy.load(str(top), cwd=tmp_path)
    assert loaded.max_data_wait_share == 0.05 and loaded.min_memlock_bytes == UNLIMITED and loaded.ignore == ("PF404",)
    table = write(tmp_path / "t.toml", "[tool.gpudoctor.preflight]\nno_critical_findings = true\n")
    assert policy.load(str(table), cwd=tmp_path).no_critical_findings is True


@pytest.mark.parametrize("text, message", [
    ("min_sm_activty = 40\n", "unknown policy key 'min_sm_activty'"),
    ("min_sm_activity = 140\n", "min_sm_activity: must be between 0 and 100"),
    ("min_sm_activity = \"a lot\"\n", "min_sm_activity: expected a number"),
    ("max_data_wait_share = 5\n", "max_data_wait_share: must be between 0 and 1"),
    ("min_shm_bytes = \"lots\"\n", "expected a size such as 8GiB"),
    ("require_persistence_mode = 1\n", "expected true or false"),
    ("ignore = [\"PF999\"]\n", "no preflight item 'PF999'"),
    ("min_sm_activity = \n", "not valid TOML"),
    ("[tool.other]\nx = 1\n", "no [tool.gpudoctor.preflight] table"),
])
def test_bad_policy_is_one_line_and_exit_78(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "gate.toml", text)
    with pytest.raises(GpudoctorError) as info:
        policy.load(str(path), cwd=tmp_path)
    assert info.value.code == exitcodes.BAD_POLICY == 78
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(GpudoctorError, match="cannot read it") as info:
        policy.load(str(tmp_path / "nope.toml"))
    assert info.value.code == 78


def test_python_without_tomllib_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy, "_toml", lambda: None)
    path = write(tmp_path / "gate.toml", "min_sm_activity = 40\n")
    with pytest.raises(GpudoctorError, match=r"needs Python 3\.11"):
        policy.load(str(path))


@pytest.mark.parametrize(
    "text, value", [(4096, 4096), ("8GiB", 8 * 2**30), ("64m", 64_000_000), ("1.5 GiB", 3 * 2**29), ("512MiB", 2**29)]
)
def test_sizes(text, value) -> None:
    assert policy.parse_bytes(text) == value


# issue 27 item 8: a policy is small; reading one is bounded, and every value a real number

def test_policy_from_an_endless_file_is_refused_unread() -> None:
    with pytest.raises(GpudoctorError) as err:
        policy.load("/dev/zero")
    assert err.value.code == exitcodes.BAD_POLICY and "larger than" in str(err.value)


def test_policy_of_a_huge_comment_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "gate.toml"
    with open(big, "w") as fh:
        fh.write("min_sm_activity = 40\n")
        fh.write("#" + "x" * (policy.MAX_POLICY_BYTES + 10) + "\n")
    with pytest.raises(GpudoctorError) as err:
        policy.load(str(big), cwd=tmp_path)
    assert err.value.code == exitcodes.BAD_POLICY and "larger than" in str(err.value)


def test_a_huge_pyproject_is_refused_too(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml",
          "[tool.gpudoctor.preflight]\nmin_sm_activity = 40\n#" + "x" * (policy.MAX_POLICY_BYTES + 10) + "\n")
    with pytest.raises(GpudoctorError) as err:
        policy.load(None, cwd=tmp_path)
    assert err.value.code == exitcodes.BAD_POLICY


def test_deeply_nested_toml_is_a_bad_policy_not_a_crash(tmp_path: Path) -> None:
    nested = write(tmp_path / "gate.toml", "ignore = " + "[" * 1000 + "]" * 1000 + "\n")
    with pytest.raises(GpudoctorError) as err:
        policy.load(str(nested), cwd=tmp_path)
    assert err.value.code == exitcodes.BAD_POLICY and "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+nan"])
@pytest.mark.parametrize("key", ["min_sm_activity", "max_step_time_ms", "min_steps_per_s", "max_data_wait_share"])
def test_nan_and_infinity_are_not_thresholds(tmp_path: Path, key: str, value: str) -> None:
    gate = write(tmp_path / "gate.toml", f"{key} = {value}\n")
    with pytest.raises(GpudoctorError) as err:
        policy.load(str(gate), cwd=tmp_path)
    assert err.value.code == exitcodes.BAD_POLICY and key in str(err.value)


@pytest.mark.parametrize("text", ['"nan"', '"infGiB"', "1e400"])
def test_sizes_that_are_not_finite_are_refused(tmp_path: Path, text: str) -> None:
    gate = write(tmp_path / "gate.toml", f"min_shm_bytes = {text}\n")
    with pytest.raises(GpudoctorError) as err:
        policy.load(str(gate), cwd=tmp_path)
    assert err.value.code == exitcodes.BAD_POLICY
