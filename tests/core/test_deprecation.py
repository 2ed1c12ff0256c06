"""Old spellings kept for one release: each still works and says, in one line, what replaces it
(Python names with a DeprecationWarning, config keys naming file, table and key, options on
stderr), and giving an old and a new spelling at once is refused."""

from __future__ import annotations

import contextlib

from pathlib import Path

import pytest
from typer.testing import CliRunner

from difftest.analysis.verdict import Verdict
from difftest.cli import app
from difftest.config import ComparisonSpec, parse_config
from difftest.core.rules import Rules
from difftest.core.deprecation import DeprecatedKey, DeprecatedSpelling
from difftest.core.errors import ConfigError, UsageError
from difftest.core.kinds import Expect, VerdictKind
from tests.test_numerics_cli import small_config

runner = CliRunner()
ARMS = ('[arms.a]\ncommand = ["true"]\n[arms.b]\ncommand = ["true"]\n'
        '[comparisons.ab]\narm_a = "a"\narm_b = "b"\n')
GOES = "is deprecated and goes in difftest 0.3; use"


def test_a_verdicts_old_field_name_reads_its_kind_and_warns() -> None:
    v = Verdict(VerdictKind.DIFFER, Expect.SAME)
    with pytest.warns(DeprecatedSpelling, match=rf"`Verdict.verdict` {GOES} `Verdict.kind`"):
        assert v.verdict is v.kind is VerdictKind.DIFFER


def test_the_old_probe_key_reads_as_mutations_and_names_file_table_and_key(
        tmp_path: Path) -> None:
    path = tmp_path / "difftest.toml"
    with pytest.warns(DeprecatedKey) as seen:
        config = parse_config(ARMS + 'probe = ["causal-mask"]\n', path)
    assert [str(w.message) for w in seen] == [
        f"{path}: [comparisons.ab]: key `probe` {GOES} `mutations`"]
    spec = config.comparison("ab")
    assert spec.rules.mutations == ("causal-mask",)
    with pytest.warns(DeprecatedSpelling, match=rf"`ComparisonSpec.probe` {GOES}"):
        assert spec.probe == ("causal-mask",)
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
    assert not [w for w in recwarn if issubclass(w.category, (DeprecatedKey, DeprecatedSpelling))]


def test_the_command_line_says_an_old_config_key_in_one_stderr_line(tmp_path: Path) -> None:
    config = tmp_path / "difftest.toml"
    config.write_text(ARMS + 'probe = ["causal-mask"]\n')
    r = runner.invoke(app, ["cache", "list", "--config", str(config)],
                      env={"DIFFTEST_CACHE": str(tmp_path / "cache")})
    assert r.exit_code == 0, r.output
    assert r.stderr == (f"difftest: {config}: [comparisons.ab]: key `probe` {GOES} "
                        "`mutations`\n")
    assert "cached checkouts" in r.stdout  # the command ran, its report on stdout alone


def test_noise_runs_under_its_old_option_and_says_so_on_stderr(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    old = runner.invoke(app, ["noise", "--arm", "det", "--runs", "2", "--config", str(cfg),
                              "--run-root", str(tmp_path / "r"), "--no-progress"])
    assert old.exit_code == 0, old.output
    assert old.stderr == f"difftest: `--runs` {GOES} `--noise-runs`\n"
    assert old.stdout.startswith("noise det: A/A floor of det: zero (2 runs bit-identical)")
    both = runner.invoke(app, ["noise", "--arm", "det", "--runs", "2", "--noise-runs", "2",
                               "--config", str(cfg)])
    assert both.exit_code == 2
    assert "--runs and --noise-runs are one option; give --noise-runs only" in both.stderr


def test_the_api_takes_noise_runs_and_warns_on_runs(tmp_path: Path) -> None:
    from difftest import api

    cfg = small_config(tmp_path)
    with pytest.warns(DeprecatedSpelling, match=rf"`noise\(runs=...\)` {GOES}"), \
            pytest.raises(UsageError, match="--noise-runs must be an integer from 2"):
        api.noise("det", runs=1, config=cfg)  # refused before any run: the old name was read


def test_the_api_refuses_runs_and_noise_runs_together(tmp_path: Path) -> None:
    """The command line refuses both spellings at once; so does the API (it used the old one)."""
    from difftest import api

    with pytest.raises(UsageError, match="runs and noise_runs are one option"):
        api.noise("det", runs=2, noise_runs=5, config=small_config(tmp_path))
