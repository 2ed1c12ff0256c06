"""Config loading: the shipped files load, and every kind of bad input is named precisely."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from difftest.config import (BUILTIN_MUTATIONS, ArmSpec, AuditThresholds, MutationSpec,
                             default_config_path, load_config, parse_config)
from difftest.core.rules import Rules
from difftest.core.kinds import DecodingMode
from difftest.core.errors import ConfigError, ExitCode, UsageError
from conftest import git

DATA = Path(__file__).parent / "data" / "configs"
REPO = Path(__file__).resolve().parent.parent

ARM = '[arms.paged]\ncommand = ["python", "x.py"]\n'
TWO_ARMS = ARM + '[arms.other]\ncommand = ["python", "y.py"]\n'


# --- the shipped configs --------------------------------------------------------------------


def test_every_shipped_thresholds_file_records_its_machine_and_benign_rates() -> None:
    # a file without its machine cannot say whether it holds here (a bitwise file is bitwise on
    # one machine), and one without benign rates leaves the near-tie flip rate unjudged
    from difftest.core.thresholds import read_thresholds
    files = sorted((REPO / "difftest" / "configs").glob("*.thresholds.toml"))
    assert len(files) >= 13
    lacking = []
    for path in files:
        cal = read_thresholds(path).calibrated
        if cal is None or not cal.machine:
            lacking.append(f"{path.name}: no [machine]")
        elif cal.near_tie_flips is None:
            lacking.append(f"{path.name}: no [benign.near_tie_flips]")
    assert not lacking, "recalibrate with `difftest calibrate --config ... -c NAME`: " + \
        "; ".join(lacking)


def test_default_config_is_the_packaged_file() -> None:
    path = default_config_path()
    assert path == REPO / "difftest" / "configs" / "default.toml"
    assert (REPO / "configs" / "default.toml").resolve() == path


def test_default_config_arms_and_comparisons() -> None:
    cfg = load_config(default_config_path())
    assert list(cfg.arms) == ["paged", "materialized", "scalars-on", "scalars-off",
                              "paged-split", "paged-nondet", "sampled-target", "sampled-spec",
                              "sampled-target-t1", "sampled-spec-t1"]
    for name, arm in cfg.arms.items():
        assert arm.command[:3] == (sys.executable, "-m", "difftest.runners.reference")
        # the sampled arms are judged on their emitted streams and [spec-sample] lines
        assert arm.env["VT_SPEC_TRACE"] == ("1" if name.startswith("sampled-") else "3")
        assert arm.git_ref is None and arm.build is None
    sampled = cfg.comparisons["sampled"]
    assert (sampled.arm_a, sampled.arm_b, sampled.rules.decoding) == (
        "sampled-target", "sampled-spec", DecodingMode.SAMPLED)
    assert sampled.rules.toggle == ("spec",)
    assert "--no-spec" in cfg.arms["sampled-target"].command
    assert "--no-spec" not in cfg.arms["sampled-spec"].command
    # noise reuse is judged where the uniform decides drafts: temperature 1, top-p 1
    t1 = cfg.comparisons["sampled-t1"]
    assert (t1.arm_a, t1.arm_b, t1.rules.decoding, t1.rules.mutations) == (
        "sampled-target-t1", "sampled-spec-t1", DecodingMode.SAMPLED, ("noise-reuse",))
    for name in ("sampled-target-t1", "sampled-spec-t1"):
        argv = cfg.arms[name].command
        assert argv[argv.index("--temperature") + 1] == "1.0"
        assert argv[argv.index("--top-p") + 1] == "1.0"
    # the lanes are chosen as vllm.cpp chooses them, by VT_DFLASH_PAGED alone, and each arm's
    # evidence says what its output must show
    assert "--lane" not in cfg.arms["materialized"].command
    assert cfg.arms["materialized"].env["VT_DFLASH_PAGED"] == "0"
    assert cfg.arms["paged"].env["VT_DFLASH_PAGED"] == "1"
    assert [r.text for r in cfg.arms["materialized"].evidence][0] == "lane = materialized"
    assert cfg.comparison("lanes").rules.toggle == ("lane",)
    on, off = cfg.arms["scalars-on"].command, cfg.arms["scalars-off"].command
    assert on[on.index("--scalars") + 1] == "on" and off[off.index("--scalars") + 1] == "off"
    lanes, scalars = cfg.comparisons["lanes"], cfg.comparisons["scalars"]
    assert (lanes.arm_a, lanes.arm_b, lanes.rules.expect) == ("paged", "materialized", "same")
    assert lanes.rules.mutations == BUILTIN_MUTATIONS
    assert (scalars.arm_a, scalars.arm_b, scalars.rules.expect) == ("scalars-on", "scalars-off",
                                                              "differ")
    assert scalars.rules.min_differing == 1
    split, nondet = cfg.comparisons["split"], cfg.comparisons["nondet"]
    assert (split.arm_a, split.arm_b, split.rules.atol, split.rules.rtol) == (
        "paged-split", "materialized", 1e-5, 1e-5)
    assert (nondet.arm_a, nondet.rules.noise_runs, nondet.rules.atol, nondet.rules.rtol) == (
        "paged-nondet", 3, 0.0, 0.0)
    assert split.rules.mutations == nondet.rules.mutations == BUILTIN_MUTATIONS
    for name in ("paged-split", "paged-nondet"):
        assert cfg.arms[name].env["OMP_NUM_THREADS"] == "1"
    assert cfg.audit == AuditThresholds()


def test_degenerate_config_is_level_one_on_the_degenerate_fixture() -> None:
    cfg = load_config(REPO / "configs" / "degenerate.toml")
    default = load_config(default_config_path())
    # the default's arms and comparisons of the motivating case (the numerics lanes are
    # level-3 instruments and the sampled pair a distribution one: no degenerate twin)
    twinless = ("paged-split", "paged-nondet", "sampled-target", "sampled-spec",
                "sampled-target-t1", "sampled-spec-t1")
    assert list(cfg.arms) == [a for a in default.arms if a not in twinless]
    assert list(cfg.comparisons) == [c for c in default.comparisons
                                     if c not in ("split", "nondet", "sampled", "sampled-t1")]
    for name, arm in cfg.arms.items():
        assert arm.env["VT_SPEC_TRACE"] == "1"
        i = arm.command.index("--fixture")
        assert arm.command[i + 1] == "degenerate"
        # Apart from the fixture, the arm is the default one.
        other = list(default.arms[name].command)
        other[other.index("--fixture") + 1] = "degenerate"
        assert list(arm.command) == other
    assert cfg.comparisons["scalars"].rules.expect == "differ"


def test_vllm_cpp_example_config(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "vllm-cpp.toml", cwd=tmp_path)
    assert cfg.arms["paged"].env["VT_SPEC_TRACE"] == "1"
    assert cfg.arms["materialized"].env["VT_DFLASH_PAGED"] == "0"
    assert cfg.arms["materialized"].command[0].startswith("/path/to/")
    main, branch = cfg.arms["main"], cfg.arms["branch"]
    assert main.git_ref == "main" and branch.git_ref
    assert main.build and branch.build
    # A packaged config has no repository of its own: git_ref arms default to the caller's.
    assert main.repo == tmp_path.resolve()
    assert cfg.comparisons["main-vs-branch"].arm_a == "main"


def test_good_fixture_every_key() -> None:
    path = DATA / "good.toml"
    cfg = load_config(path)
    base = cfg.arms["base"]
    assert base.command == (sys.executable, "-c", "print('base')", f"--interp={sys.executable}")
    assert base.env == {"VT_SPEC_TRACE": "3", "NAME": "base"}
    assert base.cwd == DATA / "sub"
    assert base.timeout_s == 12.5
    assert cfg.arms["other"].cwd == Path("/tmp")
    co = cfg.arms["checkout"]
    assert (co.git_ref, co.build, co.cwd) == ("main", ("make", "-j2"), Path("tools"))
    assert co.repo == REPO
    pair = cfg.comparisons["pair"]
    assert (pair.rules.expect, pair.rules.min_differing, pair.rules.near_tie,
            pair.rules.atol) == ("differ", 3, 0.25, 1e-6)
    assert pair.rules.mutations == ("flip", "causal-mask")
    assert cfg.mutations["flip"] == MutationSpec("flip", env={"FLIP": "1"}, args=("--flip",))
    assert cfg.audit == AuditThresholds(4, 2.0, 0.5)


# --- errors: each names file, table and key --------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    pytest.param('[arms.paged]\ncommand = ["python"\n', "TOML syntax error", id="syntax"),
    pytest.param(ARM + '[arm.x]\n', "[arm]: unknown table (known: defaults, arms, comparisons, "
                 "mutations, audit, check)", id="unknown-table"),
    pytest.param("arms = 3\n", "[arms]: must be a table", id="arms-not-table"),
    pytest.param("[arms]\npaged = 3\n", "[arms]: key 'paged': must be a table", id="arm-not-table"),
    pytest.param(ARM + "timout_s = 10\n", "[arms.paged]: key 'timout_s': unknown key (known: "
                 "command, env, cwd, timeout_s, git_ref, build, repo, launcher, "
                 "max_capture_bytes, evidence, line_prefix, dtype)", id="unknown-arm-key"),
    pytest.param(ARM + 'timeout_s = "ten"\n', "[arms.paged]: key 'timeout_s': must be a number, "
                 "got a string ('ten')", id="timeout-string"),
    pytest.param(ARM + "timeout_s = true\n", "[arms.paged]: key 'timeout_s': must be a number",
                 id="timeout-bool"),
    pytest.param(ARM + "timeout_s = 0\n", "[arms.paged]: key 'timeout_s': must be > 0",
                 id="timeout-zero"),
    pytest.param(ARM + "timeout_s = -5\n", "[arms.paged]: key 'timeout_s': must be > 0",
                 id="timeout-negative"),
    pytest.param(ARM + "timeout_s = nan\n", "[arms.paged]: key 'timeout_s': must be a finite",
                 id="timeout-nan"),
    pytest.param('[arms.paged]\ncommand = "python x.py"\n', "[arms.paged]: key 'command': must be "
                 'an argv list of strings, not a shell string (write ["python", "x.py"])',
                 id="shell-string"),
    pytest.param('[arms.paged]\ncommand = []\n', "[arms.paged]: key 'command': must not be empty",
                 id="empty-command"),
    pytest.param('[arms.paged]\ncommand = ["python", 3]\n', "[arms.paged]: key 'command': item 1 "
                 "must be a string, got an integer (3)", id="command-int"),
    pytest.param('[arms.paged]\ncommand = ["", "x"]\n', "[arms.paged]: key 'command': the "
                 "program (item 0) must not be empty", id="command-blank"),
    pytest.param("[arms.paged]\nenv = {}\n", "[arms.paged]: key 'command': missing",
                 id="missing-command"),
    pytest.param(ARM + "env = { A = 1.5 }\n", "[arms.paged]: key 'env.A': must be a string or an "
                 "integer, got a float (1.5)", id="env-float"),
    pytest.param(ARM + "env = { A = true }\n", "[arms.paged]: key 'env.A': must be a string or an"
                 " integer, got a boolean", id="env-bool"),
    pytest.param(ARM + "env = { A = [1] }\n", "[arms.paged]: key 'env.A': must be a string",
                 id="env-list"),
    pytest.param(ARM + 'env = "A=1"\n', "[arms.paged]: key 'env': must be a table",
                 id="env-not-table"),
    pytest.param(ARM + "cwd = 3\n", "[arms.paged]: key 'cwd': must be a string", id="cwd-int"),
    pytest.param(ARM + 'build = ["make"]\n', "[arms.paged]: key 'build': only allowed together "
                 "with 'git_ref'", id="build-without-ref"),
    pytest.param(ARM + 'repo = "."\n', "[arms.paged]: key 'repo': only allowed together with "
                 "'git_ref'", id="repo-without-ref"),
    pytest.param(ARM + 'git_ref = "main"\nbuild = "make -j"\n', "[arms.paged]: key 'build': must "
                 "be an argv list of strings, not a shell string", id="build-shell"),
    pytest.param(ARM + 'git_ref = ""\n', "[arms.paged]: key 'git_ref': must not be empty",
                 id="ref-empty"),
    pytest.param(ARM + 'git_ref = "main"\ncwd = "/abs"\n', "[arms.paged]: key 'cwd': must be "
                 "relative for a git_ref arm", id="ref-abs-cwd"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\nexpect = "maybe"\n',
                 "[comparisons.c]: key 'expect': must be \"same\" or \"differ\", got 'maybe'",
                 id="expect-maybe"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\natol = -1\n',
                 "[comparisons.c]: key 'atol': must be >= 0, got -1", id="atol-negative"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\n'
                 "near_tie = -0.5\n", "[comparisons.c]: key 'near_tie': must be >= 0, got -0.5",
                 id="near-tie-negative"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\n'
                 "min_differing = 0\n", "[comparisons.c]: key 'min_differing': must be >= 1, "
                 "got 0", id="min-differing-zero"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\n'
                 "min_differing = 1.5\n", "[comparisons.c]: key 'min_differing': must be an "
                 "integer, got a float (1.5)", id="min-differing-float"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "materialised"\n',
                 "[comparisons.c]: key 'arm_b': no arm named 'materialised' (arms: paged, other)",
                 id="unknown-arm"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_b = "other"\n', "[comparisons.c]: key 'arm_a':"
                 " missing", id="missing-arm-a"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\nexpct = "same"\n',
                 "[comparisons.c]: key 'expct': unknown key (known: arm_a, arm_b, expect, "
                 "min_differing, near_tie, atol, rtol, noise_runs, mutations, drafting, toggle, "
                 "teacher_force, acceptance, tolerance, decoding, thresholds, calibration_inputs, "
                 "gate_input, localize_baseline)",
                 id="unknown-comparison-key"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\ndecoding = "random"\n',
                 "[comparisons.c]: key 'decoding': must be \"greedy\" or \"sampled\", got 'random'",
                 id="decoding-unknown"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\ndecoding = "sampled"\n'
                 'teacher_force = true\n', "[comparisons.c]: key 'decoding': a sampled comparison "
                 "draws its own tokens", id="decoding-sampled-forced"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\n'
                 'mutations = ["causal-mask", "flip-everything"]\n', "[comparisons.c]: key 'mutations': "
                 "unknown mutation 'flip-everything'", id="unknown-probe"),
    pytest.param(TWO_ARMS + '[comparisons.c]\narm_a = "paged"\narm_b = "other"\n'
                 'mutations = "causal-mask"\n', "[comparisons.c]: key 'mutations': must be a list",
                 id="probe-string"),
    pytest.param(ARM + '[mutations.m]\nenv = { X = "1" }\nargz = ["--x"]\n',
                 "[mutations.m]: key 'argz': unknown key (known: env, args)",
                 id="unknown-mutation-key"),
    pytest.param(ARM + '[mutations.m]\nargs = [1]\n', "[mutations.m]: key 'args': item 0 must be"
                 " a string", id="mutation-args-int"),
    pytest.param(ARM + "[audit]\nmin_entropy = 1\n", "[audit]: key 'min_entropy': unknown key "
                 "(known: min_distinct_ids, min_entropy_bits, max_blind_radius)",
                 id="unknown-audit-key"),
    pytest.param(ARM + '[audit]\nmin_distinct_ids = "2"\n', "[audit]: key 'min_distinct_ids': "
                 "must be an integer, got a string ('2')", id="audit-type"),
    pytest.param(ARM + "[audit]\nmin_distinct_ids = 0\n", "[audit]: key 'min_distinct_ids': "
                 "must be >= 1, got 0", id="audit-zero-distinct-ids"),
    pytest.param(ARM + "[audit]\nmax_blind_radius = -1\n", "[audit]: key 'max_blind_radius': "
                 "must be >= 0", id="audit-negative"),
    pytest.param(ARM + "[check]\nsweep = 1\n", "[check]: key 'sweep': must be true or false, got "
                 "an integer", id="check-sweep-int"),
    pytest.param(ARM + "[check]\nsweep_budget_s = 0\n", "[check]: key 'sweep_budget_s': must be "
                 "> 0, got 0", id="check-budget-zero"),
    pytest.param(ARM + "[check]\nsweep_seeds = 0\n", "[check]: key 'sweep_seeds': must be >= 1",
                 id="check-seeds-zero"),
    pytest.param(ARM + "[check]\nsweeps = true\n", "[check]: key 'sweeps': unknown key (known: "
                 "sweep, sweep_budget_s, sweep_seeds)", id="check-unknown-key"),
])
def test_bad_config_names_file_table_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "difftest.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message
    assert info.value.exit_code == ExitCode.USAGE


def test_the_check_table_switches_the_sweep_on_with_a_budget() -> None:
    cfg = parse_config(ARM + "[check]\nsweep = true\nsweep_budget_s = 90\nsweep_seeds = 2\n",
                       Path("d.toml"))
    assert (cfg.check.sweep, cfg.check.sweep_budget_s, cfg.check.sweep_seeds) == (True, 90.0, 2)
    plain = parse_config(ARM, Path("d.toml")).check
    assert (plain.sweep, plain.sweep_budget_s, plain.sweep_seeds) == (False, 300.0, 1)


def test_unknown_key_message_in_full() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(ARM + "timout_s = 10\n", Path("difftest.toml"))
    assert str(info.value) == ("difftest.toml: [arms.paged]: key 'timout_s': unknown key (known: "
                               "command, env, cwd, timeout_s, git_ref, build, repo, launcher, "
                               "max_capture_bytes, evidence, line_prefix, dtype)")


@pytest.mark.parametrize("name, expected", [
    ("bad_syntax.toml", "TOML syntax error"),
    ("bad_unknown_key.toml", "[arms.paged]: key 'timout_s': unknown key"),
    ("bad_shell_command.toml", "[arms.paged]: key 'command': must be an argv list"),
    ("bad_missing_arm.toml", "[comparisons.lanes]: key 'arm_b': no arm named 'materialised'"),
])
def test_bad_fixture_files(name: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(DATA / name)
    assert str(info.value).startswith(str(DATA / name)) and expected in str(info.value)


def test_missing_and_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)


def test_env_integers_become_strings() -> None:
    cfg = parse_config(ARM + "env = { VT_SPEC_TRACE = 3, B = -1, C = \"x\" }\n", Path("d.toml"))
    assert cfg.arms["paged"].env == {"VT_SPEC_TRACE": "3", "B": "-1", "C": "x"}


# --- substitution and paths ------------------------------------------------------------------


def test_python_token_is_replaced_anywhere() -> None:
    text = ('[arms.a]\ncommand = ["{python}", "-m", "m", "--py={python}", "{python}x"]\n'
            '[arms.b]\ngit_ref = "HEAD"\nbuild = ["{python}", "setup.py"]\ncommand = ["x"]\n'
            '[mutations.m]\nargs = ["--with={python}"]\n')
    cfg = parse_config(text, Path("d.toml"))
    exe = sys.executable
    assert cfg.arms["a"].command == (exe, "-m", "m", f"--py={exe}", f"{exe}x")
    assert cfg.arms["b"].build == (exe, "setup.py")
    assert cfg.mutations["m"].args == (f"--with={exe}",)


def test_cwd_is_relative_to_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (conf_dir / "c.toml").write_text(
        '[arms.rel]\ncommand = ["x"]\ncwd = "../work"\n'
        '[arms.dot]\ncommand = ["x"]\ncwd = "."\n'
        '[arms.abs]\ncommand = ["x"]\ncwd = "/var"\n'
        '[arms.none]\ncommand = ["x"]\n'
        '[arms.ref]\ncommand = ["x"]\ngit_ref = "main"\ncwd = "sub/dir"\n')
    monkeypatch.chdir(elsewhere)
    cfg = load_config(Path("../conf/c.toml"))
    assert cfg.arms["rel"].cwd == tmp_path.resolve() / "work"
    assert cfg.arms["dot"].cwd == conf_dir.resolve()
    assert cfg.arms["abs"].cwd == Path("/var")
    assert cfg.arms["none"].cwd is None
    assert cfg.arms["ref"].cwd == Path("sub/dir")  # stays relative: resolved in the worktree
    assert cfg.path == Path("../conf/c.toml")


def test_git_ref_repo_defaults_to_the_config_dirs_repository(tmp_path: Path) -> None:
    repo = tmp_path / "engine"
    (repo / "ci").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "ci" / "difftest.toml").write_text(
        '[arms.main]\ngit_ref = "main"\ncommand = ["x"]\n'
        '[arms.other]\ngit_ref = "main"\ncommand = ["x"]\nrepo = "../../other"\n')
    cfg = load_config(repo / "ci" / "difftest.toml")
    assert cfg.arms["main"].repo == repo.resolve()
    assert cfg.arms["other"].repo == (tmp_path / "other").resolve()
    # Outside any repository the directory itself is kept, for checkout_for to reject clearly.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "c.toml").write_text('[arms.main]\ngit_ref = "main"\ncommand = ["x"]\n')
    assert load_config(plain / "c.toml").arms["main"].repo == plain.resolve()


# --- discovery -------------------------------------------------------------------------------


def test_difftest_toml_in_cwd_is_found(tmp_path: Path) -> None:
    (tmp_path / "difftest.toml").write_text('[arms.local]\ncommand = ["x"]\n')
    cfg = load_config(cwd=tmp_path)
    assert list(cfg.arms) == ["local"]
    assert cfg.path == tmp_path / "difftest.toml"


def test_default_used_when_no_local_file(tmp_path: Path) -> None:
    cfg = load_config(cwd=tmp_path)
    assert cfg.path == default_config_path()
    assert "paged" in cfg.arms


def test_explicit_path_wins_over_local_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "difftest.toml").write_text('[arms.local]\ncommand = ["x"]\n')
    (tmp_path / "other.toml").write_text('[arms.explicit]\ncommand = ["x"]\n')
    assert list(load_config(Path("other.toml"), cwd=tmp_path).arms) == ["explicit"]
    monkeypatch.chdir(tmp_path)
    assert list(load_config().arms) == ["local"]
    assert list(load_config(Path("other.toml")).arms) == ["explicit"]


def test_broken_local_file_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    (tmp_path / "difftest.toml").write_text("[arms.x]\ncommand = 'x'\n")
    with pytest.raises(ConfigError, match=r"difftest\.toml: \[arms\.x\]: key 'command'"):
        load_config(cwd=tmp_path)


# --- lookups ---------------------------------------------------------------------------------


def test_unknown_arm_is_a_usage_error_naming_known_arms() -> None:
    cfg = load_config(default_config_path())
    assert cfg.arm("paged").name == "paged"
    with pytest.raises(UsageError) as info:
        cfg.arm("pagd")
    assert "unknown arm 'pagd'" in str(info.value)
    assert "paged, materialized, scalars-on, scalars-off" in str(info.value)
    assert info.value.exit_code == ExitCode.USAGE


def test_builtin_and_configured_mutations() -> None:
    cfg = load_config(DATA / "good.toml")
    for name in BUILTIN_MUTATIONS:
        assert cfg.mutation(name) == MutationSpec(name, env={"DIFFTEST_MUTATION": name}, args=())
    assert cfg.mutation("flip").args == ("--flip",)
    with pytest.raises(UsageError) as info:
        cfg.mutation("causal")
    assert "unknown mutation 'causal'" in str(info.value)
    assert "flip, causal-mask, skip-kv-write, stale-seq-lens" in str(info.value)


def test_configured_mutation_overrides_a_builtin_name() -> None:
    cfg = parse_config(ARM + '[mutations.causal-mask]\nargs = ["--no-mask"]\n', Path("d.toml"))
    assert cfg.mutation("causal-mask") == MutationSpec("causal-mask", env={}, args=("--no-mask",))


def test_mutation_apply_and_with_changes() -> None:
    arm = ArmSpec("paged", ["python", "-m", "r"], env={"VT_SPEC_TRACE": 3, "KEEP": "1"})
    assert arm.command == ("python", "-m", "r") and arm.env["VT_SPEC_TRACE"] == "3"
    mutated = MutationSpec("m", env={"VT_SPEC_TRACE": "1", "NEW": "x"}, args=("--bad",)).apply(arm)
    assert mutated.name == "paged+m"
    assert mutated.command == ("python", "-m", "r", "--bad")
    assert mutated.env == {"VT_SPEC_TRACE": "1", "KEEP": "1", "NEW": "x"}
    assert arm.command == ("python", "-m", "r")  # the base is untouched
    moved = arm.with_changes(cwd="sub", timeout_s=5)
    assert moved.cwd == Path("sub") and moved.timeout_s == 5 and moved.name == "paged"


def test_one_rule_for_thresholds_and_comparisons_wherever_they_come_from() -> None:
    """The loader, command-line overrides and re-judged run records all build these records,
    and the records check their own values: no reader can accept what another refuses."""
    from difftest import api
    from difftest.config import ComparisonSpec, InvalidValue

    with pytest.raises(InvalidValue, match="min_distinct_ids: must be >= 1, got 0"):
        AuditThresholds(min_distinct_ids=0)
    with pytest.raises(UsageError, match="audit threshold min_distinct_ids: must be >= 1"):
        api.audit(DATA.parent / "two_requests_level3.log", min_distinct_ids=0)
    spec = ComparisonSpec(name="c", arm_a="a", arm_b="b")
    with pytest.raises(InvalidValue, match="near_tie: must be a finite number >= 0, got nan"):
        dataclasses.replace(spec.rules, near_tie=float("nan"))
    with pytest.raises(InvalidValue, match="expect: must be \"same\" or \"differ\""):
        ComparisonSpec(name="c", arm_a="a", arm_b="b",
                       rules=Rules(expect="maybe"))  # type: ignore[arg-type]
