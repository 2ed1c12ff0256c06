"""The old config key kept for one release (`probe`, now `mutations`: it is in users' files):
it still reads and says, in one line naming file, table and key, what replaces it, and giving
the old and the new key at once is refused."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from difftest.cli import app
from difftest.config import ComparisonSpec, parse_config
from difftest.core.rules import Rules
from difftest.core.deprecation import DeprecatedKey
from difftest.core.errors import ConfigError

runner = CliRunner()
ARMS = ('[arms.a]\ncommand = ["true"]\n[arms.b]\ncommand = ["true"]\n'
        '[comparisons.ab]\narm_a = "a"\narm_b = "b"\n')
GOES = "is deprecated and goes in difftest 0.3; use"


def test_the_old_probe_key_reads_as_mutations_and_names_file_table_and_key(
        tmp_path: Path) -> None:
    path = tmp_path / "difftest.toml"
    with pytest.warns(DeprecatedKey) as seen:
        config = parse_config(ARMS + 'probe = ["causal-mask"]\n', path)
    assert [str(w.message) for w in seen] == [
        f"{path}: [comparisons.ab]: key `probe` {GOES} `mutations`"]
    spec = config.comparison("ab")
    assert spec.rules.mutations == ("causal-mask",)
    with pytest.raises(ConfigError, match=r"\[comparisons.ab\]: keys 'probe' and 'mutations' "
                                          "are one key; give 'mutations' only"):
        parse_config(ARMS + 'probe = ["causal-mask"]\nmutations = ["causal-mask"]\n', path)


@pytest.mark.parametrize("key", ["probe", "mutations"])
@pytest.mark.parametrize("value, why", [('"causal-mask"', "must be a list of strings"),
                                        ('["bogus"]', "unknown mutation 'bogus'")])
def test_a_bad_value_is_named_by_the_key_as_written(tmp_path: Path, key: str, value: str,
                                                    why: str) -> None:
    with pytest.warns() if key == "probe" else contextlib.nullcontext():
        with pytest.raises(ConfigError, match=rf"\[comparisons.ab\]: key '{key}': {why}"):
            parse_config(ARMS + f"{key} = {value}\n", tmp_path / "difftest.toml")


def test_the_new_key_reads_without_a_warning(tmp_path: Path, recwarn: pytest.WarningsRecorder
                                             ) -> None:
    spec = parse_config(ARMS + 'mutations = ["causal-mask"]\n', tmp_path / "d.toml")
    assert spec.comparison("ab") == ComparisonSpec("ab", "a", "b",
                                                   Rules(mutations=("causal-mask",)))
    assert not [w for w in recwarn if issubclass(w.category, DeprecatedKey)]


def test_the_command_line_says_an_old_config_key_in_one_stderr_line(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(ARMS + 'probe = ["causal-mask"]\n')
    r = runner.invoke(app, ["cache", "list", "--config", str(config)],
                      env={"DIFFTEST_CACHE": str(tmp_path / "cache")})
    assert r.exit_code == 0, r.output
    assert r.stderr == (f"difftest: {config}: [comparisons.ab]: key `probe` {GOES} "
                        "`mutations`\n")
    assert "cached checkouts" in r.stdout  # the command ran, its report on stdout alone


def test_an_old_key_under_warnings_as_errors_is_a_config_error_not_a_traceback(
        tmp_path: Path) -> None:
    """PYTHONWARNINGS=error (and pytest's -W error) turn the old key's warning into an
    exception: the command line and the pytest plugin say so as a config error (exit 2,
    file, table and key), not an internal error."""
    import os
    import subprocess
    import sys

    config = tmp_path / "difftest.toml"
    config.write_text(ARMS + 'probe = ["causal-mask"]\n')
    said = (f"{config}: [comparisons.ab]: key 'probe' is the old spelling of 'mutations' (its "
            "deprecation warning is an error under this warnings filter): use 'mutations'")
    env = {**os.environ, "PYTHONWARNINGS": "error", "DIFFTEST_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "difftest", "cache", "list", "--config",
                           str(config)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"difftest: error: {said}\n"
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "error", "--difftest", "--difftest-config", str(config),
                           "--collect-only", "test_x.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "DIFFTEST_CACHE": str(tmp_path / "cache")})
    assert said in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
